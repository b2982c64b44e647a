"""Run and task routes on a real database: trigger, conflicts, show, cancel, lists, tries, logs."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import httpx

from tests.api.conftest import ADMIN, READ, seed_task, spec


def _dag(client: httpx.Client, dag_id: str = "etl") -> None:
    assert client.post("/api/v2/dags", json=spec(dag_id), headers=ADMIN).status_code == 201


def test_trigger_show_and_conflict(api_client: httpx.Client) -> None:
    _dag(api_client)
    created = api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1", "conf": {"x": 1}}, headers=ADMIN)
    assert created.status_code == 201, created.text
    run = created.json()
    assert run["run_id"] == "r1" and run["state"] == "queued" and run["conf"] == {"x": 1}
    assert run["dag_version"] == 1 and run["tasks"] == []

    again = api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN)
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"

    generated = api_client.post("/api/v2/dags/etl/runs", headers=ADMIN)
    assert generated.status_code == 201
    assert generated.json()["run_id"].startswith("manual__")

    assert api_client.post("/api/v2/dags/nope/runs", json={}, headers=ADMIN).status_code == 404


def test_trigger_validates_the_body(api_client: httpx.Client) -> None:
    _dag(api_client)
    for body, field in (({"conf": [1]}, "conf"), ({"run_id": 5}, "run_id"), ({"run_id": "has space"}, "run_id"),
                        ({"runid": "x"}, "runid"), ({"conf": {"a": "\u0000"}}, "conf.a")):
        answer = api_client.post("/api/v2/dags/etl/runs", json=body, headers=ADMIN)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["error"]["details"]["field"] == field
    nan = api_client.post("/api/v2/dags/etl/runs", content=b'{"conf": {"a": NaN}}',
                          headers={**ADMIN, "Content-Type": "application/json"})
    assert nan.status_code == 400 and nan.json()["error"]["details"]["field"] == "body"


def test_run_detail_tasks_tries_and_logs(api_client: httpx.Client, database_url: str) -> None:
    _dag(api_client)
    api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN)
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[
        {"state": "failed", "exit_code": 1, "log": "boom\n"},
        {"state": "success", "exit_code": 0, "log": "done\n", "truncated": True}])
    seed_task(database_url, "etl", "r1", "load", state="running", tries=[{"state": "running", "ended": False}])

    run = api_client.get("/api/v2/dags/etl/runs/r1", headers=READ).json()
    assert [(t["task_id"], t["state"], t["try_number"]) for t in run["tasks"]] == [
        ("extract", "success", 2), ("load", "running", 1)]

    tasks = api_client.get("/api/v2/dags/etl/runs/r1/tasks", params={"state": "running"}, headers=READ).json()
    assert [t["task_id"] for t in tasks["items"]] == ["load"]

    detail = api_client.get("/api/v2/dags/etl/runs/r1/tasks/extract", headers=READ).json()
    assert [(t["try_number"], t["exit_code"], t["has_logs"]) for t in detail["tries"]] == [(1, 1, True), (2, 0, True)]

    latest = api_client.get("/api/v2/dags/etl/runs/r1/tasks/extract/logs", headers=READ)
    assert latest.status_code == 200
    assert latest.headers["content-type"].startswith("text/plain")
    assert latest.text.endswith("done\n") and "truncated" in latest.text
    assert latest.headers["X-Leoflow-Log-Complete"] == "true"
    first = api_client.get("/api/v2/dags/etl/runs/r1/tasks/extract/logs", params={"try": 1}, headers=READ)
    assert first.text == "boom\n" and first.headers["X-Leoflow-Try"] == "1"
    missing = api_client.get("/api/v2/dags/etl/runs/r1/tasks/extract/logs", params={"try": 3}, headers=READ)
    assert missing.status_code == 404 and missing.json()["error"]["details"]["field"] == "try"
    bad = api_client.get("/api/v2/dags/etl/runs/r1/tasks/extract/logs", params={"try": "x"}, headers=READ)
    assert bad.status_code == 400

    running = api_client.get("/api/v2/dags/etl/runs/r1/tasks/load/logs", headers=READ)
    assert running.status_code == 200
    assert running.headers["X-Leoflow-Log-Complete"] == "false"
    assert "incomplete" in running.text

    assert api_client.get("/api/v2/dags/etl/runs/r1/tasks/nope", headers=READ).status_code == 404
    assert api_client.get("/api/v2/dags/etl/runs/r2/tasks", headers=READ).status_code == 404


def test_cancel(api_client: httpx.Client) -> None:
    _dag(api_client)
    api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN)
    cancelled = api_client.post("/api/v2/dags/etl/runs/r1/cancel", headers=ADMIN)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert api_client.post("/api/v2/dags/etl/runs/r1/cancel", headers=ADMIN).status_code == 409
    assert api_client.post("/api/v2/dags/etl/runs/zz/cancel", headers=ADMIN).status_code == 404


def test_run_list_pages_newest_first_and_filters(api_client: httpx.Client) -> None:
    _dag(api_client)
    for i in range(5):
        api_client.post("/api/v2/dags/etl/runs", json={"run_id": f"r{i}"}, headers=ADMIN)
    api_client.post("/api/v2/dags/etl/runs/r1/cancel", headers=ADMIN)
    first = api_client.get("/api/v2/dags/etl/runs", params={"limit": 2}, headers=READ).json()
    assert [r["run_id"] for r in first["items"]] == ["r4", "r3"]
    rest = api_client.get("/api/v2/dags/etl/runs", params={"limit": 500, "cursor": first["next_cursor"]},
                          headers=READ).json()
    assert [r["run_id"] for r in rest["items"]] == ["r2", "r1", "r0"] and rest["next_cursor"] is None
    cancelled = api_client.get("/api/v2/dags/etl/runs", params={"state": "cancelled"}, headers=READ).json()
    assert [r["run_id"] for r in cancelled["items"]] == ["r1"]
    assert api_client.get("/api/v2/dags/nope/runs", headers=READ).status_code == 404


def _normalised(value: Any) -> Any:
    """Timestamps compared as instants: PostgreSQL and Python format fractions differently."""
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+[+-]\d\d:\d\d", value):
        return datetime.fromisoformat(value)
    return value


def test_the_run_document_postgres_renders_matches_the_python_rendered_answers(
        api_client: httpx.Client, database_url: str) -> None:
    _dag(api_client)
    api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1", "conf": {"n": [1, 2], "s": "é"}}, headers=ADMIN)
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"state": "success", "exit_code": 0}])
    seed_task(database_url, "etl", "r1", "load", state="running", tries=[{"state": "running", "ended": False}])
    from_python = api_client.post("/api/v2/dags/etl/runs/r1/cancel", headers=ADMIN).json()
    from_postgres = api_client.get("/api/v2/dags/etl/runs/r1", headers=READ).json()

    assert list(from_postgres) == list(from_python)  # the same fields, in the same order
    assert [list(t) for t in from_postgres["tasks"]] == [list(t) for t in from_python["tasks"]]
    assert _normalised(from_postgres) == _normalised(from_python)
    assert from_postgres["created_at"].endswith("+00:00") and from_postgres["conf"] == {"n": [1, 2], "s": "é"}
    listed = api_client.get("/api/v2/dags/etl/runs", headers=READ).json()["items"][0]
    assert _normalised(listed) == _normalised({k: v for k, v in from_postgres.items() if k != "tasks"})


def test_trigger_takes_a_run_timeout_and_names_a_bad_one(api_client: httpx.Client, database_url: str) -> None:
    import psycopg

    _dag(api_client)
    created = api_client.post("/api/v2/dags/etl/runs", json={"run_id": "bounded", "run_timeout_seconds": 90.5},
                              headers=ADMIN)
    assert created.status_code == 201, created.text
    assert created.json()["deadline_at"] is None  # set when the run starts
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT run_timeout_seconds FROM dag_runs WHERE run_id = 'bounded'").fetchone()
    assert row == (90.5,)
    for bad in (0, -5, "60", True, 1e12, [60], {"s": 1}, 366 * 86400 + 1):
        answer = api_client.post("/api/v2/dags/etl/runs", json={"run_timeout_seconds": bad}, headers=ADMIN)
        assert answer.status_code == 422, (bad, answer.text)
        assert answer.json()["error"]["details"]["field"] == "run_timeout_seconds"
