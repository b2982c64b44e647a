"""Clear and mark across leader failovers, on real ``leoflow serve`` processes with the local
executor: the command is sent to a surviving replica while the leader is gone (killed, then
stopped gracefully) and applied by the next leader. Nothing runs twice (a journal written by the
task processes themselves) and no run is left stuck."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.election.cluster import Cluster, wait_for


def task(task_id: str, script: str, journal: Path, *deps: str) -> dict[str, Any]:
    line = f'echo "$LEOFLOW_TASK_ID $LEOFLOW_TRY_NUMBER" >> {journal}'
    return {"id": task_id, "image": "busybox", "command": ["sh", "-c", f"{line}; {script}"],
            "depends_on": list(deps)}


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(database_url, tmp_path, name="commands", probe=False,
                env={"LEOFLOW_EXECUTOR": "local", "LEOFLOW_HOME": str(tmp_path / "home")})
    try:
        yield c
    finally:
        c.stop_all()


def run_state(api: httpx.Client, dag_id: str, run_id: str) -> dict[str, Any]:
    answer = api.get(f"/api/v2/dags/{dag_id}/runs/{run_id}")
    answer.raise_for_status()
    return dict(answer.json())


def ended(api: httpx.Client, dag_id: str, run_id: str, state: str, timeout: float = 90) -> None:
    wait_for(lambda: run_state(api, dag_id, run_id)["state"] == state, timeout, f"run {run_id} {state}",
             interval=0.1)


def test_clear_and_mark_survive_leader_failovers(cluster: Cluster, tmp_path: Path) -> None:
    journal = tmp_path / "journal.txt"
    marker = tmp_path / "failed-once"
    rerun = {"dag_id": "rerun", "tasks": [
        task("flaky", f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; exit 3", journal),
        task("after", "true", journal, "flaky")]}
    slow = {"dag_id": "slow", "tasks": [task("wait", "sleep 60", journal), task("next", "true", journal, "wait")]}
    cluster.start("a")
    cluster.start("b")
    leader, term = cluster.wait_leader()
    survivor = "b" if leader == "a" else "a"
    with httpx.Client(base_url=cluster.replicas[survivor].url, timeout=30) as api:
        new_leader = _clear_while_the_leader_is_dead(cluster, api, leader, term, rerun, slow)
    cluster.start(leader + "2")
    with httpx.Client(base_url=cluster.replicas[leader + "2"].url, timeout=30) as api:
        _mark_while_the_leader_steps_down(cluster, api, new_leader)

    # Nothing ran twice: each (task, try) appears once; the cleared task ran as a new try.
    executions = Counter(journal.read_text().splitlines())
    assert executions == {"flaky 1": 1, "flaky 2": 1, "after 1": 1, "wait 1": 1, "next 1": 1}, executions
    with psycopg.connect(cluster.database_url) as conn:
        stuck = conn.execute("SELECT run_id FROM dag_runs WHERE state NOT IN ('success')").fetchall()
        pending = conn.execute("SELECT id FROM run_commands WHERE applied_at IS NULL").fetchall()
    assert stuck == [] and pending == []


def _clear_while_the_leader_is_dead(cluster: Cluster, api: httpx.Client, leader: str, term: int,
                                    *specs: dict[str, Any]) -> str:
    for spec in specs:
        assert api.post("/api/v2/dags", json=spec).status_code == 201
    assert api.post("/api/v2/dags/rerun/runs", json={"run_id": "r1"}).status_code == 201
    ended(api, "rerun", "r1", "failed")

    # 1. Clear while the leader is dead (SIGKILL): the survivor records it, the next leader applies it.
    cluster.replicas[leader].signal(signal.SIGKILL)
    answer = api.post("/api/v2/dags/rerun/runs/r1/clear", json={"failed_only": True, "downstream": True})
    assert answer.status_code in (200, 202), answer.text
    ended(api, "rerun", "r1", "success")
    new_leader, new_term = cluster.wait_leader(not_node=leader)
    assert new_term > term
    with psycopg.connect(cluster.database_url) as conn:
        [(applied_term, outcome)] = conn.execute("SELECT term, outcome FROM run_commands").fetchall()
    assert applied_term == new_term and outcome == {"tasks": ["after", "flaky"]}

    return new_leader


def _mark_while_the_leader_steps_down(cluster: Cluster, api: httpx.Client, new_leader: str) -> None:
    # 2. Mark a running task while its leader steps down (SIGTERM) and another takes over.
    assert api.post("/api/v2/dags/slow/runs", json={"run_id": "s1"}).status_code == 201
    wait_for(lambda: [t["state"] for t in run_state(api, "slow", "s1")["tasks"] if t["task_id"] == "wait"]
             == ["running"], 60, "wait running", interval=0.1)
    cluster.replicas[new_leader].signal(signal.SIGTERM)
    answer = api.post("/api/v2/dags/slow/runs/s1/tasks/wait/mark", json={"state": "success"})
    assert answer.status_code in (200, 202), answer.text
    ended(api, "slow", "s1", "success")
