"""Repeated leader kill/restart cycles with 3 replicas: one holder at a time, terms increasing.

The default suite runs a few cycles; ``bench/failover.py`` runs the long version (100 cycles:
``--kills 50 --terms 50``) with the same invariants.
"""

from __future__ import annotations

import itertools
import signal
import threading

from tests.election.cluster import Cluster, wait_for

CYCLES = 4


def test_kill_restart_cycles_never_two_holders(cluster: Cluster) -> None:
    for node in ("r1", "r2", "r3"):
        cluster.start(node, wait=False)
    for r in cluster.replicas.values():
        cluster.wait_healthy(r)
    leader, term = cluster.wait_leader()

    # Gauges are read one replica after another, so a single sweep can straddle a handover;
    # two replicas at 1 in two consecutive sweeps would be a real double leader.
    doubles: list[set[str]] = []
    done = threading.Event()

    def sample() -> None:
        previous: set[str] = set()
        while not done.is_set():
            current = set(cluster.leaders_by_metric())
            if len(current) > 1 and len(previous & current) > 1:
                doubles.append(previous & current)
            previous = current

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    seen_terms = [term]
    try:
        for cycle in range(CYCLES):
            sig = signal.SIGKILL if cycle % 2 == 0 else signal.SIGTERM
            victim = cluster.replicas[leader]
            others = [r for r in cluster.replicas.values() if r.node != leader]
            wait_for(lambda others=others: any(r.alive() and r.leader_gauge() == 0 for r in others), 120,
                     "a running follower")
            victim.signal(sig)
            leader, term = cluster.wait_leader(not_node=victim.node, min_term=term, timeout=60)
            seen_terms.append(term)
            victim.proc.wait(30)
            # Restart without waiting: the third replica is always there to take over.
            cluster.start(victim.node, wait=False)
        for r in cluster.replicas.values():
            cluster.wait_healthy(r)
    finally:
        done.set()
        sampler.join(10)

    assert seen_terms == sorted(set(seen_terms)), "terms must strictly increase"
    history = cluster.terms()
    assert [t["term"] for t in history] == sorted(t["term"] for t in history)
    acquired = [t["acquired_at"] for t in history]
    assert acquired == sorted(acquired)
    for earlier, later in itertools.pairwise(history):
        assert earlier["ended_at"] is not None and earlier["ended_at"] <= later["acquired_at"]
    assert not doubles, f"two replicas reported leoflow_leader 1 at once: {doubles}"
    probe_terms = [e["term"] for e in cluster.events(("probe_write",))]
    assert probe_terms == sorted(probe_terms), "a fenced write of an older term committed late"
    wait_for(lambda: cluster.holders() == 1, 10, "one holder")
