"""``GET /api/v2/runs`` and ``GET /api/v2/task-instances``: what runs anywhere, newest first, paged and filtered."""

from __future__ import annotations

import httpx
import psycopg

from tests.api.conftest import ADMIN, READ, seed_task, spec


def _runs(client: httpx.Client, **params: object) -> list[tuple[str, str]]:
    answer = client.get("/api/v2/runs", params=params, headers=READ)
    assert answer.status_code == 200, answer.text
    return [(r["dag_id"], r["run_id"]) for r in answer.json()["items"]]


def test_every_dags_runs_newest_first_paged_and_filtered(api_client: httpx.Client, database_url: str) -> None:
    for dag_id in ("etl", "report"):
        assert api_client.post("/api/v2/dags", json=spec(dag_id), headers=ADMIN).status_code == 201
    for dag_id, run_id in (("etl", "e1"), ("report", "p1"), ("etl", "e2")):
        assert api_client.post(f"/api/v2/dags/{dag_id}/runs", json={"run_id": run_id}, headers=ADMIN).status_code == 201
    api_client.post("/api/v2/dags/report/runs/p1/cancel", headers=ADMIN)
    assert _runs(api_client) == [("etl", "e2"), ("report", "p1"), ("etl", "e1")]

    first = api_client.get("/api/v2/runs", params={"limit": 2}, headers=READ).json()  # pages like one DAG's list
    assert [r["run_id"] for r in first["items"]] == ["e2", "p1"] and first["next_cursor"]
    assert _runs(api_client, cursor=first["next_cursor"]) == [("etl", "e1")]

    assert _runs(api_client, state="cancelled") == [("report", "p1")]
    assert _runs(api_client, dag_id="etl") == [("etl", "e2"), ("etl", "e1")]
    assert _runs(api_client, dag_id="nope") == []
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE dag_runs SET created_at = '2026-01-01T00:00:00Z' WHERE run_id = 'e1'")
    assert _runs(api_client, since="2026-01-02") == [("etl", "e2"), ("report", "p1")]
    assert _runs(api_client, since="2025-12-31T23:00:00+00:00", dag_id="etl") == [("etl", "e2"), ("etl", "e1")]


def test_a_read_token_lists_and_a_bad_filter_is_400(api_client: httpx.Client) -> None:
    assert api_client.get("/api/v2/runs").status_code == 401
    bad = api_client.get("/api/v2/runs", params={"since": "yesterday"}, headers=READ)
    assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "since"
    assert api_client.get("/api/v2/runs", params={"state": "bogus"}, headers=READ).status_code == 400


def test_task_instances_of_every_run(api_client: httpx.Client, database_url: str) -> None:
    """``GET /api/v2/task-instances``: newest first, each naming its DAG and run; filters as the runs'."""
    for dag_id in ("etl", "report"):
        assert api_client.post("/api/v2/dags", json=spec(dag_id), headers=ADMIN).status_code == 201
        assert api_client.post(f"/api/v2/dags/{dag_id}/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
    seed_task(database_url, "etl", "r1", "extract", state="failed")
    seed_task(database_url, "report", "r1", "extract", state="success")
    seed_task(database_url, "report", "r1", "load", state="upstream_failed")
    answer = api_client.get("/api/v2/task-instances", headers=READ)
    assert answer.status_code == 200
    items = answer.json()["items"]
    assert [(t["dag_id"], t["run_id"], t["task_id"]) for t in items] == [
        ("report", "r1", "load"), ("report", "r1", "extract"), ("etl", "r1", "extract")]
    assert "id" not in items[0] and items[0]["state"] == "upstream_failed"

    def ids(**params: object) -> list[tuple[str, str]]:
        found = api_client.get("/api/v2/task-instances", params=params, headers=READ).json()["items"]
        return [(t["dag_id"], t["task_id"]) for t in found]

    assert ids(state="failed") == [("etl", "extract")]
    assert ids(dag_id="etl") == [("etl", "extract")]
    assert ids(since="2999-01-01") == []
    first = api_client.get("/api/v2/task-instances", params={"limit": 2}, headers=READ).json()
    assert len(first["items"]) == 2 and ids(cursor=first["next_cursor"]) == [("etl", "extract")]
    assert api_client.get("/api/v2/task-instances", params={"since": "x"}, headers=READ).status_code == 400
