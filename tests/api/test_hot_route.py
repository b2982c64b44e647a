"""The run document's route (issue 21, ``bench/api.py``): fewer layers, the same contract.

Every API route is an ASGI app Starlette calls directly (no ``request_response`` adapter), and the
run document's GET skips the exception middleware and the router (:class:`HotRoutes`), yet
answers, authenticates, is counted and labelled exactly as any route.
"""

from __future__ import annotations

import httpx
import prometheus_client
from starlette.routing import Route

from leoflow.api.app import HOT_ROUTES, api_routes, create_app
from leoflow.api.endpoint import Endpoint
from leoflow.api.middleware import HotRoutes
from tests.api.conftest import ADMIN, READ, api_settings, spec


def test_every_api_route_is_called_without_an_adapter(database_url: str) -> None:
    settings = api_settings(database_url)
    declared = {(r.method, r.path) for r in api_routes(settings)}
    served = [r for r in create_app(settings).routes
              if isinstance(r, Route) and any((m, r.path) in declared for m in r.methods or ())]
    assert len(served) == len(declared)
    assert all(isinstance(r.app, Endpoint) for r in served), [r.path for r in served if not isinstance(r.app, Endpoint)]
    shortcut = [m for m in create_app(settings).user_middleware if m.cls is HotRoutes]
    assert [[*sorted(r.methods or ()), r.path] for r in shortcut[0].kwargs["routes"]] == \
        [["GET", "HEAD", path] for _, path in HOT_ROUTES]


def test_the_hot_route_answers_and_is_counted_as_any_route(api_client: httpx.Client) -> None:
    assert api_client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 201
    assert api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
    labels = {"method": "GET", "route": "/api/v2/dags/{dag_id}/runs/{run_id}"}
    registry = prometheus_client.REGISTRY

    def served(status: str) -> float:
        return registry.get_sample_value("leoflow_http_requests_total", {**labels, "status": status}) or 0.0

    before_200, before_304, before_404 = served("200"), served("304"), served("404")
    answer = api_client.get("/api/v2/dags/etl/runs/r1", headers=READ)
    assert answer.status_code == 200 and answer.json()["run_id"] == "r1" and answer.headers["ETag"]
    unchanged = api_client.get("/api/v2/dags/etl/runs/r1", headers={**READ, "If-None-Match": answer.headers["ETag"]})
    assert unchanged.status_code == 304
    assert api_client.get("/api/v2/dags/etl/runs/nope", headers=READ).json()["error"]
    assert api_client.get("/api/v2/dags/etl/runs/r1").status_code == 401
    head = api_client.head("/api/v2/dags/etl/runs/r1", headers=READ)  # HEAD takes the router's way
    assert head.status_code == 200 and head.content == b""
    assert (served("200"), served("304"), served("404")) == (before_200 + 1, before_304 + 1, before_404 + 1)
    assert registry.get_sample_value("leoflow_http_requests_total", {**labels, "status": "401"})
    assert registry.get_sample_value("leoflow_http_requests_total", {**labels, "method": "HEAD", "status": "200"})
