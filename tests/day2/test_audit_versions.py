"""The audit log of API writes, and a DAG's versions."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.api.conftest import ADMIN, READ, spec
from tests.api.test_dag_secrets import conforms


def _audit(client: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    answer = client.get("/api/v2/audit", params=params, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def test_every_write_is_audited_with_who_what_and_outcome(api_client: httpx.Client) -> None:
    headers = {**ADMIN, "User-Agent": "audit-test/1", "X-Forwarded-For": "203.0.113.9"}
    assert api_client.post("/api/v2/dags", json=spec(), headers=headers).status_code == 201
    assert api_client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 200
    assert api_client.patch("/api/v2/dags/etl", json={"paused": True}, headers=ADMIN).status_code == 200
    run = api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1", "conf": {"password": "hunter2"}},
                          headers=ADMIN)
    assert run.status_code == 201
    assert api_client.post("/api/v2/dags/etl/runs/r1/cancel", headers=ADMIN).status_code == 200
    assert api_client.post("/api/v2/dags/etl/runs/r1/cancel", headers=ADMIN).status_code == 409
    assert api_client.post("/api/v2/dags/etl/runs", json={"conf": []}, headers=ADMIN).status_code == 422
    assert api_client.post("/api/v2/dags/etl/runs", json={}, headers=READ).status_code == 403
    assert api_client.post("/api/v2/dags/etl/runs", json={}).status_code == 401  # no token: not recorded
    assert api_client.delete("/api/v2/dags/etl", headers=ADMIN).status_code == 204
    assert api_client.get("/api/v2/dags", headers=ADMIN).status_code == 200  # reads are not audited

    events = list(reversed(_audit(api_client)))
    assert [(e["actor"], e["method"], e["route"], e["status"]) for e in events] == [
        ("boss", "POST", "/api/v2/dags", 201),
        ("boss", "POST", "/api/v2/dags", 200),
        ("boss", "PATCH", "/api/v2/dags/{dag_id}", 200),
        ("boss", "POST", "/api/v2/dags/{dag_id}/runs", 201),
        ("boss", "POST", "/api/v2/dags/{dag_id}/runs/{run_id}/cancel", 200),
        ("boss", "POST", "/api/v2/dags/{dag_id}/runs/{run_id}/cancel", 409),
        ("boss", "POST", "/api/v2/dags/{dag_id}/runs", 422),
        ("reader", "POST", "/api/v2/dags/{dag_id}/runs", 403),
        ("boss", "DELETE", "/api/v2/dags/{dag_id}", 204),
    ]
    first = events[0]
    assert first["dag_id"] == "etl" and first["details"] == {"version": 1, "changed": True}
    assert (first["user_agent"], first["forwarded_for"]) == ("audit-test/1", "203.0.113.9")
    assert first["remote_addr"] == "127.0.0.1" and first["scope"] == "admin" and first["ts"]
    assert events[3]["run_id"] == "r1" and events[3]["details"] == {"run_id": "r1"}
    assert "hunter2" not in str(events)  # bodies (a conf) are never recorded

    assert [e["status"] for e in _audit(api_client, actor="reader")] == [403]
    assert len(_audit(api_client, dag_id="etl")) == 9
    page = api_client.get("/api/v2/audit", params={"limit": 4}, headers=ADMIN).json()
    rest = api_client.get("/api/v2/audit", params={"limit": 500, "cursor": page["next_cursor"]}, headers=ADMIN).json()
    assert len(page["items"]) == 4 and len(rest["items"]) == 5 and rest["next_cursor"] is None
    assert api_client.get("/api/v2/audit", headers=READ).status_code == 403


def test_a_read_token_hammering_write_routes_is_counted_in_a_few_rows(api_client: httpx.Client) -> None:
    """1,000 refused writes (distinct paths, four routes, eight at a time) leave one counted row per
    route and hour, not 1,000 rows, and the counts say exactly how many refusals there were."""
    assert api_client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 201
    writes = [("POST", "/api/v2/dags/etl/runs"), ("PATCH", "/api/v2/dags/etl"),
              ("DELETE", "/api/v2/dags/dag-{n}"), ("POST", "/api/v2/dags/etl/runs/run-{n}/cancel")]

    def hammer(worker: int) -> list[int]:
        with httpx.Client(base_url=api_client.base_url, timeout=30) as client:
            return [client.request(writes[n % 4][0], writes[n % 4][1].format(n=n), json={}, headers=READ).status_code
                    for n in range(worker, 1000, 8)]

    with ThreadPoolExecutor(8) as pool:
        statuses = [status for answers in pool.map(hammer, range(8)) for status in answers]
    assert len(statuses) == 1000 and set(statuses) == {403}

    page = api_client.get("/api/v2/audit", params={"actor": "reader"}, headers=ADMIN).json()
    denials = page["items"]
    # One row per route, two if the hammering straddled the turn of an hour.
    assert 4 <= len(denials) <= 8, denials
    assert sum(e["count"] for e in denials) == 1000
    assert {(e["method"], e["route"]) for e in denials} == {
        ("POST", "/api/v2/dags/{dag_id}/runs"), ("PATCH", "/api/v2/dags/{dag_id}"),
        ("DELETE", "/api/v2/dags/{dag_id}"), ("POST", "/api/v2/dags/{dag_id}/runs/{run_id}/cancel")}
    assert all(e["status"] == 403 and e["ts"] <= e["last_ts"] for e in denials)
    conforms(page, "AuditPage")
    created = _audit(api_client, actor="boss")
    assert [(e["status"], e["count"], e["last_ts"]) for e in created] == [(201, 1, None)]  # writes: one row each


def test_refusals_in_a_new_hour_open_a_new_counted_row(api_client: httpx.Client, database_url: str) -> None:
    import psycopg

    def refuse(times: int) -> None:
        for _ in range(times):
            assert api_client.post("/api/v2/dags/etl/runs", json={}, headers=READ).status_code == 403

    refuse(3)
    with psycopg.connect(database_url, autocommit=True) as conn:  # the hour turns
        conn.execute("UPDATE audit_events SET denial_window = denial_window - interval '1 hour'")
    refuse(2)
    assert [(e["status"], e["count"]) for e in _audit(api_client, actor="reader")] == [(403, 2), (403, 3)]


def test_versions_list_and_show(api_client: httpx.Client) -> None:
    assert api_client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 201
    assert api_client.post("/api/v2/dags", json=spec(description="v2"), headers=ADMIN).status_code == 201
    assert api_client.post("/api/v2/dags/etl/runs", json={}, headers=ADMIN).status_code == 201
    listed = api_client.get("/api/v2/dags/etl/versions", headers=READ).json()
    assert [(v["version"], v["current"], v["runs"]) for v in listed["items"]] == [(2, True, 1), (1, False, 0)]
    first = api_client.get("/api/v2/dags/etl/versions/1", headers=READ).json()
    assert first["spec"]["dag_id"] == "etl" and "description" not in first["spec"]
    assert api_client.get("/api/v2/dags/etl/versions/2", headers=READ).json()["spec"]["description"] == "v2"
    assert api_client.get("/api/v2/dags/etl/versions/3", headers=READ).status_code == 404
    assert api_client.get("/api/v2/dags/etl/versions/x", headers=READ).status_code == 404
    assert api_client.get("/api/v2/dags/nope/versions", headers=READ).status_code == 404
    one = api_client.get("/api/v2/dags/etl/versions", params={"limit": 1}, headers=READ).json()
    two = api_client.get("/api/v2/dags/etl/versions", params={"limit": 1, "cursor": one["next_cursor"]},
                         headers=READ).json()
    assert [v["version"] for v in one["items"] + two["items"]] == [2, 1] and two["next_cursor"] is None
