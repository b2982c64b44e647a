"""Probes and metrics: /healthz never needs the database, /readyz reports why it is not ready."""

from __future__ import annotations

import json

import httpx
import psycopg
import pytest

from leoflow.api.app import create_app
from leoflow.db import migrations
from leoflow.election.health import ElectionHealth
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


def declare_schema(database_url: str, revision: str, compatible: list[str]) -> None:
    """Put the database at ``revision``, as if a newer build had migrated it and declared ``compatible``."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = %s", (revision,))
        conn.execute("DELETE FROM schema_compatibility")
        conn.execute("INSERT INTO schema_compatibility (revision, compatible_code) VALUES (%s, %s::jsonb)",
                     (revision, json.dumps(compatible)))


def test_readyz_accepts_a_newer_schema_that_declares_this_build_compatible(database_url: str) -> None:
    """A rolling upgrade (or a code rollback): the schema moved past this build's head (ADR 0006)."""
    head = migrations.head_revision()
    with client_for(create_app(api_settings(database_url))) as client:
        declare_schema(database_url, "9999_future", [head, "0001"])
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["schema"] == "9999_future"
        declare_schema(database_url, "9999_future", ["0001"])
        refused = client.get("/readyz")
        assert refused.status_code == 503
        assert "newer than this build's head" in refused.json()["error"]["message"]


def test_migrations_record_what_each_revision_declared(empty_database_url: str) -> None:
    migrations.upgrade(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT revision, compatible_code FROM schema_compatibility").fetchall()
    head = migrations.head_revision()
    declared = migrations.declared_compatible_code(head)
    assert rows == [(head, list(declared))]
    # So a replica of a build it declares stays ready on it, and one of a build it does not declare
    # is told to upgrade (0013 declares none: code that does not know `cancelling` must not run on
    # it, ADR 0015); one of this build on the revision below is told to upgrade.
    state = migrations.SchemaState(head, declared)
    for code in declared:
        assert migrations.readiness_problem(state, head=code) is None
    previous = _down_revision(head)
    assert (migrations.readiness_problem(state, head=previous) is None) == (previous in declared)
    migrations.downgrade(empty_database_url, previous)
    with client_for(create_app(api_settings(empty_database_url))) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "run `leoflow db upgrade`" in ready.json()["error"]["message"]


def _down_revision(revision: str) -> str:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrations.alembic_config("postgresql:///unused")).get_revision(revision)
    assert script is not None and isinstance(script.down_revision, str)
    return script.down_revision


def test_readyz_reads_the_migration_scripts_once(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from alembic.script import ScriptDirectory

    calls: list[int] = []
    real = ScriptDirectory.get_current_head
    monkeypatch.setattr(ScriptDirectory, "get_current_head", lambda self: calls.append(1) or real(self))
    with client_for(create_app(api_settings(database_url))) as client:
        for _ in range(5):
            assert client.get("/readyz").status_code == 200
    assert len(calls) <= 1


def test_readyz_says_why_the_replica_may_not_lead(database_url: str) -> None:
    health = ElectionHealth()
    with client_for(create_app(api_settings(database_url), election_health=health)) as client:
        assert client.get("/readyz").status_code == 200
        health.refuse("the database is a hot standby")
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["error"]["message"] == "the database is a hot standby"
        assert ready.json()["error"]["details"]["election"] == "refused"
        health.clear()
        assert client.get("/readyz").status_code == 200


def test_readyz_never_shows_the_servers_words_and_the_log_keeps_them(database_url: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """``/readyz`` needs no token: the driver's text (host, user, database) stays in the log."""
    missing = database_url.rsplit("/", 1)[0] + "/no_such_database"
    with caplog.at_level("WARNING", logger="leoflow.api.routes.system"), \
            client_for(create_app(api_settings(missing))) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["error"]["message"] == "database unavailable"
    assert "no_such_database" not in ready.text
    assert 'database "no_such_database" does not exist' in caplog.text


def test_readyz_on_a_closed_port_says_database_unavailable_only(caplog: pytest.LogCaptureFixture) -> None:
    from leoflow.standalone.embedded import free_port

    url = f"postgresql://secret_user:hunter2@127.0.0.1:{free_port()}/secret_db?connect_timeout=2"
    with caplog.at_level("WARNING", logger="leoflow.api.routes.system"), \
            client_for(create_app(api_settings(url))) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503
    body = ready.json()["error"]
    assert body["message"] == "database unavailable" and body["details"] == {"database": "unavailable"}
    for leak in ("secret_user", "hunter2", "secret_db", "127.0.0.1", "refused", "connection"):
        assert leak not in ready.text
    assert "hunter2" not in caplog.text  # the log has the reason, never the password
    assert caplog.records


def test_readyz_hides_the_drivers_words_in_a_gate_refusal(database_url: str) -> None:
    from leoflow.election.health import GATE_REFUSAL

    health = ElectionHealth()
    with client_for(create_app(api_settings(database_url), election_health=health)) as client:
        health.refuse(f'{GATE_REFUSAL}: password authentication failed for user "secret_user"')
        ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["error"]["message"] == f"{GATE_REFUSAL}: database unavailable"
