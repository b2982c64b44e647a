"""Failover with replicas as real ``leoflow serve`` processes sharing one PostgreSQL.

Process start-up dominates these tests' run time, so each test walks through several
scenarios on the same replicas.
"""

from __future__ import annotations

import signal
import time

import psycopg

from tests.election.cluster import Cluster, wait_for


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


def test_sigterm_hands_over_and_two_clusters_share_a_database(cluster: Cluster) -> None:
    # Plain `leoflow serve` with the production leader services (scheduler + memory executor).
    cluster.probe = False
    green = Cluster(cluster.database_url, cluster.workdir, name="green", probe=False)
    try:
        for node in ("r1", "r2"):
            cluster.start(node, wait=False)
        g1 = green.start("g1", wait=False)
        for r in [*cluster.replicas.values(), g1]:
            cluster.wait_healthy(r)
        leader, term = cluster.wait_leader()
        green_leader = green.wait_leader()
        assert green_leader[0] == "g1"
        assert g1.get("/api/v2/cluster/leader").json()["node_id"] == "g1"

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
        # The other cluster's leadership was never disturbed.
        assert green.db_leader() == green_leader
        assert [e["kind"] for e in green.events(("leader_elected", "leader_lost", "leader_released"))] == [
            "leader_elected"]
        # Work resumed: the real scheduler of each term reported progress.
        wait_for(lambda: {term, new_term} <= {e["term"] for e in cluster.events(("scheduler_started",))},
                 20, "scheduler_started for both terms")
    finally:
        green.stop_all()
