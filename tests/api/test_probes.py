"""Probes and metrics: /healthz never needs the database, /readyz reports why it is not ready."""

from __future__ import annotations

import httpx
import psycopg

from leoflow.api.app import create_app
from tests.api.conftest import READ, api_settings
from tests.api.live import client_for


def test_healthz_and_readyz_on_a_migrated_database(api_client: httpx.Client) -> None:
    assert api_client.get("/healthz").json() == {"status": "ok"}
    ready = api_client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ready"


def test_readyz_is_503_when_the_schema_is_not_at_head(empty_database_url: str) -> None:
    with client_for(create_app(api_settings(empty_database_url))) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.headers["Retry-After"]
        body = ready.json()["error"]
        assert body["code"] == "not_ready"
        assert "leoflow db upgrade" in body["message"]
        assert client.get("/healthz").status_code == 200


def test_readyz_reports_an_old_schema(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'old'")
    with client_for(create_app(api_settings(database_url))) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["error"]["details"]["schema"] == "old"


def test_metrics_exposes_http_and_work_metrics(api_client: httpx.Client) -> None:
    api_client.get("/api/v2/dags", headers=READ)
    api_client.get("/api/v2/dags/nope", headers=READ)
    text = api_client.get("/metrics").text
    assert 'leoflow_http_requests_total{method="GET",route="/api/v2/dags",status="200"}' in text
    # Labelled by the route template, never by the concrete path.
    assert 'route="/api/v2/dags/{dag_id}",status="404"' in text
    assert "/api/v2/dags/nope" not in text
    assert 'leoflow_task_instances{state="running"}' in text
    assert 'leoflow_dag_runs{state="queued"}' in text
    assert 'leoflow_build_info{version="' in text
    assert "process_cpu_seconds_total" in text
