"""Notification routes: the outbox's delivery state, and a manual retry.

``GET /api/v2/notifications`` (read) lists deliveries newest first with their state
(``pending``, ``delivered``, ``failed``), attempts, last HTTP status and error; filters
``dag_id``, ``run_id``, ``state``. The cluster default webhook's URL is never shown (it is a
secret); a DAG rule's URL is shown to admin tokens and masked for read tokens
(``scheme://host/<hidden>``, as in the DAG's spec). ``last_error`` is a fixed reason and the
status (``HTTP 500``, ``timed out``, ``could not connect``, ``destination not allowed``), never
what a receiver answered. ``POST
/api/v2/notifications/{id}/retry`` (admin) makes a pending or failed delivery due now, with a
fresh 24 h of retries. ``GET /api/v2/audit`` (admin) lists API writes, newest first, filters
``actor`` and ``dag_id``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.access import readable
from leoflow.api.audit import audited_transaction
from leoflow.api.endpoint import api_state
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import notifications as notification_schemas
from leoflow.api.operations import Operations
from leoflow.api.url_params import page, path_id, query_cursor, query_id, query_limit, query_state
from leoflow.clock import SystemClock
from leoflow.db.stores import notifications as notification_store
from leoflow.model.limits import DAG_ID, RUN_ID
from leoflow.model.spec.notify import masked_url, shown_error
from leoflow.model.states import NOTIFICATION_STATES

#: A manual retry gives a notification this long again (as much as a new one gets).
RETRY_WINDOW = timedelta(hours=24)


OPERATIONS = Operations()


@OPERATIONS("GET", "/api/v2/notifications", "List notifications", oas.json_answer("200", "NotificationPage"),
            errors="400", params=[oas.LIMIT, oas.CURSOR, oas.state(NOTIFICATION_STATES),
                                  oas.param("dag_id", "query", oas.STR, "Only this DAG's"),
                                  oas.param("run_id", "query", oas.STR, "Only this run's (with dag_id)")])
async def list_notifications(request: Request) -> Response:
    limit = query_limit(request)
    state = query_state(request, NOTIFICATION_STATES)
    before = query_cursor(request, "notifications", int)
    dag_id = query_id(request, "dag_id", DAG_ID)
    run_id = query_id(request, "run_id", RUN_ID)
    async with api_state(request).db.connect() as conn:
        rows = await notification_store.list_notifications(conn, dag_id=dag_id, run_id=run_id, state=state,
                                                           before_id=before, limit=limit)
    read_only = request.state.principal.scope != "admin"
    answer = page([shown(row, read_only=read_only) for row in rows], limit, lambda r: r["id"], "notifications")
    answer["items"] = await readable(request, answer["items"])  # other teams' notifications: unseen
    return JsonResponse(answer)


@OPERATIONS("POST", "/api/v2/notifications/{notification_id}/retry", "Retry notification",
            oas.json_answer("200", "Notification"), auth="admin", errors="404 409",
            params=[notification_schemas.NOTIFICATION_ID])
async def retry_notification(request: Request) -> Response:
    notification_id = path_id(request, "notification_id", "notification")
    async with audited_transaction(request) as write:
        write.details["notification_id"] = notification_id
        await notification_store.retry_notification(write.conn, notification_id, SystemClock().now() + RETRY_WINDOW)
        row = await notification_store.get_notification(write.conn, notification_id)
    assert row is not None
    return JsonResponse(shown(row, read_only=False))


def shown(row: dict[str, Any], *, read_only: bool) -> dict[str, Any]:
    """A delivery as the caller may see it: a fixed error reason, never a receiver's answer; for a
    read token the rule's URL masked (a webhook URL's path is often its credential)."""
    row["last_error"] = shown_error(row.get("last_error"))
    if read_only and row.get("url"):
        row["url"] = masked_url(row["url"])
    return row
