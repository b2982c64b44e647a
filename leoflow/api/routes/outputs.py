"""``GET …/tasks/{task_id}/outputs``: the values a task published for the tasks after it.

A task writes one JSON object to ``LEOFLOW_OUTPUTS``; the leader stores it with the try's
success (ADR 0014, decision 1). This route answers the task instance's *current* outputs —
those of try ``try_number`` while the instance is ``success`` — with the try and the state, so
a script tells "not succeeded (yet)" (``outputs: null``, the state says why) from "succeeded
with these values". A cleared task answers ``null`` until its next success replaces them.

Outputs are task data, like a task's log: a read token reads them (unlike a spec's env values,
masked for readers in :mod:`.dags`, outputs are what a task chose to publish). One statement on
the happy path; the 404s (DAG, run, task) are told apart only on a miss.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.endpoint import api_state
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.operations import Operations
from leoflow.api.routes.dags import path_dag_id
from leoflow.api.routes.runs import TASK, path_run_id, task_or_404
from leoflow.api.url_params import query_map_index
from leoflow.db.stores.task_instances import reads as ti_reads
from leoflow.model.limits import TASK_ID

OPERATIONS = Operations()


@OPERATIONS("GET", TASK + "/outputs", "Get task outputs", oas.json_answer("200", "TaskOutputs"), errors="400 404",
            params=[*oas.RUN_PATH, oas.TASK_ID, oas.MAP_INDEX])
async def get_task_outputs(request: Request) -> Response:
    """``{"try_number", "state", "outputs"}``; ``outputs`` is null unless the instance is ``success``.
    A mapped task without ``?map_index=``: each output as the list of its instances' values."""
    dag_id = path_dag_id(request)
    run_id = path_run_id(request)
    task_id: str = request.path_params["task_id"]
    map_index = query_map_index(request)
    async with api_state(request).db.connect() as conn:
        found = (await ti_reads.get_task_outputs(conn, dag_id, run_id, task_id, map_index)
                 if TASK_ID.matches(task_id) else None)
        if found is None:
            ti = await task_or_404(request, conn)  # says which of DAG, run and task is missing
            found = {k: ti[k] for k in ("try_number", "state", "outputs")}  # created since: as it is now
    return JsonResponse(found)
