"""Clear and mark through the API: validation, the recorded command, the audit row, and the
answers — 200 with what a leader did (a stepper plays the leader here), 202 when none applied it
in time, 409 with the leader's reason when it refused."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from leoflow.api.routes import commands as routes_commands
from tests.api.conftest import ADMIN, READ, seed_task, spec


@pytest.fixture
def run_with_tasks(api_client: httpx.Client, database_url: str) -> Iterator[httpx.Client]:
    assert api_client.post("/api/v2/dags", json=spec("etl"), headers=ADMIN).status_code == 201
    assert api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE dag_runs SET state = 'failed' WHERE run_id = 'r1'")
    seed_task(database_url, "etl", "r1", "extract", state="failed", tries=[{"state": "failed", "exit_code": 1}])
    yield api_client


def commands(database_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT kind, body, requested_by, applied_at FROM run_commands ORDER BY id").fetchall()


def test_bad_bodies_are_422_naming_the_field(run_with_tasks: httpx.Client, database_url: str) -> None:
    for body, field in (({}, "tasks"), ({"tasks": []}, "tasks"), ({"tasks": "extract"}, "tasks"),
                        ({"tasks": [3]}, "tasks[0]"), ({"tasks": ["nope"]}, "tasks[0]"),
                        ({"failed_only": "yes"}, "failed_only"), ({"failed_only": True, "downstream": 1}, "downstream"),
                        ({"failed_only": True, "all": True}, "all")):
        answer = run_with_tasks.post("/api/v2/dags/etl/runs/r1/clear", json=body, headers=ADMIN)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"]["details"]["field"] == field
    for body, field in (({}, "state"), ({"state": "skipped"}, "state"), ({"state": True}, "state"),
                        ({"state": "success", "why": "x"}, "why")):
        answer = run_with_tasks.post("/api/v2/dags/etl/runs/r1/tasks/extract/mark", json=body, headers=ADMIN)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"]["details"]["field"] == field
    for body in ({}, {"state": "skipped"}, {"state": "success", "tasks": ["a"]}):
        answer = run_with_tasks.post("/api/v2/dags/etl/runs/r1/mark", json=body, headers=ADMIN)
        assert answer.status_code == 422, (body, answer.text)
    assert commands(database_url) == []  # nothing recorded for the leader


def test_missing_things_are_404_and_runs_not_started_409(run_with_tasks: httpx.Client) -> None:
    post = run_with_tasks.post
    assert post("/api/v2/dags/etl/runs/nope/clear", json={"failed_only": True}, headers=ADMIN).status_code == 404
    assert post("/api/v2/dags/nope/runs/r1/clear", json={"failed_only": True}, headers=ADMIN).status_code == 404
    assert post("/api/v2/dags/etl/runs/r1/tasks/nope/mark", json={"state": "success"},
                headers=ADMIN).status_code == 404
    assert post("/api/v2/dags/etl/runs", json={"run_id": "queued"}, headers=ADMIN).status_code == 201
    answer = post("/api/v2/dags/etl/runs/queued/clear", json={"failed_only": True}, headers=ADMIN)
    assert answer.status_code == 409 and "has not started" in answer.json()["error"]["message"]
    assert post("/api/v2/dags/etl/runs/r1/clear", json={"failed_only": True}, headers=READ).status_code == 403


def test_without_a_leader_the_command_is_recorded_and_the_answer_is_202(
        run_with_tasks: httpx.Client, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes_commands, "COMMAND_WAIT", 0.3)
    answer = run_with_tasks.post("/api/v2/dags/etl/runs/r1/clear", json={"tasks": ["extract"], "downstream": True},
                                 headers=ADMIN)
    assert answer.status_code == 202, answer.text
    assert answer.json()["command"]["state"] == "pending"
    [(kind, body, who, applied)] = commands(database_url)
    assert (kind, body, applied) == ("clear", {"tasks": ["extract"], "failed_only": False, "downstream": True}, None)
    assert who  # the token's name, never the token
    with psycopg.connect(database_url) as conn:
        [(details,)] = conn.execute("SELECT details FROM audit_events WHERE route LIKE '%/clear'").fetchall()
    assert details["command_id"] == answer.json()["command"]["id"]


def _apply_soon(database_url: str, *, error: str | None = None) -> threading.Thread:
    """Play the leader: mark the pending command applied (or refused) shortly after it appears."""
    def apply() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for _ in range(200):
                row = conn.execute("SELECT id FROM run_commands WHERE applied_at IS NULL").fetchone()
                if row:
                    conn.execute("UPDATE run_commands SET applied_at = now(), term = 7, error = %s, "
                                 "outcome = CASE WHEN %s::text IS NULL THEN '{\"tasks\": [\"extract\"]}'::jsonb END "
                                 "WHERE id = %s", (error, error, row[0]))
                    return
                time.sleep(0.05)

    thread = threading.Thread(target=apply)
    thread.start()
    return thread


def test_mark_run_records_its_command(run_with_tasks: httpx.Client, database_url: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes_commands, "COMMAND_WAIT", 0.2)
    answer = run_with_tasks.post("/api/v2/dags/etl/runs/r1/mark", json={"state": "failed"}, headers=ADMIN)
    assert answer.status_code == 202, answer.text
    [(kind, body, _, applied)] = commands(database_url)
    assert (kind, body, applied) == ("mark_run", {"state": "failed"}, None)


def test_the_answer_reports_what_the_leader_did_or_why_it_refused(run_with_tasks: httpx.Client,
                                                                  database_url: str) -> None:
    thread = _apply_soon(database_url)
    answer = run_with_tasks.post("/api/v2/dags/etl/runs/r1/clear", json={"failed_only": True}, headers=ADMIN)
    thread.join()
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["command"]["state"] == "applied" and body["command"]["tasks"] == ["extract"]
    assert body["run"]["run_id"] == "r1" and [t["task_id"] for t in body["run"]["tasks"]] == ["extract"]
    thread = _apply_soon(database_url, error="run 'r1' was cancelled: clear its tasks to run them again")
    answer = run_with_tasks.post("/api/v2/dags/etl/runs/r1/tasks/extract/mark", json={"state": "success"},
                                 headers=ADMIN)
    thread.join()
    assert answer.status_code == 409 and "was cancelled" in answer.json()["error"]["message"]
