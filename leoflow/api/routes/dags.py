"""DAG routes: list, apply (POST / PUT), show, pause (PATCH), delete.

Writes validate the body with :func:`leoflow.model.spec.dag.parse_dag_spec` (422 naming the
offending path, e.g. ``tasks[1].depends_on[0]``) and call :mod:`leoflow.db.stores.dags` in one
transaction; the answer is read back in that same transaction, so a client sees exactly what
it wrote. ``POST`` answers 201 when the DAG or a new version was created and 200 when the spec
was identical (a no-op).

Secrets stay secrets: a spec holds only references to Kubernetes Secrets, never their values,
and ``GET /dags/{dag_id}`` (like ``GET /dags/{dag_id}/versions/{n}``) shows a *read*-scoped
token every plain env value as ``<hidden>`` (``env_values_hidden: true``) — a password someone
pasted into ``env`` anyway is not handed to every dashboard viewer, nor is a ``notify`` webhook
URL's path (``scheme://host/<hidden>``: a Slack webhook's path is its credential). Writes need ``admin``,
which sees the spec as stored. For the same reason a read token gets ``spec_hash: null`` (here
and in ``GET …/versions``): the hash is a plain SHA-256 of the stored spec, so beside the masked
spec it confirms a guessed value (a dictionary of 8 words found a ``DB_PASSWORD``); admin
tokens, which see the spec anyway, keep it (``dags versions`` prints it).
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.access import forget_owners, readable, reads_every_dag, refuse_live_move, require_dag
from leoflow.api.audit import audited_transaction
from leoflow.api.endpoint import api_state, read_document, require_object
from leoflow.api.errors import ApiError, bad_field
from leoflow.api.jsonresp import JsonResponse, dumps
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import dags as dag_schemas
from leoflow.api.operations import Operations
from leoflow.api.url_params import (
    encode_cursor,
    query_bool,
    query_cursor,
    query_limit,
    query_state,
    query_text,
)
from leoflow.clock import SystemClock
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores import task_templates as template_store
from leoflow.model.k8s.pod import hide_env_values
from leoflow.model.limits import DAG_ID
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.entrypoint import check_entrypoints
from leoflow.model.spec.notify import hide_webhook_urls
from leoflow.model.spec.pod_policy import check_dag_pods
from leoflow.model.spec.reuse import ClusterTemplates, cluster_uses, template_changes
from leoflow.model.states import DAG_LAST_RUN_STATES, DAG_STATES


def path_dag_id(request: Request) -> str:
    """The ``{dag_id}`` path parameter; ids that cannot exist are simply not found."""
    dag_id: str = request.path_params["dag_id"]
    if not DAG_ID.matches(dag_id):
        raise ApiError(404, f"DAG {dag_id[:60]!r} not found")
    return dag_id


def not_found(dag_id: str) -> ApiError:
    return ApiError(404, f"DAG {dag_id!r} not found")


OPERATIONS = Operations()

DAG = "/api/v2/dags/{dag_id}"


@OPERATIONS("GET", "/api/v2/dags", "List DAGs", oas.json_answer("200", "DagPage"), errors="400",
            params=[oas.LIMIT, oas.CURSOR, *dag_schemas.LIST_PARAMS])
async def list_dags(request: Request) -> Response:
    """DAGs in id order, filtered; a filtered page may be short (even empty) yet have a next cursor:
    one request examines at most ``dag_store.LIST_SCAN_BUDGET`` DAGs, so its time stays bounded."""
    limit = query_limit(request)
    after = query_cursor(request, "dags", str)
    where = dag_store.DagListFilter(paused=_paused_filter(request),
                                    prefix=query_text(request, "prefix", DAG_ID.max_length),
                                    last_run_state=_last_run_filter(request))
    # PostgreSQL renders the page (the raw pool, as the hot run read): the bytes pass through.
    async with api_state(request).db.raw() as conn:
        found = await dag_store.list_dags(conn, after=after, limit=limit, where=where)
    items = found.items
    if not reads_every_dag(request):  # other teams' DAGs: unseen (the page may be short)
        items = dumps(await readable(request, json.loads(items)))
    cursor = encode_cursor("dags", found.next_after) if found.next_after is not None else None
    return Response(f'{{"items":{items},"next_cursor":{dumps(cursor)}}}', media_type="application/json")


def _paused_filter(request: Request) -> bool | None:
    """``paused=true|false``, or the older ``state=paused|active`` (both given, they must agree)."""
    paused = query_bool(request, "paused")
    state = request.query_params.get("state")
    if state not in DAG_STATES:
        return paused
    if paused is not None and paused != (state == "paused"):
        raise bad_field("state", f"{state!r} contradicts paused={str(paused).lower()}")
    return state == "paused"


def _last_run_filter(request: Request) -> str | None:
    state = query_state(request, (*DAG_LAST_RUN_STATES, *DAG_STATES))
    return None if state in DAG_STATES else state


async def _apply(request: Request, document: Any) -> tuple[dict[str, Any], bool]:
    clock = SystemClock()
    catalog = await cluster_templates(request, cluster_uses(document))
    # A spec of thousands of tasks takes a while to check: off the event loop, like its body.
    spec = await run_in_threadpool(partial(parse_dag_spec, document, now=clock.now(), cluster_templates=catalog))
    await require_dag(request, spec.dag_id, "edit", new_team=spec.team)  # the team it names must be the caller's
    await refuse_live_move(request, spec.dag_id, spec.team)  # 409 while its pods run in its old team's namespace
    check_dag_pods(spec, api_state(request).settings.executor.kubernetes.pod_policy())  # 422 naming the field
    check_entrypoints(spec, api_state(request).settings.executor.kind)
    async with audited_transaction(request, dag_id=spec.dag_id) as write:
        before = await dag_store.get_dag(write.conn, spec.dag_id) if catalog else None
        result = await dag_store.apply_dag(write.conn, spec, clock=clock)
        dag = await dag_store.get_dag(write.conn, result.dag_id)
        write.status = 201 if result.changed else 200
        write.details.update(version=result.version, changed=result.changed)
        if catalog:  # cluster/etl 4 → 5: what a re-apply picked up (audited, and shown by dags apply)
            moved = template_changes(before.get("spec") if before else None, spec.to_canonical())
            write.details.update(template_changes=moved)
    assert dag is not None
    forget_owners(request, [spec.dag_id])  # its team: field, as applied, decides its next request here
    if catalog:
        dag["template_changes"] = moved
    return _detail(dag, read_only=False), result.changed


async def cluster_templates(request: Request, refs: set[tuple[str, int | None]]) -> ClusterTemplates:
    """The cluster templates a spec names (``uses: cluster/NAME[@V]``), read before it is parsed."""
    if not refs:
        return {}
    async with api_state(request).db.connect() as conn:
        return await template_store.find_templates(conn, refs)


@OPERATIONS("POST", "/api/v2/dags", "Apply DAG", dag_schemas.APPLY_ANSWERS, body="DagSpec", auth="admin",
            errors="409")
async def create_dag(request: Request) -> Response:
    document = require_object(await read_document(request))
    if isinstance(document.get("dag_id"), str):  # a DAG of a team the caller does not edit: 403
        await require_dag(request, document["dag_id"], "edit")
    dag, changed = await _apply(request, document)
    return JsonResponse(dag, status_code=201 if changed else 200)


@OPERATIONS("PUT", DAG, "Put DAG", dag_schemas.APPLY_ANSWERS, body="DagSpec", auth="admin", errors="409",
            params=[oas.DAG_ID])
async def put_dag(request: Request) -> Response:
    dag_id = request.path_params["dag_id"]
    if not DAG_ID.matches(dag_id):
        raise bad_field("dag_id", f"{dag_id[:60]!r} is not a valid name: {DAG_ID.rule}", status=422)
    document = require_object(await read_document(request))
    body_id = document.get("dag_id", dag_id)
    if body_id != dag_id:
        raise bad_field("dag_id", f"is {body_id!r} in the body but {dag_id!r} in the path", status=422)
    dag, changed = await _apply(request, {**document, "dag_id": dag_id})
    return JsonResponse(dag, status_code=201 if changed else 200)


@OPERATIONS("GET", DAG, "Get DAG", oas.json_answer("200", "DagDetail"), errors="404", params=[oas.DAG_ID])
async def get_dag(request: Request) -> Response:
    dag_id = path_dag_id(request)
    async with api_state(request).db.connect() as conn:
        dag = await dag_store.get_dag(conn, dag_id)
    if dag is None:
        raise not_found(dag_id)
    return JsonResponse(detail_for(request, dag))


@OPERATIONS("PATCH", DAG, "Pause or unpause DAG", oas.json_answer("200", "DagDetail"), body="DagPatch",
            auth="admin", errors="404", params=[oas.DAG_ID])
async def patch_dag(request: Request) -> Response:
    dag_id = path_dag_id(request)
    document = require_object(await read_document(request))
    unknown = sorted(set(document) - {"paused"})
    if unknown:
        raise bad_field(unknown[0], "unknown field (only 'paused' can be changed)", status=422)
    if not isinstance(document.get("paused"), bool):
        raise bad_field("paused", "must be true or false", status=422)
    async with audited_transaction(request) as write:
        write.details["paused"] = document["paused"]
        await dag_store.set_paused(write.conn, dag_id, document["paused"])
        dag = await dag_store.get_dag(write.conn, dag_id)
    if dag is None:
        raise not_found(dag_id)
    return JsonResponse(_detail(dag, read_only=False))


def detail_for(request: Request, doc: dict[str, Any]) -> dict[str, Any]:
    """A DAG (or one of its versions) with its spec as the caller may see it (see the module doc)."""
    return _detail(doc, read_only=request.state.principal.scope != "admin")


def _detail(dag: dict[str, Any], *, read_only: bool) -> dict[str, Any]:
    """A DAG with its spec; plain env values hidden from read-only callers (see the module doc)."""
    dag["env_values_hidden"] = False
    if read_only and dag.get("spec") is not None:
        dag["spec"], dag["env_values_hidden"] = hide_env_values(dag["spec"])
        dag["spec"] = hide_webhook_urls(dag["spec"])  # a webhook URL's path is often its credential
    if read_only and "spec_hash" in dag:
        dag["spec_hash"] = None  # a hash of the unmasked spec would confirm guessed values
    return dag


@OPERATIONS("DELETE", DAG, "Delete DAG", {"204": {"description": "Deleted"}}, auth="admin", errors="404",
            params=[oas.DAG_ID])
async def delete_dag(request: Request) -> Response:
    dag_id = path_dag_id(request)
    async with audited_transaction(request, status=204) as write:
        await dag_store.delete_dag(write.conn, dag_id)
    return Response(status_code=204)
