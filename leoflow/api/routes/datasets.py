"""Dataset routes: record outside events, list datasets.

``POST /api/v2/datasets/events`` (``{uri, extra}``, write scope, the ``operate`` action, audited)
records an event as a producing task's success does and queues it for every consuming DAG in the
same transaction (:mod:`leoflow.db.stores.datasets.events`), batched with the reports that arrive
meanwhile (:mod:`leoflow.api.event_batches`); the leader starts their runs on its next tick, woken
at once. It is how Argo Events' webhook or an upstream team's loader says "the file landed". The
list form ``{events: [{uri, extra}, …]}`` records up to a thousand events, all or none, each with
its audit row: a loader that reports many events sends a request per thousand, where a request
per event costs the replica a millisecond or two of CPU each (auth, parsing, the answer).
``GET /api/v2/datasets`` lists URIs with producers, consumers, last event and queue.

With teams configured, a caller who reads only some teams' DAGs sees a URI only if a DAG he may
read produces or consumes it, and of that URI only those DAGs: producers, consumers and queue
entries of other teams' DAGs are left out, and a last event another team's task recorded shows
neither its DAG, run nor task (a URI names data, a DAG id names who works on it). A URI known only
from its events (``?uri=``) names no DAG, so such a caller does not see it.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.access import readable
from leoflow.api.endpoint import api_state, read_document
from leoflow.api.event_batches import event_batches
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import datasets as dataset_schemas
from leoflow.api.operations import Operations
from leoflow.api.url_params import page, query_cursor, query_limit, query_text
from leoflow.db.stores.datasets import reads
from leoflow.db.stores.datasets.events import ApiEvent
from leoflow.metrics import datasets as metrics
from leoflow.model import limits
from leoflow.model.access.teams import Grant
from leoflow.model.dataset_events import is_list_form, parse_event_request, parse_event_requests
from leoflow.model.spec.datasets import dataset_uri

OPERATIONS = Operations()

DATASETS = "/api/v2/datasets"


@OPERATIONS("POST", DATASETS + "/events", "Record dataset event",
            oas.json_answer("201", "DatasetEvent", "Recorded"), body="DatasetEventRequest", auth="admin")
async def record_event(request: Request) -> Response:
    document = await read_document(request)
    listed = is_list_form(document)
    wanted = parse_event_requests(document) if listed else [parse_event_request(document)]
    principal = getattr(request.state, "principal", None)
    by = getattr(principal, "name", None)
    events = [ApiEvent(w.uri, w.extra, by) for w in wanted]
    queued_for = await event_batches(request, api_state(request).db).record(request, events)  # audited with them
    metrics.EVENTS.labels(source="api").inc(len(events))
    answers = [{"uri": w.uri, "source": "api", "queued_for": n} for w, n in zip(wanted, queued_for, strict=True)]
    return JsonResponse({"events": answers} if listed else answers[0], status_code=201)


@OPERATIONS("GET", DATASETS, "List datasets", oas.json_answer("200", "DatasetList"), errors="400",
            params=[oas.LIMIT, oas.CURSOR, dataset_schemas.URI, dataset_schemas.DAG_ID])
async def list_datasets(request: Request) -> Response:
    limit = query_limit(request)
    after = query_cursor(request, "dataset", str)
    raw_uri = query_text(request, "uri", limits.DATASET_URI.maximum)
    uri = None if raw_uri is None else dataset_uri(raw_uri, "uri")
    dag_id = query_text(request, "dag_id", limits.DAG_ID.max_length)
    async with api_state(request).db.connect() as conn:
        found = await reads.list_datasets(conn, after=after, limit=limit + 1, uri=uri, dag_id=dag_id)
    answer = page(found, limit, lambda d: str(d["uri"]), "dataset")
    answer["items"] = await _readable_datasets(request, answer["items"])  # the page may be short
    return JsonResponse(answer)


def _dags_named(dataset: dict[str, Any]) -> set[str]:
    producers = {str(p["dag_id"]) for p in dataset["producers"]}
    return producers | {str(d) for d in dataset["consumers"]} | {str(q["dag_id"]) for q in dataset["queued"]}


async def _readable_datasets(request: Request, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The datasets the caller's readable DAGs produce or consume, showing only those DAGs."""
    grant: Grant | None = getattr(request.state, "grant", None)  # set by AccessControl.check
    if grant is None or grant.readable_teams() is None:
        return found  # reads every DAG: an admin, a cluster-wide reader, no teams configured
    named = sorted({*(d for dataset in found for d in _dags_named(dataset)),
                    *(str(ds["last_event"]["dag_id"]) for ds in found
                      if ds["last_event"] and ds["last_event"].get("dag_id"))})
    may_read = {item["dag_id"] for item in await readable(request, [{"dag_id": d} for d in named])}
    shown = []
    for dataset in found:
        if not _dags_named(dataset) & may_read:
            continue
        last = dataset["last_event"]
        if last and last.get("dag_id") and last["dag_id"] not in may_read:
            last = {**last, "dag_id": None, "run_id": None, "task_id": None}
        shown.append({**dataset, "producers": [p for p in dataset["producers"] if p["dag_id"] in may_read],
                      "consumers": [d for d in dataset["consumers"] if d in may_read],
                      "queued": [q for q in dataset["queued"] if q["dag_id"] in may_read], "last_event": last})
    return shown
