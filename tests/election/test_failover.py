"""Failover with replicas as real ``leoflow serve`` processes sharing one PostgreSQL."""

from __future__ import annotations

import signal
import time

from tests.election.cluster import Cluster, wait_for


def test_three_replicas_one_leader_and_all_answer(cluster: Cluster) -> None:
    for node in ("r1", "r2", "r3"):
        cluster.start(node, wait=False)
    for r in cluster.replicas.values():
        cluster.wait_healthy(r)
    leader, term = cluster.wait_leader()
    wait_for(lambda: cluster.leaders_by_metric() == [leader], 20, "exactly one leoflow_leader 1")
    for r in cluster.replicas.values():
        body = r.get("/api/v2/cluster/leader").json()
        assert body["node_id"] == leader and body["term"] == term
        metrics = r.metrics()
        assert metrics["leoflow_leader_term"] == (term if r.node == leader else 0)
    def members() -> list[dict[str, object]]:
        items = cluster.replicas["r1"].get("/api/v2/cluster/nodes").json()["items"]
        return items if len(items) == 3 and all(n["state"] == "up" for n in items) else []
    nodes = wait_for(members, 20, "3 members up")
    assert [n["is_leader"] for n in nodes].count(True) <= 1
    events = cluster.replicas["r2"].get("/api/v2/cluster/events?limit=50").json()["items"]
    assert len(events) == 50 and events[0]["id"] > events[-1]["id"]  # newest first (probe writes flood it)
    assert {"leader_elected", "node_joined"} <= {e["kind"] for e in cluster.events()}


def test_sigkill_leader_another_takes_over(cluster: Cluster) -> None:
    for node in ("r1", "r2", "r3"):
        cluster.start(node, wait=False)
    for r in cluster.replicas.values():
        cluster.wait_healthy(r)
    leader, term = cluster.wait_leader()
    killed_at = time.monotonic()
    cluster.replicas[leader].signal(signal.SIGKILL)
    new_leader, new_term = cluster.wait_leader(not_node=leader, min_term=term)
    took = time.monotonic() - killed_at
    assert new_term > term
    assert took < 10, f"crash handover took {took:.2f}s"
    wait_for(lambda: cluster.leaders_by_metric() == [new_leader], 20, "the new leader's gauge")


def test_sigterm_leader_hands_over_with_released_event(cluster: Cluster) -> None:
    for node in ("r1", "r2"):
        cluster.start(node, wait=False)
    for r in cluster.replicas.values():
        cluster.wait_healthy(r)
    leader, term = cluster.wait_leader()
    cluster.replicas[leader].signal(signal.SIGTERM)
    new_leader, new_term = cluster.wait_leader(not_node=leader, min_term=term)
    assert cluster.replicas[leader].proc.wait(30) == 0
    kinds = [(e["kind"], e["term"]) for e in cluster.events(("leader_elected", "leader_released"))]
    assert kinds[-3:] == [("leader_elected", term), ("leader_released", term), ("leader_elected", new_term)]
    released = cluster.terms()[-2]
    assert released["term"] == term and released["end_reason"] == "shutdown"
    assert released["ended_at"] <= cluster.terms()[-1]["acquired_at"]
