"""Pool routes: list, show, create, resize and delete named pools of task slots.

``GET /api/v2/pools`` lists the built-in ``default`` pool (its ``slots`` are this replica's
``LEOFLOW_PARALLELISM``; every replica of a cluster is configured alike), every named pool, and
every pool that ready tasks name but that does not exist (``missing``) — with the slots in use
and the tasks waiting (:mod:`leoflow.db.stores.pools`). ``POST`` creates a pool (409 if the name is
taken), ``PATCH`` resizes or re-describes one, ``DELETE`` removes one: tries running in it run on,
its waiting tasks wait until a pool of that name exists again. The ``default`` pool cannot be
created, changed or deleted here (409): its size is ``LEOFLOW_PARALLELISM``.

Every change is audited and wakes the leader, which fills new slots on its next tick.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.audit import audited_transaction
from leoflow.api.endpoint import api_state, read_document, require_object
from leoflow.api.errors import ApiError
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import pools as pool_schemas
from leoflow.api.operations import Operations
from leoflow.clock import SystemClock
from leoflow.db.connection.database import Connection
from leoflow.db.stores import pools as pool_store
from leoflow.errors import Conflict
from leoflow.model.fields import NAME_RE
from leoflow.model.spec.fairness import DEFAULT_POOL, parse_pool_request


def path_pool(request: Request) -> str:
    """The ``{pool}`` path parameter; names that cannot exist are simply not found."""
    name: str = request.path_params["pool"]
    if not NAME_RE.fullmatch(name):
        raise ApiError(404, f"pool {name[:60]!r} not found")
    return name


def _not_found(name: str) -> ApiError:
    return ApiError(404, f"pool {name!r} not found")


def _builtin(name: str) -> None:
    if name == DEFAULT_POOL:
        raise Conflict(f"the {DEFAULT_POOL!r} pool is built in: its size is LEOFLOW_PARALLELISM")


async def _document(request: Request, conn: Connection, name: str) -> dict[str, Any]:
    found = await pool_store.list_pools(conn, parallelism=api_state(request).settings.scheduler.parallelism,
                                        name=name)
    if not found:
        raise _not_found(name)
    return found[0]


OPERATIONS = Operations()

POOLS = "/api/v2/pools"


@OPERATIONS("GET", POOLS, "List pools", oas.json_answer("200", "PoolList"))
async def list_pools(request: Request) -> Response:
    async with api_state(request).db.connect() as conn:
        pools = await pool_store.list_pools(conn, parallelism=api_state(request).settings.scheduler.parallelism)
    return JsonResponse({"items": pools})


@OPERATIONS("GET", POOLS + "/{pool}", "Get pool", oas.json_answer("200", "Pool"), errors="404",
            params=[pool_schemas.POOL])
async def get_pool(request: Request) -> Response:
    name = path_pool(request)
    async with api_state(request).db.connect() as conn:
        return JsonResponse(await _document(request, conn, name))


@OPERATIONS("POST", POOLS, "Create pool", oas.json_answer("201", "Pool", "Created"), body="PoolCreate",
            auth="admin", errors="409")
async def create_pool(request: Request) -> Response:
    change = parse_pool_request(require_object(await read_document(request)), creating=True)
    assert change.name is not None and change.slots is not None
    async with audited_transaction(request, status=201) as write:
        write.details.update(pool=change.name, slots=change.slots)
        await pool_store.create_pool(write.conn, change.name, change.slots, change.description, SystemClock().now())
        pool = await _document(request, write.conn, change.name)
    return JsonResponse(pool, status_code=201)


@OPERATIONS("PATCH", POOLS + "/{pool}", "Resize pool", oas.json_answer("200", "Pool"), body="PoolPatch",
            auth="admin", errors="404 409", params=[pool_schemas.POOL])
async def update_pool(request: Request) -> Response:
    name = path_pool(request)
    _builtin(name)
    change = parse_pool_request(require_object(await read_document(request)), creating=False)
    async with audited_transaction(request) as write:
        write.details.update(pool=name, slots=change.slots)
        if not await pool_store.update_pool(write.conn, name, slots=change.slots, description=change.description,
                                            sets_description=change.sets_description, now=SystemClock().now()):
            raise _not_found(name)
        pool = await _document(request, write.conn, name)
    return JsonResponse(pool)


@OPERATIONS("DELETE", POOLS + "/{pool}", "Delete pool", {"204": {"description": "Deleted"}}, auth="admin",
            errors="404 409", params=[pool_schemas.POOL])
async def delete_pool(request: Request) -> Response:
    name = path_pool(request)
    _builtin(name)
    async with audited_transaction(request, status=204) as write:
        write.details["pool"] = name
        if not await pool_store.delete_pool(write.conn, name):
            raise _not_found(name)
    return Response(status_code=204)
