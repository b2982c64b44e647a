"""The OpenAPI document of the HTTP API, one module per resource (:mod:`.document` assembles it).

:mod:`.components` holds what every resource shares (schema blocks, error answers, common
parameters, :func:`~.components.op`); each resource module (``dags``, ``runs``, ``pools`` …)
holds its schemas and operations and imports only ``components`` (``versions`` also
:mod:`.dags`, for the flag beside a spec).
"""
