"""DAG version routes: the history of a DAG's specs (``dags versions``, ``dags show --version``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.endpoint import api_state
from leoflow.api.errors import ApiError
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import versions as version_schemas
from leoflow.api.operations import Operations
from leoflow.api.routes.dags import DAG, detail_for, not_found, path_dag_id
from leoflow.api.url_params import INTEGER_MAX, page, path_id, query_cursor, query_limit
from leoflow.db.stores import dag_versions
from leoflow.db.stores import dags as dag_store

OPERATIONS = Operations()


@OPERATIONS("GET", DAG + "/versions", "List DAG versions", oas.json_answer("200", "DagVersionPage"),
            errors="400 404", params=[oas.DAG_ID, oas.LIMIT, oas.CURSOR])
async def list_versions(request: Request) -> Response:
    dag_id = path_dag_id(request)
    limit = query_limit(request)
    before = query_cursor(request, "versions", int)
    async with api_state(request).db.connect() as conn:
        rows = await dag_versions.list_versions(conn, dag_id, before=before, limit=limit)
        if not rows and not await dag_store.dag_exists(conn, dag_id):
            raise not_found(dag_id)
    if request.state.principal.scope != "admin":  # spec_hash is for admins (see routes.dags' module doc)
        for row in rows:
            row["spec_hash"] = None
    return JsonResponse(page(rows, limit, lambda r: r["version"], "versions"))


@OPERATIONS("GET", DAG + "/versions/{version}", "Get DAG version", oas.json_answer("200", "DagVersionDetail"),
            errors="404", params=[oas.DAG_ID, version_schemas.VERSION])
async def get_version(request: Request) -> Response:
    dag_id = path_dag_id(request)
    number = path_id(request, "version", f"version of DAG {dag_id!r}", maximum=INTEGER_MAX)
    async with api_state(request).db.connect() as conn:
        version = await dag_versions.get_version(conn, dag_id, number)
        if version is None and not await dag_store.dag_exists(conn, dag_id):
            raise not_found(dag_id)
    if version is None:
        raise ApiError(404, f"version {number} of DAG {dag_id!r} not found")
    return JsonResponse(detail_for(request, version))  # plain env values hidden from read tokens
