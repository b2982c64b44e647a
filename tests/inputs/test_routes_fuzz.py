"""Every route of the API, every path and query parameter, hostile values: never a 5xx.

The routes come from the app's own table (:func:`leoflow.api.app.api_routes`) and their query
parameters from the OpenAPI document, so a new route or parameter is fuzzed without anyone
remembering to add it. Each parameter gets either a value that reaches the route's real work
(the DAG, run, task and pool that exist) or one of :func:`~tests.inputs.strategies.hostile_parameters`
(non-ASCII digits, cursors nested 2,000 deep or carrying a lone surrogate, extreme dates, NUL
characters, 5,000-character values); write routes also get
:func:`~tests.inputs.strategies.hostile_yaml_bodies` (keys of every type, extreme dates, deep
nesting). Issue 44, item 13 found seven 500s this would have found.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leoflow.api.app import ApiRoute, api_routes, create_app
from leoflow.api.openapi.document import openapi_document
from tests.api.conftest import ADMIN, api_settings
from tests.api.live import client_for
from tests.harness.postgres import PostgresServer
from tests.inputs.corpus import HEALTHY, spec, task
from tests.inputs.strategies import hostile_parameters, hostile_yaml_bodies

SETTINGS = api_settings("postgresql://unused/unused")
ROUTES = [r for r in api_routes(SETTINGS) if r.path.startswith("/api/")]
#: Path values that reach each route's real work; deletes aim at things that do not exist, so
#: the DAG and run every other route needs stay.
VALID = {"dag_id": HEALTHY, "run_id": "r1", "task_id": "a", "version": "1", "backfill_id": "1",
         "notification_id": "1", "pool": "default", "token_id": "0123456789abcdef", "name": "etl"}
VALID_FOR_DELETE = {"dag_id": "absent", "pool": "absent", "token_id": "0123456789abcdef", "name": "absent"}
_TEMPLATE = re.compile(r"\{(\w+)\}")


def query_parameters(route: ApiRoute) -> list[str]:
    operation = openapi_document()["paths"][route.path][route.method.lower()]
    return [p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"]


def encoded(value: str) -> str:
    """As a client would put it in a URL: UTF-8 percent-encoded (a lone surrogate as its three bytes)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


@pytest.fixture(scope="module")
def api(pg_server: PostgresServer) -> Iterator[httpx.Client]:
    url = pg_server.create_database()
    try:
        with client_for(create_app(api_settings(url))) as client:
            created = client.post("/api/v2/dags", json=spec(HEALTHY, schedule="@hourly", paused=True,
                                                            start_date="2026-01-01T00:00:00Z", tasks=[task()]),
                                  headers=ADMIN)
            assert created.status_code == 201, created.text
            assert client.post(f"/api/v2/dags/{HEALTHY}/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
            template = {"image": "busybox", "command": ["true"]}
            assert client.put("/api/v2/templates/etl", json=template, headers=ADMIN).status_code == 201
            yield client
    finally:
        pg_server.drop_database(url)


def test_every_route_and_parameter_is_covered() -> None:
    assert len(ROUTES) >= 30
    names = {n for r in ROUTES for n in _TEMPLATE.findall(r.path)}
    assert names <= set(VALID), names - set(VALID)
    assert {"cursor", "limit", "state", "try", "since", "wait", "actor"} <= {
        q for r in ROUTES for q in query_parameters(r)}


FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.data_too_large])


@pytest.mark.parametrize("route", ROUTES, ids=[f"{r.method} {r.path}" for r in ROUTES])
@FUZZ
@given(data=st.data())
def test_no_route_answers_5xx_to_hostile_parameters(api: httpx.Client, route: ApiRoute, data: st.DataObject) -> None:
    defaults = {**VALID, **(VALID_FOR_DELETE if route.method == "DELETE" else {})}
    path = route.path
    for name in _TEMPLATE.findall(route.path):
        value = data.draw(st.one_of(st.just(defaults[name]), hostile_parameters()), label=name)
        path = path.replace("{" + name + "}", encoded(value) or "%20")
    names = query_parameters(route)
    query = data.draw(st.dictionaries(st.sampled_from(names), hostile_parameters(), max_size=3) if names
                      else st.just({}), label="query")
    if query:
        path += "?" + "&".join(f"{k}={encoded(v)}" for k, v in query.items())
    body = None
    if route.method in ("POST", "PUT", "PATCH"):
        body = data.draw(st.one_of(st.none(), hostile_yaml_bodies()), label="body")
    answer = api.request(route.method, path, headers={**ADMIN, "Content-Type": "application/yaml"},
                         content=body.encode() if body is not None else None)
    # No leader runs beside this app: its 503 says so, whatever the parameters.
    no_leader = answer.status_code == 503 and answer.json()["error"]["code"] == "no_leader"
    assert answer.status_code < 500 or no_leader, f"{route.method} {path[:300]}: {answer.text[:500]}"
    if answer.status_code >= 400:
        assert 0 < len(answer.json()["error"]["message"]) < 2_000, answer.text[:500]
