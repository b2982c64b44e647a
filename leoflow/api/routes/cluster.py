"""Cluster routes: the leader, the members and the event log, from the database's truth.

Answered from the database (:mod:`leoflow.db.stores.leader_terms`, :mod:`~leoflow.db.stores.cluster_nodes`,
:mod:`~leoflow.db.stores.cluster_events`) on any replica (leader or follower), so they show
the same thing wherever a load balancer sends the request. ``/cluster/leader`` answers 503 with
``Retry-After`` while nobody leads (during a failover), because "no leader" is a transient
condition a client should retry, not a resource that does not exist.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.endpoint import api_state
from leoflow.api.errors import ApiError
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.operations import Operations
from leoflow.api.url_params import page, query_cursor, query_limit
from leoflow.db.stores import cluster_events, cluster_nodes, leader_terms

OPERATIONS = Operations()


@OPERATIONS("GET", "/api/v2/cluster/leader", "Current leader", oas.json_answer("200", "Leader"))
async def leader(request: Request) -> Response:
    state = api_state(request)
    async with state.db.connect() as conn:
        current = await leader_terms.current_leader(conn, state.settings.cluster.name)
    if current is None:
        raise ApiError(503, "no replica leads the cluster right now (election in progress)",
                       code="no_leader", headers={"Retry-After": "2"})
    return JsonResponse(current)


@OPERATIONS("GET", "/api/v2/cluster/nodes", "Cluster nodes", oas.json_answer("200", "NodeList"))
async def nodes(request: Request) -> Response:
    state = api_state(request)
    async with state.db.connect() as conn:
        members = await cluster_nodes.list_nodes(conn, state.settings.cluster.name)
    return JsonResponse({"items": members})


@OPERATIONS("GET", "/api/v2/cluster/events", "Cluster events", oas.json_answer("200", "EventPage"),
            errors="400", params=[oas.LIMIT, oas.CURSOR])
async def events(request: Request) -> Response:
    state = api_state(request)
    limit = query_limit(request)
    before = query_cursor(request, "events", int)
    async with state.db.connect() as conn:
        rows = await cluster_events.list_events(conn, state.settings.cluster.name, limit + 1, before)
    return JsonResponse(page(rows, limit, lambda r: int(r["id"]), "events"))
