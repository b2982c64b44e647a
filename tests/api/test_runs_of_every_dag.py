"""``GET /api/v2/runs``: what runs anywhere — every DAG's runs, newest first, paged and filtered."""

from __future__ import annotations

import httpx
import psycopg

from tests.api.conftest import ADMIN, READ, spec


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
