"""DAG routes on a real database: apply (JSON and YAML), idempotence, versions, pause, delete, lists."""

from __future__ import annotations

import httpx
import yaml

from tests.api.conftest import ADMIN, READ, spec


def test_apply_creates_then_is_a_no_op_then_versions(api_client: httpx.Client) -> None:
    first = api_client.post("/api/v2/dags", json=spec(), headers=ADMIN)
    assert first.status_code == 201, first.text
    assert first.json()["dag_id"] == "etl"
    assert first.json()["version"] == 1
    assert first.json()["spec"]["tasks"][1]["depends_on"] == ["extract"]

    same = api_client.post("/api/v2/dags", json=spec(), headers=ADMIN)
    assert same.status_code == 200
    assert same.json()["version"] == 1

    changed = api_client.put("/api/v2/dags/etl", json=spec(max_active_runs=3), headers=ADMIN)
    assert changed.status_code == 201
    assert changed.json()["version"] == 2

    shown = api_client.get("/api/v2/dags/etl", headers=READ)
    assert shown.status_code == 200
    assert shown.json()["version"] == 2


def test_yaml_bodies_are_accepted(api_client: httpx.Client) -> None:
    body = yaml.safe_dump(spec("from-yaml", schedule="@daily", start_date="2026-01-01T00:00:00Z"))
    answer = api_client.post("/api/v2/dags", content=body,
                             headers={**ADMIN, "Content-Type": "application/yaml"})
    assert answer.status_code == 201, answer.text
    assert answer.json()["schedule"] == "@daily"
    assert answer.json()["next_run_at"] is not None


def test_validation_errors_name_the_field(api_client: httpx.Client) -> None:
    bad = spec()
    bad["tasks"][1]["depends_on"] = ["extrct"]
    answer = api_client.post("/api/v2/dags", json=bad, headers=ADMIN)
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["code"] == "validation_failed"
    assert error["details"]["field"] == "tasks[1].depends_on[0]"
    assert "extrct" in error["message"]


def test_put_rejects_a_body_for_another_dag(api_client: httpx.Client) -> None:
    answer = api_client.put("/api/v2/dags/etl", json=spec("other"), headers=ADMIN)
    assert answer.status_code == 422
    assert answer.json()["error"]["details"]["field"] == "dag_id"


def test_pause_unpause_and_filter_by_state(api_client: httpx.Client) -> None:
    for name in ("a", "b", "c"):
        assert api_client.post("/api/v2/dags", json=spec(name), headers=ADMIN).status_code == 201
    paused = api_client.patch("/api/v2/dags/b", json={"paused": True}, headers=ADMIN)
    assert paused.status_code == 200 and paused.json()["paused"] is True
    only_paused = api_client.get("/api/v2/dags", params={"state": "paused"}, headers=READ).json()
    assert [d["dag_id"] for d in only_paused["items"]] == ["b"]
    active = api_client.get("/api/v2/dags", params={"state": "active"}, headers=READ).json()
    assert [d["dag_id"] for d in active["items"]] == ["a", "c"]
    assert api_client.patch("/api/v2/dags/b", json={"paused": False}, headers=ADMIN).json()["paused"] is False

    wrong = api_client.patch("/api/v2/dags/b", json={"paused": "yes"}, headers=ADMIN)
    assert wrong.status_code == 422 and wrong.json()["error"]["details"]["field"] == "paused"
    extra = api_client.patch("/api/v2/dags/b", json={"paused": True, "schedule": "x"}, headers=ADMIN)
    assert extra.status_code == 422 and extra.json()["error"]["details"]["field"] == "schedule"
    missing = api_client.patch("/api/v2/dags/zzz", json={"paused": True}, headers=ADMIN)
    assert missing.status_code == 404


def test_delete_hides_the_dag(api_client: httpx.Client) -> None:
    api_client.post("/api/v2/dags", json=spec(), headers=ADMIN)
    assert api_client.delete("/api/v2/dags/etl", headers=ADMIN).status_code == 204
    assert api_client.get("/api/v2/dags/etl", headers=READ).status_code == 404
    assert api_client.delete("/api/v2/dags/etl", headers=ADMIN).status_code == 404
    assert api_client.get("/api/v2/dags", headers=READ).json()["items"] == []


def test_dag_list_pages_with_an_opaque_cursor(api_client: httpx.Client) -> None:
    names = [f"dag-{i:02d}" for i in range(7)]
    for name in names:
        api_client.post("/api/v2/dags", json=spec(name), headers=ADMIN)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        body = api_client.get("/api/v2/dags", params=params, headers=READ).json()
        seen += [d["dag_id"] for d in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == names
    assert pages == 3
