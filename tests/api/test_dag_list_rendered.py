"""The DAG list is rendered by PostgreSQL (on the API pool's raw connections, as the hot run read):
its items must be exactly what the Python-rendered routes show for the same DAG — the ``Dag``
schema's fields, timestamps in the same ISO 8601 form, schedules of every shape."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from leoflow.api.openapi.dags import SCHEMAS
from tests.api.conftest import ADMIN, READ, spec


def test_list_items_equal_what_the_dag_route_shows(api_client: httpx.Client, database_url: str) -> None:
    shapes: dict[str, Any] = {"cron": "*/5 * * * *", "manual": None, "datasets": {"datasets": {"any": ["s3://b/k"]}}}
    for name, schedule in shapes.items():
        answer = api_client.post("/api/v2/dags", json=spec(f"shape-{name}", schedule=schedule), headers=ADMIN)
        assert answer.status_code == 201, answer.text
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state) "
                   "SELECT dag_id, 'r1', current_version_id, 'manual', 'failed' FROM dags WHERE dag_id = 'shape-cron'")
        db.execute("UPDATE dags SET source = 'git', schedule_error = 'a \"quoted\" reason ✓' "
                   "WHERE dag_id = 'shape-manual'")
    answer = api_client.get("/api/v2/dags", params={"prefix": "shape-"}, headers=READ)
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    page = answer.json()
    assert list(page) == ["items", "next_cursor"] and page["next_cursor"] is None
    fields = list(SCHEMAS["Dag"]["properties"])
    for item in page["items"]:
        assert sorted(item) == sorted(fields), item  # the schema's fields, no more
        shown = api_client.get(f"/api/v2/dags/{item['dag_id']}", headers=READ).json()
        assert {k: item[k] for k in fields if k in shown} == {k: shown[k] for k in fields if k in shown}
    by_id = {d["dag_id"]: d for d in page["items"]}
    assert by_id["shape-cron"]["schedule"] == "*/5 * * * *" and by_id["shape-cron"]["next_run_at"] is not None
    assert (by_id["shape-cron"]["last_run_id"], by_id["shape-cron"]["last_run_state"]) == ("r1", "failed")
    assert by_id["shape-datasets"]["schedule"] == {"datasets": {"any": ["s3://b/k"]}}
    assert by_id["shape-manual"]["schedule"] is None and by_id["shape-manual"]["source"] == "git"
    assert by_id["shape-manual"]["schedule_error"] == 'a "quoted" reason ✓'


def test_a_page_with_more_has_a_cursor_after_its_last_item(api_client: httpx.Client) -> None:
    for i in range(3):
        assert api_client.post("/api/v2/dags", json=spec(f"more-{i}"), headers=ADMIN).status_code == 201
    first = api_client.get("/api/v2/dags", params={"limit": "2"}, headers=READ).json()
    assert [d["dag_id"] for d in first["items"]] == ["more-0", "more-1"] and first["next_cursor"]
    rest = api_client.get("/api/v2/dags", params={"limit": "2", "cursor": first["next_cursor"]}, headers=READ).json()
    assert [d["dag_id"] for d in rest["items"]] == ["more-2"] and rest["next_cursor"] is None
