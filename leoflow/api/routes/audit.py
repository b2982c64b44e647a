"""``GET /api/v2/audit`` (admin): the API's writes, newest first — who changed what, when, from where.

Filters ``actor`` (a token's name) and ``dag_id``. Rows are written by every audited write in the
same transaction as the change (:func:`leoflow.api.audit.audited_transaction`), so the log holds
exactly the writes that committed.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.endpoint import api_state
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.operations import Operations
from leoflow.api.url_params import page, query_cursor, query_id, query_limit, query_text
from leoflow.db.stores import audit as audit_store
from leoflow.model.limits import DAG_ID

OPERATIONS = Operations()


@OPERATIONS("GET", "/api/v2/audit", "List audit events", oas.json_answer("200", "AuditPage"), errors="400",
            auth="admin", params=[oas.LIMIT, oas.CURSOR,
                                  oas.param("actor", "query", oas.STR, "Only this token name's writes"),
                                  oas.param("dag_id", "query", oas.STR, "Only writes to this DAG")])
async def list_audit(request: Request) -> Response:
    limit = query_limit(request)
    before = query_cursor(request, "audit", int)
    actor = query_text(request, "actor", 100)
    dag_id = query_id(request, "dag_id", DAG_ID)
    async with api_state(request).db.connect() as conn:
        rows = await audit_store.list_events(conn, before_id=before, limit=limit, actor=actor, dag_id=dag_id)
    return JsonResponse(page(rows, limit, lambda r: r["id"], "audit"))
