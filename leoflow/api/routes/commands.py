"""Clear a run's task instances, mark one task instance or the run: recorded here, applied by the leader.

The API holds no fencing term, so these routes do not touch task instances: they validate the
request against the run (404 for a missing run or task, or a deleted DAG's run; 409 for a run
that has not started; 422 naming the field for a bad body), record a command
(:mod:`leoflow.db.stores.commands`) in the same transaction as the audit row, and wait up to
:data:`COMMAND_WAIT` seconds for the leader to apply it under its term
(:mod:`leoflow.scheduler.commands`). The answer is then ``200`` with what the leader did and
the run as it is now, ``409`` with the leader's reason if it refused (404 if it refused because
the DAG was deleted meanwhile), or ``202`` with the command id if no leader applied it in time
(it stays recorded: the next leader applies it; follow the run with ``leoflow runs show``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.audit import audited_transaction
from leoflow.api.endpoint import api_state, read_document, require_object
from leoflow.api.errors import ApiError, bad_field
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import runs as run_schemas
from leoflow.api.operations import Operations
from leoflow.api.routes.dags import not_found, path_dag_id
from leoflow.api.routes.runs import PUBLIC_RUN, RUN, TASK, path_run_id
from leoflow.api.url_params import query_map_index
from leoflow.db.stores import commands as command_store
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.runs import reads as run_reads
from leoflow.db.stores.task_instances import reads as ti_reads
from leoflow.model.limits import TASK_ID
from leoflow.model.run_commands import MarkRequest, parse_clear, parse_mark, parse_mark_run, unknown_tasks

#: Seconds a clear or mark waits for the leader (it applies commands on the NOTIFY, well under a
#: second when healthy; a failover takes longer, and the command waits for the next leader).
COMMAND_WAIT = 10.0
POLL = 0.05


def _principal_name(request: Request) -> str | None:
    principal = getattr(request.state, "principal", None)
    return None if principal is None else str(principal.name)[:100]


async def _run(request: Request, conn: Any, dag_id: str, run_id: str) -> dict[str, Any]:
    # A deleted DAG's runs (cancelled with it) take no commands: a clear would re-open one (issue 44).
    if not await dag_store.dag_exists(conn, dag_id):
        raise not_found(dag_id)
    run = await run_reads.get_run(conn, dag_id, run_id)
    if run is None:
        raise ApiError(404, f"run {run_id!r} of DAG {dag_id!r} not found")
    if run["state"] == "queued":
        raise ApiError(409, f"run {run_id!r} of DAG {dag_id!r} has not started yet: nothing to clear or mark")
    return run


OPERATIONS = Operations()


@OPERATIONS("POST", RUN + "/clear", "Clear task instances (the leader applies it)", run_schemas.COMMAND_ANSWERS,
            body="ClearRequest", auth="admin", errors="404 409", params=oas.RUN_PATH)
async def clear_run(request: Request) -> Response:
    """``POST …/runs/{run_id}/clear {tasks?, failed_only?, downstream?}``."""
    dag_id = path_dag_id(request)
    run_id = path_run_id(request)
    document = await read_document(request)
    request_ = parse_clear(require_object({} if document is None else document))
    async with audited_transaction(request) as write:
        run = await _run(request, write.conn, dag_id, run_id)
        missing = unknown_tasks(request_, (t["task_id"] for t in run["tasks"]))
        if missing:
            index, task_id = missing[0]
            raise bad_field(f"tasks[{index}]", f"run {run_id!r} has no task {task_id[:60]!r}", status=422)
        command_id = await command_store.create_command(
            write.conn, run_pk=run["id"], dag_id=dag_id, kind="clear", body=request_.to_json(),
            requested_by=_principal_name(request))
        write.details.update(command_id=command_id, **request_.to_json())
    return await _answer(request, command_id, dag_id, run_id)


@OPERATIONS("POST", TASK + "/mark", "Mark a task instance success or failed (the leader applies it)",
            run_schemas.COMMAND_ANSWERS, body="MarkRequest", auth="admin", errors="404 409",
            params=[*oas.RUN_PATH, oas.TASK_ID, oas.MAP_INDEX])
async def mark_task(request: Request) -> Response:
    """``POST …/runs/{run_id}/tasks/{task_id}/mark {state: success | failed}``."""
    dag_id = path_dag_id(request)
    run_id = path_run_id(request)
    task_id: str = request.path_params["task_id"]
    document = await read_document(request)
    mark: MarkRequest = parse_mark(task_id, require_object({} if document is None else document))
    map_index = query_map_index(request)
    mark = dataclasses.replace(mark, map_index=map_index)
    async with audited_transaction(request) as write:
        run = await _run(request, write.conn, dag_id, run_id)
        if run["state"] == "cancelled":
            raise ApiError(409, f"run {run_id!r} of DAG {dag_id!r} was cancelled: clear its tasks to run them again")
        if not TASK_ID.matches(task_id) or task_id not in {t["task_id"] for t in run["tasks"]}:
            raise ApiError(404, f"task {task_id[:60]!r} not found in run {run_id!r} of DAG {dag_id!r}")
        instance = None if map_index is None else await ti_reads.get_task_instance(write.conn, run["id"], task_id,
                                                                                   map_index)
        if map_index is not None and instance is None:
            raise ApiError(404, f"task {task_id[:60]!r} of run {run_id!r} has no instance {map_index}")
        command_id = await command_store.create_command(
            write.conn, run_pk=run["id"], dag_id=dag_id, kind="mark", body=mark.to_json(),
            requested_by=_principal_name(request))
        write.details.update(command_id=command_id, **mark.to_json())
    return await _answer(request, command_id, dag_id, run_id)


@OPERATIONS("POST", RUN + "/mark", "Mark a run success or failed, with its unfinished tasks (the leader applies it)",
            run_schemas.COMMAND_ANSWERS, body="MarkRequest", auth="admin", errors="404 409", params=oas.RUN_PATH)
async def mark_run(request: Request) -> Response:
    """``POST …/runs/{run_id}/mark {state: success | failed}`` (Airflow's mark run success / failed)."""
    dag_id = path_dag_id(request)
    run_id = path_run_id(request)
    document = await read_document(request)
    state = parse_mark_run(require_object({} if document is None else document))
    async with audited_transaction(request) as write:
        run = await _run(request, write.conn, dag_id, run_id)
        command_id = await command_store.create_command(
            write.conn, run_pk=run["id"], dag_id=dag_id, kind="mark_run", body={"state": state},
            requested_by=_principal_name(request))
        write.details.update(command_id=command_id, state=state)
    return await _answer(request, command_id, dag_id, run_id)


async def _answer(request: Request, command_id: int, dag_id: str, run_id: str) -> Response:
    db = api_state(request).db
    loop = asyncio.get_running_loop()
    deadline = loop.time() + COMMAND_WAIT
    while True:
        async with db.connect() as conn:
            state = await command_store.command_state(conn, command_id)
            if state is not None and state.applied_at is not None:
                run = await run_reads.get_run(conn, dag_id, run_id)
                deleted = state.error is not None and not await dag_store.dag_exists(conn, dag_id)
                break
        if loop.time() >= deadline:
            return JsonResponse({"command": {"id": command_id, "state": "pending"}}, status_code=202)
        await asyncio.sleep(POLL)
    if state.error is not None:
        # Refused because the DAG was deleted while the command waited: 404, as the routes answer then.
        raise ApiError(404 if deleted else 409, state.error, details={"command_id": command_id})
    command = {"id": command_id, "kind": state.kind, "state": "applied", **(state.outcome or {})}
    body: dict[str, Any] = {"command": command}
    if run is not None:
        body["run"] = {**{k: run[k] for k in PUBLIC_RUN}, "tasks": run["tasks"]}
    return JsonResponse(body)
