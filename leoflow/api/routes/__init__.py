"""The API's route handlers, one module per resource (DAGs, versions, runs, commands, logs,
outputs, backfills, pools, notifications and audit, the cluster, the probes and the document).

A handler is a plain ``async def handler(request) -> Response``; :mod:`leoflow.api.app` puts
it in the routing table, :mod:`leoflow.api.endpoint` wraps it with auth and the error boundary.
"""
