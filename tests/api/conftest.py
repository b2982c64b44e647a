"""Fixtures for API tests: the app on a fresh migrated database, with a read and an admin token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.settings import Settings, load_settings
from tests.api.live import client_for

READ_TOKEN = "read-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789"
TOKENS = f"reader:read:{READ_TOKEN},boss:admin:{ADMIN_TOKEN}"
READ = {"Authorization": f"Bearer {READ_TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def api_settings(database_url: str, **extra: str) -> Settings:
    return load_settings({
        "LEOFLOW_DATABASE_URL": database_url,
        "LEOFLOW_NODE_ID": "api-test",
        "LEOFLOW_LOG_FORMAT": "text",
        "LEOFLOW_API_TOKENS": TOKENS,
        "LEOFLOW_DB_POOL_SIZE": "4",
        **extra,
    })


@pytest.fixture
def api_client(database_url: str) -> Iterator[httpx.Client]:
    with client_for(create_app(api_settings(database_url))) as client:
        yield client


def spec(dag_id: str = "etl", **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "dag_id": dag_id,
        "schedule": None,
        "tasks": [
            {"id": "extract", "image": "python:3.12-slim", "command": ["true"]},
            {"id": "load", "image": "python:3.12-slim", "command": ["true"], "depends_on": ["extract"]},
        ],
    }
    doc.update(changes)
    return doc


def seed_task(database_url: str, dag_id: str, run_id: str, task_id: str, *, state: str = "pending",
              tries: list[dict[str, Any]] | None = None) -> None:
    """Insert a task instance (and its tries and logs) as the leader's scheduler/executor would."""
    import psycopg

    tries = tries or []
    with psycopg.connect(database_url, autocommit=True) as conn:
        run_pk = conn.execute("SELECT id FROM dag_runs WHERE dag_id = %s AND run_id = %s",
                              (dag_id, run_id)).fetchone()[0]  # type: ignore[index]
        ti = conn.execute(
            "INSERT INTO task_instances (run_pk, task_id, state, try_number, max_tries) "
            "VALUES (%s, %s, %s, %s, 3) RETURNING id", (run_pk, task_id, state, len(tries))).fetchone()[0]  # type: ignore[index]
        for number, t in enumerate(tries, start=1):
            ended = "now()" if t.get("ended", True) else "NULL"
            # As the executors do: a finished try's stored logs are marked shipped (complete).
            shipped = "now()" if t.get("ended", True) and t.get("log") is not None else "NULL"
            try_pk = conn.execute(
                f"INSERT INTO task_tries (task_instance_id, try_number, state, term, executor_ref, ended_at, "
                f"exit_code, logs_shipped_at) VALUES (%s, %s, %s, 1, %s, {ended}, %s, {shipped}) RETURNING id",
                (ti, number, t.get("state", "success"), f"pod-{task_id}-{number}", t.get("exit_code"))).fetchone()[0]  # type: ignore[index]
            if t.get("log") is not None:
                conn.execute("INSERT INTO task_logs (task_try_id, content, truncated, size_bytes) "
                             "VALUES (%s, %s, %s, %s)", (try_pk, t["log"], t.get("truncated", False), len(t["log"])))
