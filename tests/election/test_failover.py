"""Failover with replicas as real ``leoflow serve`` processes sharing one PostgreSQL.

Process start-up dominates these tests' run time, so each test walks through several
scenarios on the same replicas.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import psycopg

from tests.election.cluster import Cluster, ReplicaProcess, wait_for


def _fenced_writes_never_go_back(cluster: Cluster) -> None:
    """Probe writes (each fenced by check_term) in commit-id order never fall back to an older term."""
    terms = [e["term"] for e in cluster.events(("probe_write",))]
    assert terms, "the leader's probe service wrote nothing"
    assert terms == sorted(terms), "a write of an older term committed after a newer term"


def test_three_replicas_crash_and_terminated_session(cluster: Cluster) -> None:
    for node in ("r1", "r2", "r3"):
        cluster.start(node, wait=False)
    for r in cluster.replicas.values():
        cluster.wait_healthy(r)
    leader, term = cluster.wait_leader()

    # Exactly one leoflow_leader 1; every replica answers the API and agrees who leads.
    wait_for(lambda: cluster.leaders_by_metric() == [leader], 20, "exactly one leoflow_leader 1")
    for r in cluster.replicas.values():
        body = r.get("/api/v2/cluster/leader").json()
        assert body["node_id"] == leader and body["term"] == term
        assert body["api_url"] == cluster.replicas[leader].url
        assert r.metrics()["leoflow_leader_term"] == (term if r.node == leader else 0)

    def members() -> list[dict[str, object]]:
        items = cluster.replicas["r1"].get("/api/v2/cluster/nodes").json()["items"]
        return items if len(items) == 3 and all(n["state"] == "up" for n in items) else []
    wait_for(members, 20, "3 members up")
    # The probe service keeps writing events; wait until there are more than the page holds.
    wait_for(lambda: len(cluster.events()) > 50, 30, "more than 50 cluster events")
    events = cluster.replicas["r2"].get("/api/v2/cluster/events?limit=50").json()["items"]
    assert len(events) == 50 and events[0]["id"] > events[-1]["id"]  # newest first
    assert {"leader_elected", "node_joined"} <= {e["kind"] for e in cluster.events()}

    # SIGKILL the leader: another replica leads with a higher term; the dead one is marked down.
    killed_at = time.monotonic()
    cluster.replicas[leader].signal(signal.SIGKILL)
    second, second_term = cluster.wait_leader(not_node=leader, min_term=term)
    took = time.monotonic() - killed_at
    assert took < 10, f"crash handover took {took:.2f}s"
    wait_for(lambda: cluster.leaders_by_metric() == [second], 20, "the new leader's gauge")
    wait_for(lambda: any(e["kind"] == "node_left" and e["node_id"] == leader for e in cluster.events()),
             20, "node_left for the killed replica")

    # pg_terminate_backend() on the leader's lock session: it steps down, someone leads higher.
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE application_name = %s", (f"leoflow-lock:{second}",)).fetchone() == (True,)
    third, third_term = cluster.wait_leader(min_term=second_term)
    assert third_term > second_term
    lost = wait_for(lambda: [e for e in cluster.events(("leader_lost",)) if e["term"] == second_term],
                    20, "leader_lost of the terminated term")
    assert lost[0]["node_id"] == second and lost[0]["details"]["reason"]
    if third != second:
        wait_for(lambda: cluster.replicas[second].leader_gauge() == 0, 10, "the ex-leader's gauge 0")
    # Depending on which it notices first (the keepalive error, or its fenced writes being
    # refused), the ex-leader counts the step-down as lost or released.
    ended = cluster.replicas[second].metrics()
    assert (ended['leoflow_leadership_transitions_total{event="lost"}']
            + ended['leoflow_leadership_transitions_total{event="released"}']) >= 1
    assert cluster.holders() == 1
    _fenced_writes_never_go_back(cluster)


def _dag(dag_id: str, tasks: list[str]) -> dict[str, object]:
    return {"dag_id": dag_id, "schedule": None,
            "tasks": [{"id": t, "image": "busybox", "command": ["true"]} for t in tasks]}


def _run_succeeds(replica: ReplicaProcess, dag_id: str) -> dict[str, object]:
    run = httpx.post(f"{replica.url}/api/v2/dags/{dag_id}/runs", json={}, timeout=10)
    assert run.status_code == 201, run.text
    run_id = run.json()["run_id"]

    def finished() -> dict[str, object] | None:
        body: dict[str, object] = httpx.get(f"{replica.url}/api/v2/dags/{dag_id}/runs/{run_id}", timeout=10).json()
        return body if body["state"] in ("success", "failed") else None
    body = wait_for(finished, 60, f"run {run_id} of {dag_id} finished", interval=0.2)
    assert body["state"] == "success", body
    return body


def test_sigterm_hands_over_and_a_second_cluster_needs_a_database_of_its_own(cluster: Cluster) -> None:
    """Issue 17 §2 / ADR 0010: two clusters of 2 replicas each against one database."""
    # Plain `leoflow serve` with the production leader services (scheduler + memory executor).
    cluster.probe = False
    green = Cluster(cluster.database_url, cluster.workdir, name="green", probe=False)
    schema_url = f"{cluster.database_url}?options=-csearch_path%3Dgreen"
    green_schema = Cluster(schema_url, cluster.workdir, name="green", probe=False)
    try:
        for node in ("r1", "r2"):
            cluster.start(node, wait=False)
        for r in cluster.replicas.values():
            cluster.wait_healthy(r)  # serving: the database is claimed for 'default' by now
        refused = [green.start(node, wait=False) for node in ("g1", "g2")]
        leader, term = cluster.wait_leader()

        # The second cluster on the same database refuses to start, one line naming both clusters.
        for r in refused:
            assert r.proc.wait(60) == 2, r.log()[-2000:]
            lines = r.log().strip().splitlines()
            assert len(lines) == 1, lines
            assert "'green'" in lines[0] and "belongs to cluster 'default'" in lines[0]
            assert "LEOFLOW_DATABASE_URL" in lines[0] and "csearch_path" in lines[0]

        # With a schema of its own (migrated from empty through the same URL), it runs.
        assert leoflow_cli("db", "upgrade", env={"LEOFLOW_DATABASE_URL": schema_url}).returncode == 0
        for node in ("g1", "g2"):
            green_schema.start(node, wait=False)
        for r in green_schema.replicas.values():
            cluster.wait_healthy(r)
        with psycopg.connect(schema_url, autocommit=True) as conn:
            wait_for(lambda: conn.execute("SELECT count(*) FROM leader_terms").fetchone() == (1,), 30,
                     "a green leader in its schema")
        # A DAG of the same name in each cluster: each sees its own, each runs its own.
        blue_api, green_api = cluster.replicas["r1"], green_schema.replicas["g2"]
        for api, tasks in ((blue_api, ["extract"]), (green_api, ["x", "y"])):
            assert httpx.post(f"{api.url}/api/v2/dags", json=_dag("etl", tasks), timeout=10).status_code == 201
        for api, tasks in ((blue_api, ["extract"]), (green_api, ["x", "y"])):
            assert [d["dag_id"] for d in httpx.get(f"{api.url}/api/v2/dags", timeout=10).json()["items"]] == ["etl"]
            run = _run_succeeds(api, "etl")
            listed = httpx.get(f"{api.url}/api/v2/dags/etl/runs/{run['run_id']}/tasks", timeout=10).json()["items"]
            assert sorted(t["task_id"] for t in listed) == tasks
            assert len(httpx.get(f"{api.url}/api/v2/dags/etl/runs", timeout=10).json()["items"]) == 1

        started = time.monotonic()
        cluster.replicas[leader].signal(signal.SIGTERM)
        _new_leader, new_term = cluster.wait_leader(not_node=leader, min_term=term)
        took = time.monotonic() - started
        assert cluster.replicas[leader].proc.wait(30) == 0
        assert took < 15, f"graceful handover took {took:.2f}s"
        kinds = [(e["kind"], e["term"]) for e in cluster.events(("leader_elected", "leader_released"))]
        assert kinds[-3:] == [("leader_elected", term), ("leader_released", term), ("leader_elected", new_term)]
        old, new = cluster.terms()[-2:]
        assert old["term"] == term and old["end_reason"] == "shutdown"
        assert old["ended_at"] <= new["acquired_at"]
        assert '"message": "released leadership"' in cluster.replicas[leader].log()
        # The other cluster's leadership, in its own schema, was never disturbed.
        with psycopg.connect(schema_url, autocommit=True) as conn:
            assert [r[0] for r in conn.execute("SELECT kind FROM cluster_events WHERE kind LIKE 'leader_%'")] == [
                "leader_elected"]
        # Work resumed: the real scheduler of each term reported progress.
        wait_for(lambda: {term, new_term} <= {e["term"] for e in cluster.events(("scheduler_started",))},
                 20, "scheduler_started for both terms")
    finally:
        green.stop_all()
        green_schema.stop_all()


def leoflow_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "leoflow", *args], capture_output=True, text=True, env=full,
                          timeout=60, check=False)
