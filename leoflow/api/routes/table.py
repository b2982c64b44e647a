"""Every operation the API serves, in the order the router tries them.

Starlette tries routes in order, so the hottest reads (a run, a DAG's runs) come first; no two
path templates overlap, so the order changes nothing else. The app's routing table and the
OpenAPI document are both read from :data:`OPERATIONS`.
"""

from __future__ import annotations

from leoflow.api.operations import Operation
from leoflow.api.routes import (
    approvals,
    artifacts,
    audit,
    backfills,
    cluster,
    commands,
    dag_sync,
    dags,
    datasets,
    logs,
    notifications,
    outputs,
    pools,
    runs,
    system,
    templates,
    tokens,
    versions,
)

OPERATIONS: tuple[Operation, ...] = tuple(
    operation for module in (runs, logs, outputs, commands, system, cluster, dags, dag_sync, versions, backfills,
                             notifications, audit, pools, tokens, templates, datasets, approvals,
                             artifacts)
    for operation in module.OPERATIONS)
