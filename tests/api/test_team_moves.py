"""Moving a DAG to another team (another namespace) while it has live tries: a 409 naming the runs.

On real PostgreSQL: an apply or a sync that changes a DAG's owner — a new ``team:``, or dropping it
so that its prefix decides — is refused while a task of one of its runs is queued, running or being
cancelled, and nothing is written; without live tries the move goes through.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from leoflow.api.app import create_app
from tests.api.conftest import ADMIN, api_settings, seed_task, spec
from tests.api.live import client_for

TEAMS = """
teams:
  - {name: data, dag_id_prefixes: [data-], namespace: data}
  - {name: ml, dag_id_prefixes: [ml-], namespace: ml}
"""


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[httpx.Client]:
    (tmp_path / "teams.yaml").write_text(TEAMS)
    settings = api_settings(database_url, LEOFLOW_TEAMS_FILE=str(tmp_path / "teams.yaml"))
    with client_for(create_app(settings)) as client:
        assert client.post("/api/v2/dags", json=spec("data-etl"), headers=ADMIN).status_code == 201
        assert client.post("/api/v2/dags/data-etl/runs", json={"run_id": "live-1"}, headers=ADMIN).status_code == 201
        yield client


def _set_task(database_url: str, run_id: str, state: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        changed = conn.execute(
            "UPDATE task_instances SET state = %s WHERE task_id = 'extract' AND run_pk = "
            "(SELECT id FROM dag_runs WHERE dag_id = 'data-etl' AND run_id = %s)", (state, run_id)).rowcount
    if not changed:
        seed_task(database_url, "data-etl", run_id, "extract", state=state)


def _version(client: httpx.Client) -> Any:
    return client.get("/api/v2/dags/data-etl", headers=ADMIN).json()["version"]


@pytest.mark.parametrize("state", ["queued", "running", "cancelling"])
def test_a_dag_with_live_tries_does_not_move(cluster: httpx.Client, database_url: str, state: str) -> None:
    _set_task(database_url, "live-1", state)
    before = _version(cluster)
    moved = cluster.post("/api/v2/dags", json=spec("data-etl", team="ml"), headers=ADMIN)
    assert moved.status_code == 409, moved.text
    error = moved.json()["error"]
    assert "'live-1'" in error["message"] and "team 'data'" in error["message"] and "team 'ml'" in error["message"]
    assert error["details"] == {"field": "team", "live_runs": ["live-1"]}
    files = [{"name": "a.yaml", "content": "dag_id: data-etl\nteam: ml\ntasks:\n  - {id: a, image: busybox}\n"}]
    synced = cluster.post("/api/v2/dags:sync", json={"source": "git", "files": files}, headers=ADMIN)
    assert synced.status_code == 409 and "'live-1'" in synced.json()["error"]["message"]
    put = cluster.put("/api/v2/dags/data-etl", json=spec("data-etl", team="ml"), headers=ADMIN)
    assert put.status_code == 409
    assert _version(cluster) == before  # nothing written
    # A re-apply that keeps its team is no move: allowed while it runs.
    same = cluster.post("/api/v2/dags", json=spec("data-etl", description="same team", team="data"), headers=ADMIN)
    assert same.status_code in (200, 201), same.text


def test_dropping_the_team_field_is_a_move_too(cluster: httpx.Client, database_url: str) -> None:
    assert cluster.post("/api/v2/dags", json=spec("ml-model", team="data"), headers=ADMIN).status_code == 201
    assert cluster.post("/api/v2/dags/ml-model/runs", json={"run_id": "r"}, headers=ADMIN).status_code == 201
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE task_instances SET state = 'running' WHERE run_pk = "
                     "(SELECT id FROM dag_runs WHERE dag_id = 'ml-model')")
        if not conn.execute("SELECT count(*) FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk "
                            "WHERE r.dag_id = 'ml-model'").fetchone()[0]:  # type: ignore[index]
            seed_task(database_url, "ml-model", "r", "extract", state="running")
    dropped = cluster.post("/api/v2/dags", json=spec("ml-model"), headers=ADMIN)  # its prefix says ml
    assert dropped.status_code == 409 and "'r'" in dropped.json()["error"]["message"]


def test_without_live_tries_the_move_is_allowed(cluster: httpx.Client, database_url: str) -> None:
    _set_task(database_url, "live-1", "success")
    moved = cluster.post("/api/v2/dags", json=spec("data-etl", team="ml"), headers=ADMIN)
    assert moved.status_code in (200, 201), moved.text
    assert cluster.get("/api/v2/dags/data-etl", headers=ADMIN).json()["spec"]["team"] == "ml"
