"""Backfill routes: start one, list and show a DAG's backfills, cancel one.

``POST /api/v2/dags/{dag_id}/backfill {start, end, max_active_runs?, rerun_failed?}`` checks
the request against the DAG's current schedule (:mod:`leoflow.model.backfill`: a 422 names the
field for an empty, future or oversized range) and records a *running* backfill; the leader's
backfill service creates its runs (:mod:`leoflow.backfill.service`), so the answer comes at
once and the progress is read with ``GET …/backfills/{id}``. A DAG has at most one running
backfill (409 otherwise). Cancelling stops new runs and cancels the backfill's queued runs;
runs already running finish (cancel them with ``runs cancel`` if needed), as Airflow does.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.audit import audited_transaction
from leoflow.api.endpoint import api_state, read_document, require_object
from leoflow.api.errors import ApiError
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import backfills as backfill_schemas
from leoflow.api.openapi import components as oas
from leoflow.api.operations import Operations
from leoflow.api.routes.dags import DAG, not_found, path_dag_id
from leoflow.api.url_params import page, path_id, query_cursor, query_limit
from leoflow.clock import SystemClock
from leoflow.db.stores import backfills as backfill_store
from leoflow.db.stores import dag_versions
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.backfills import NewBackfill
from leoflow.errors import ValidationFailed
from leoflow.model.backfill import backfill_slots, check_slots, parse_backfill_request


def path_backfill_id(request: Request) -> int:
    return path_id(request, "backfill_id", "backfill")


OPERATIONS = Operations()

BACKFILL = DAG + "/backfills/{backfill_id}"


@OPERATIONS("POST", DAG + "/backfill", "Start backfill", oas.json_answer("201", "Backfill", "Created"),
            body="BackfillRequest", auth="admin", errors="404 409", params=[oas.DAG_ID])
async def create_backfill(request: Request) -> Response:
    dag_id = path_dag_id(request)
    document = await read_document(request)
    body = require_object({} if document is None else document)
    async with audited_transaction(request, status=201) as write:
        target = await dag_versions.trigger_target(write.conn, dag_id, lock=True)
        if target is None:
            raise not_found(dag_id)
        if target.schedule is None:
            raise ValidationFailed("dag_id", f"DAG {dag_id!r} has no schedule; only scheduled DAGs have slots to "
                                   "backfill (trigger runs instead)")
        wanted = parse_backfill_request(body, target.timezone)
        slots = backfill_slots(target.schedule, target.timezone, wanted.start, wanted.end)
        check_slots(slots, schedule=target.schedule, now=SystemClock().now(), end=wanted.end)
        principal = request.state.principal
        backfill_id = await backfill_store.create_backfill(write.conn, NewBackfill(
            dag_id=dag_id, start_at=wanted.start, end_at=wanted.end, first_slot=slots[0], slots_total=len(slots),
            max_active_runs=wanted.max_active_runs, rerun_failed=wanted.rerun_failed, created_by=principal.name))
        write.details.update(backfill_id=backfill_id, slots=len(slots))
        backfill = await backfill_store.get_backfill(write.conn, dag_id, backfill_id)
    assert backfill is not None
    return JsonResponse(backfill, status_code=201)


@OPERATIONS("GET", DAG + "/backfills", "List backfills", oas.json_answer("200", "BackfillPage"),
            errors="400 404", params=[oas.DAG_ID, oas.LIMIT, oas.CURSOR])
async def list_backfills(request: Request) -> Response:
    dag_id = path_dag_id(request)
    limit = query_limit(request)
    before = query_cursor(request, "backfills", int)
    async with api_state(request).db.connect() as conn:
        rows = await backfill_store.list_backfills(conn, dag_id, before_id=before, limit=limit)
        if not rows and not await dag_store.dag_exists(conn, dag_id):
            raise not_found(dag_id)
    return JsonResponse(page(rows, limit, lambda r: r["id"], "backfills"))


async def _backfill_or_404(conn: Any, dag_id: str, backfill_id: int) -> dict[str, Any]:
    backfill = await backfill_store.get_backfill(conn, dag_id, backfill_id)
    if backfill is None:
        raise ApiError(404, f"backfill {backfill_id} of DAG {dag_id!r} not found")
    return backfill


@OPERATIONS("GET", BACKFILL, "Get backfill", oas.json_answer("200", "Backfill"), errors="404",
            params=[oas.DAG_ID, backfill_schemas.BACKFILL_ID])
async def get_backfill(request: Request) -> Response:
    dag_id = path_dag_id(request)
    backfill_id = path_backfill_id(request)
    async with api_state(request).db.connect() as conn:
        return JsonResponse(await _backfill_or_404(conn, dag_id, backfill_id))


@OPERATIONS("POST", BACKFILL + "/cancel", "Cancel backfill", oas.json_answer("200", "Backfill"), auth="admin",
            errors="404 409", params=[oas.DAG_ID, backfill_schemas.BACKFILL_ID])
async def cancel_backfill(request: Request) -> Response:
    dag_id = path_dag_id(request)
    backfill_id = path_backfill_id(request)
    async with audited_transaction(request) as write:
        write.details["backfill_id"] = backfill_id
        await backfill_store.cancel_backfill(write.conn, dag_id, backfill_id)
        backfill = await _backfill_or_404(write.conn, dag_id, backfill_id)
    return JsonResponse(backfill)
