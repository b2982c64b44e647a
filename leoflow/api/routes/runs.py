"""Run and task routes: trigger, list, show, cancel; task instances and tries (logs: :mod:`.logs`)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.access import readable
from leoflow.api.audit import audited_transaction
from leoflow.api.endpoint import api_state, read_document
from leoflow.api.errors import ApiError, bad_field
from leoflow.api.jsonresp import JsonResponse, RenderedJsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import runs as run_schemas
from leoflow.api.operations import Operations
from leoflow.api.routes.dags import DAG, not_found, path_dag_id
from leoflow.api.run_waits import Waiters, etag_of, parse_wait, pause
from leoflow.api.url_params import page, query_cursor, query_limit, query_map_index, query_state
from leoflow.clock import SystemClock
from leoflow.db.stores import dag_versions
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.db.stores.runs import reads as run_reads
from leoflow.db.stores.task_instances import reads as ti_reads
from leoflow.db.stores.waits import approvals as wait_reads
from leoflow.model.limits import RUN_ID, TASK_ID
from leoflow.model.run_request import parse_run_request
from leoflow.model.spec.params import validate_conf
from leoflow.model.states import RUN_STATES, TASK_STATES, TERMINAL_RUN_STATES
from leoflow.tracing.asgi import request_names_run

PUBLIC_RUN = ("dag_id", "run_id", "run_type", "state", "logical_date", "conf", "created_at", "started_at",
               "ended_at", "updated_at", "dag_version", "reason", "backfill_id", "deadline_at", "body_state",
               "triggering_events", "data_interval_start", "data_interval_end")


def _run(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in PUBLIC_RUN}
    if "tasks" in row:
        out["tasks"] = row["tasks"]
    return out


def _ti(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "id"}


def path_run_id(request: Request) -> str:
    run_id: str = request.path_params["run_id"]
    if not RUN_ID.matches(run_id):
        raise ApiError(404, f"run {run_id[:60]!r} not found")
    return run_id


async def _run_or_404(request: Request, conn: Any, *, with_tasks: bool) -> dict[str, Any]:
    dag_id = path_dag_id(request)
    run_id = path_run_id(request)
    run = await run_reads.get_run(conn, dag_id, run_id, with_tasks=with_tasks)
    if run is None:
        if not await dag_store.dag_exists(conn, dag_id):
            raise not_found(dag_id)
        raise ApiError(404, f"run {run_id!r} of DAG {dag_id!r} not found")
    return run


OPERATIONS = Operations()

RUN = DAG + "/runs/{run_id}"
TASK = RUN + "/tasks/{task_id}"


@OPERATIONS("POST", DAG + "/runs", "Trigger run", oas.json_answer("201", "RunDetail", "Created", run_schemas.RUN_LINKS),
            body="RunRequest", body_required=False, auth="admin", errors="404 409", params=[oas.DAG_ID])
async def trigger_run(request: Request) -> Response:
    """Queue a manual run; its conf is checked against (and completed from) the DAG's ``params``."""
    dag_id = path_dag_id(request)
    wanted = parse_run_request(await read_document(request))
    conf = wanted.conf
    async with audited_transaction(request, status=201) as write:
        target = await dag_versions.trigger_target(write.conn, dag_id, lock=True)
        if target is None:
            raise not_found(dag_id)
        if target.params is not None:
            conf = await checked_conf(target.params, conf)
        created = await run_store.trigger_run(write.conn, dag_id, run_id=wanted.run_id, conf=conf,
                                              clock=SystemClock(), run_timeout_seconds=wanted.run_timeout_seconds,
                                              logical_date=wanted.logical_date)
        write.details["run_id"] = write.run_id = created
        run = await run_reads.get_run(write.conn, dag_id, created)
    assert run is not None
    request_names_run(dag_id, created)  # the request's span joins the new run's trace (leoflow.tracing.asgi)
    return JsonResponse(_run(run), status_code=201)


#: Seconds a conf may take to validate against ``params``: a backstop (patterns run in RE2 and a
#: validation has its own budget of steps, :mod:`leoflow.model.spec.params_validator`, well under this
#: on an idle replica), so a request never waits longer, however loaded the replica is.
PARAMS_CHECK_TIMEOUT = 2.0


async def checked_conf(params: dict[str, Any], conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` completed with defaults and validated, off the event loop and within a deadline."""
    try:
        async with asyncio.timeout(PARAMS_CHECK_TIMEOUT):
            return await asyncio.to_thread(validate_conf, params, conf)
    except TimeoutError:
        raise bad_field("conf", f"could not be checked against the DAG's params within {PARAMS_CHECK_TIMEOUT:g} s; "
                        "simplify the schema or send a smaller conf", status=422) from None


@OPERATIONS("GET", DAG + "/runs", "List runs", oas.json_answer("200", "RunPage"), errors="400 404",
            params=[oas.DAG_ID, oas.LIMIT, oas.CURSOR, oas.state(RUN_STATES)])
async def list_runs(request: Request) -> Response:
    dag_id = path_dag_id(request)
    limit = query_limit(request)
    state = query_state(request, RUN_STATES)
    before = query_cursor(request, "runs", int)
    async with api_state(request).db.connect() as conn:
        rows = await run_reads.list_runs(conn, dag_id, before_id=before, limit=limit, state=state)
        if not rows and not await dag_store.dag_exists(conn, dag_id):
            raise not_found(dag_id)
    result = page(rows, limit, lambda r: r["id"], "runs")
    result["items"] = [_run(r) for r in result["items"]]
    return JsonResponse(result)


@OPERATIONS("GET", "/api/v2/runs", "List runs of every DAG", oas.json_answer("200", "RunPage"), errors="400",
            params=[oas.LIMIT, oas.CURSOR, oas.state(RUN_STATES),
                    oas.param("dag_id", "query", {"type": "string"}, "Only this DAG's runs"),
                    oas.param("since", "query", {"type": "string", "maxLength": 40},
                              "Only runs created at or after this ISO 8601 date (midnight UTC) or time")])
async def list_runs_of_every_dag(request: Request) -> Response:
    """What runs anywhere: every DAG's runs, newest first, paged like one DAG's (``leoflow runs list``).

    ``dag_id`` narrows it to one DAG (an unknown one has no runs: an empty page, not a 404).
    """
    limit = query_limit(request)
    state = query_state(request, RUN_STATES)
    since = query_since(request)
    dag_id = request.query_params.get("dag_id") or None
    before = query_cursor(request, "runs", int)
    async with api_state(request).db.connect() as conn:
        rows = await run_reads.list_runs_of_every_dag(conn, before_id=before, limit=limit, state=state, since=since,
                                                        dag_id=dag_id)
    result = page(rows, limit, lambda r: r["id"], "runs")
    result["items"] = [_run(r) for r in await readable(request, result["items"])]  # other teams' runs: unseen
    return JsonResponse(result)


#: An ISO 8601 time is at most ``2026-01-01T00:00:00.000000+00:00`` (32 characters); a little slack.
_SINCE_CHARS = 40


def query_since(request: Request) -> datetime | None:
    """``since``: an ISO 8601 date (midnight UTC) or time (UTC when it names no offset); 400 otherwise."""
    raw = request.query_params.get("since")
    if not raw:
        return None
    try:
        if len(raw) > _SINCE_CHARS:
            raise ValueError(raw)
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise bad_field("since", "must be an ISO 8601 date or time, e.g. 2026-01-01 or 2026-01-01T12:00:00Z") \
            from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@OPERATIONS("GET", RUN, "Get run", oas.json_answer("200", "RunDetail"), errors="400 404", params=[
    *oas.RUN_PATH,
    oas.param("wait", "query", {"type": "number", "minimum": 0, "maximum": 30},
              "With If-None-Match: seconds to wait for the run to change (304 if it does not)"),
    oas.param("If-None-Match", "header", {"type": "string"}, "The ETag of the document the client has")],
    extend=run_schemas.etag_answers)
async def get_run(request: Request) -> Response:
    """The hot read: PostgreSQL renders the document, the bytes pass through.

    With ``wait`` and ``If-None-Match``, a long poll (:mod:`leoflow.api.run_waits`).
    """
    dag_id = path_dag_id(request)
    run_id = path_run_id(request)
    state = api_state(request)
    # Most reads carry no query string: skip parsing one (QueryParams) for them.
    wait = parse_wait(request.query_params.get("wait"), state.request_timeout) if request.scope["query_string"] else 0.0
    known = request.headers.get("if-none-match")
    waiters: Waiters = request.app.state.run_waiters
    admitted = wait > 0 and known is not None and waiters.admit()
    try:
        deadline = time.monotonic() + wait
        checks = 0
        while True:
            async with state.db.raw() as conn:
                document = await run_store.run_document(conn, dag_id, run_id)
                if document is None and not await dag_store.dag_exists(conn, dag_id):
                    raise not_found(dag_id)
            if document is None:
                raise ApiError(404, f"run {run_id!r} of DAG {dag_id!r} not found")
            etag = etag_of(document)
            if etag != known:
                return RenderedJsonResponse(document, etag)
            if not admitted or time.monotonic() >= deadline or _ended(document):
                return Response(status_code=304, headers={"ETag": etag})
            await pause(checks)
            checks += 1
    finally:
        if admitted:
            waiters.leave()


def _ended(document: str) -> bool:
    """Whether the rendered run is in a terminal state (it will not change by itself)."""
    return json.loads(document).get("state") in TERMINAL_RUN_STATES


@OPERATIONS("POST", RUN + "/cancel", "Cancel run", oas.json_answer("200", "RunDetail"), auth="admin",
            errors="404 409", params=oas.RUN_PATH)
async def cancel_run(request: Request) -> Response:
    dag_id = path_dag_id(request)
    run_id = path_run_id(request)
    async with audited_transaction(request) as write:
        await run_store.cancel_run(write.conn, dag_id, run_id)
        run = await run_reads.get_run(write.conn, dag_id, run_id)
    assert run is not None
    return JsonResponse(_run(run))


@OPERATIONS("GET", RUN + "/tasks", "List task instances", oas.json_answer("200", "TaskInstancePage"),
            errors="400 404", params=[*oas.RUN_PATH, oas.LIMIT, oas.CURSOR, oas.state(TASK_STATES)])
async def list_tasks(request: Request) -> Response:
    limit = query_limit(request)
    state = query_state(request, TASK_STATES)
    after = query_cursor(request, "tasks", str)
    async with api_state(request).db.connect() as conn:
        run = await _run_or_404(request, conn, with_tasks=False)
        rows = await ti_reads.list_task_instances(conn, run["id"], after=after, limit=limit, state=state)
    result = page(rows, limit, lambda r: r["task_id"], "tasks")
    result["items"] = [_ti(r) for r in result["items"]]
    return JsonResponse(result)


@OPERATIONS("GET", "/api/v2/task-instances", "List task instances of every run",
            oas.json_answer("200", "TaskInstanceAnywherePage"), errors="400",
            params=[oas.LIMIT, oas.CURSOR, oas.state(TASK_STATES),
                    oas.param("dag_id", "query", {"type": "string"}, "Only this DAG's task instances"),
                    oas.param("since", "query", {"type": "string", "maxLength": 40},
                              "Only task instances of runs created at or after this ISO 8601 date "
                              "(midnight UTC) or time")])
async def list_tasks_of_every_run(request: Request) -> Response:
    """Task instances anywhere, newest first (``leoflow tasks list --state failed``): filters as
    :func:`list_runs_of_every_dag`'s, ``since`` counting from the run's creation."""
    limit = query_limit(request)
    state = query_state(request, TASK_STATES)
    since = query_since(request)
    dag_id = request.query_params.get("dag_id") or None
    before = query_cursor(request, "task-instances", int)
    async with api_state(request).db.connect() as conn:
        rows = await ti_reads.list_task_instances_of_every_run(conn, before_id=before, limit=limit, state=state,
                                                                  since=since, dag_id=dag_id)
    result = page(rows, limit, lambda r: r["id"], "task-instances")
    result["items"] = [_ti(r) for r in await readable(request, result["items"])]  # other teams' tasks: unseen
    return JsonResponse(result)


async def task_or_404(request: Request, conn: Any) -> dict[str, Any]:
    map_index = query_map_index(request)  # a bad index is a 400 whatever exists (as a bad ?try=)
    run = await _run_or_404(request, conn, with_tasks=False)
    task_id: str = request.path_params["task_id"]
    ti = await ti_reads.get_task_instance(conn, run["id"], task_id, map_index) if TASK_ID.matches(task_id) else None
    if ti is None and map_index is not None and TASK_ID.matches(task_id):
        raise ApiError(404, f"task {task_id[:60]!r} of run {run['run_id']!r} has no instance {map_index}")
    if ti is None:
        raise ApiError(404, f"task {task_id[:60]!r} not found in run {run['run_id']!r}")
    return ti


@OPERATIONS("GET", TASK, "Get task instance", oas.json_answer("200", "TaskDetail"), errors="400 404",
            params=[*oas.RUN_PATH, oas.TASK_ID, oas.MAP_INDEX])
async def get_task(request: Request) -> Response:
    async with api_state(request).db.connect() as conn:
        ti = await task_or_404(request, conn)
        waits = await wait_reads.waiting_for(conn, [ti["id"]])
    return JsonResponse({**_ti(ti), "waiting_for": waits.get(ti["id"], [])})
