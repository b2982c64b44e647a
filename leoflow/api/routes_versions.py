"""DAG version routes: the history of a DAG's specs (``dags versions``, ``dags show --version``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.endpoint import api_state, page, query_cursor, query_limit
from leoflow.api.errors import ApiError
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.routes_dags import detail_for, not_found, path_dag_id
from leoflow.db import api_queries, version_queries


async def list_versions(request: Request) -> Response:
    dag_id = path_dag_id(request)
    limit = query_limit(request)
    before = query_cursor(request, "versions", int)
    async with api_state(request).db.connect() as conn:
        rows = await version_queries.list_versions(conn, dag_id, before=before, limit=limit)
        if not rows and not await api_queries.dag_exists(conn, dag_id):
            raise not_found(dag_id)
    return JsonResponse(page(rows, limit, lambda r: r["version"], "versions"))


async def get_version(request: Request) -> Response:
    dag_id = path_dag_id(request)
    raw: str = request.path_params["version"]
    if not raw.isdigit() or len(raw) > 9:
        raise ApiError(404, f"version {raw[:30]!r} of DAG {dag_id!r} not found")
    async with api_state(request).db.connect() as conn:
        version = await version_queries.get_version(conn, dag_id, int(raw))
        if version is None and not await api_queries.dag_exists(conn, dag_id):
            raise not_found(dag_id)
    if version is None:
        raise ApiError(404, f"version {raw} of DAG {dag_id!r} not found")
    return JsonResponse(detail_for(request, version))  # plain env values hidden from read tokens
