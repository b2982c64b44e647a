"""Auth matrix: no token / bad token / read / admin against every route of the app."""

from __future__ import annotations

import logging

import httpx
import pytest

from leoflow.api.app import api_routes, create_app
from leoflow.api.auth import Authenticator, ensure_auth_configured
from leoflow.errors import SettingsError
from leoflow.settings import load_settings
from tests.api.conftest import ADMIN, ADMIN_TOKEN, READ, READ_TOKEN, api_settings, spec
from tests.api.live import client_for

PATH_VALUES = {"{dag_id}": "etl", "{run_id}": "r1", "{task_id}": "extract"}
BAD = {"Authorization": "Bearer not-a-configured-token"}


def _concrete(path: str) -> str:
    for key, value in PATH_VALUES.items():
        path = path.replace(key, value)
    return path


def test_auth_matrix_over_every_route(database_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    settings = api_settings(database_url)
    with client_for(create_app(settings)) as client:
        assert client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 201
        routes = api_routes(settings)
        assert len(routes) >= 20
        for route in routes:
            path = _concrete(route.path)
            body = {"paused": True} if route.method == "PATCH" else (spec() if route.method == "PUT" else None)

            def call(headers: dict[str, str], route_method: str = route.method, path: str = path,
                     body: object = body) -> int:
                return client.request(route_method, path, json=body, headers=headers).status_code

            results = {who: call(h) for who, h in
                       (("none", {}), ("bad", BAD), ("read", READ), ("admin", ADMIN))}
            label = f"{route.method} {route.path}: {results}"
            if route.scope == "open":
                assert all(code not in (401, 403) for code in results.values()), label
            elif route.scope == "read":
                assert results["none"] == 401 and results["bad"] == 401, label
                assert results["read"] not in (401, 403) and results["admin"] not in (401, 403), label
            else:
                assert results["none"] == 401 and results["bad"] == 401 and results["read"] == 403, label
                assert results["admin"] not in (401, 403), label
    for token in (READ_TOKEN, ADMIN_TOKEN, "not-a-configured-token"):
        assert token not in caplog.text


def test_401_carries_www_authenticate_and_the_envelope(api_client: httpx.Client) -> None:
    answer = api_client.get("/api/v2/dags")
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert answer.json()["error"]["code"] == "unauthorized"
    basic = api_client.get("/api/v2/dags", headers={"Authorization": f"Basic {READ_TOKEN}"})
    assert basic.status_code == 401
    forbidden = api_client.post("/api/v2/dags", json=spec(), headers=READ)
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"


def test_metrics_auth_can_be_required(database_url: str) -> None:
    with client_for(create_app(api_settings(database_url, LEOFLOW_METRICS_AUTH="true"))) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=READ).status_code == 200
        assert client.get("/healthz").status_code == 200


def test_auth_disabled_lets_anonymous_requests_write(database_url: str) -> None:
    settings = load_settings({"LEOFLOW_DATABASE_URL": database_url, "LEOFLOW_AUTH": "disabled",
                              "LEOFLOW_LOG_FORMAT": "text"})
    with client_for(create_app(settings)) as client:
        assert client.post("/api/v2/dags", json=spec(), headers={}).status_code == 201


def test_serving_without_tokens_is_refused() -> None:
    settings = load_settings({"LEOFLOW_DATABASE_URL": "postgresql://h/db", "LEOFLOW_LOG_FORMAT": "text"})
    with pytest.raises(SettingsError) as raised:
        ensure_auth_configured(settings)
    assert raised.value.variable == "LEOFLOW_API_TOKENS"
    with pytest.raises(SettingsError):
        create_app(settings)


def test_identify_requires_an_exact_match() -> None:
    auth = Authenticator(api_settings("postgresql://h/db").api)
    assert auth.identify(f"Bearer {READ_TOKEN}").scope == "read"  # type: ignore[union-attr]
    assert auth.identify(f"bearer {ADMIN_TOKEN}").scope == "admin"  # type: ignore[union-attr]
    for wrong in (READ_TOKEN[:-1], READ_TOKEN + "x", "", " ", READ_TOKEN.upper(), "é" * 20):
        assert auth.identify(f"Bearer {wrong}") is None
    assert repr(api_settings("postgresql://h/db").api.tokens).count(READ_TOKEN) == 0
