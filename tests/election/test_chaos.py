"""Injected faults: blackholed network, frozen leader, PostgreSQL restart (poolers: test_poolers.py).

Timings are short (lease 4 s, keepalive 0.5 s, poll 1 s) so each fault resolves in seconds;
assertions are about order (the old leader stopped before the new one started), never about
tight wall-clock figures.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from leoflow.db import migrations
from tests.election.cluster import Cluster, wait_for
from tests.election.proxy import PartitionProxy
from tests.harness.postgres import PostgresServer, private_server


def _term_row(cluster: Cluster, term: int) -> dict[str, object]:
    return next(t for t in cluster.terms() if t["term"] == term)


def _old_term_writes_after(cluster: Cluster, old_term: int, moment: datetime) -> list[dict[str, object]]:
    return [e for e in cluster.events(("probe_write",)) if e["term"] == old_term and e["ts"] >= moment]


def test_partitioned_leader_stops_before_a_new_leader_starts(cluster: Cluster, pg_server: PostgresServer) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(cluster.database_url)
    with PartitionProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        proxied = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
        a = cluster.start("a", database_url=proxied)
        leader, term = cluster.wait_leader()
        assert leader == "a"
        b = cluster.start("b")
        wait_for(lambda: b.leader_gauge() == 0, 10, "b follows")

        proxy.partition()
        # The old leader fences itself (gauge 0) on its own, while still partitioned ...
        wait_for(lambda: a.leader_gauge() == 0, 15, "a stops acting")
        stopped_seen = time.monotonic()
        # ... and only then does b get the lock (the server-side session still looks alive;
        # b evicts it after twice the lease of silence).
        new_leader, new_term = cluster.wait_leader(min_term=term, timeout=30)
        assert new_leader == "b"
        assert time.monotonic() >= stopped_seen
        proxy.heal()
        lost = wait_for(lambda: [e for e in cluster.events(("leader_lost",)) if e["term"] == term],
                        30, "a records leader_lost after healing")
        assert lost[0]["details"]["reason"] in ("keepalive timed out", "lease expired without a successful keepalive")
        # Leadership intervals never overlap: a's term ended before b's began.
        old, new = _term_row(cluster, term), _term_row(cluster, new_term)
        assert old["ended_at"] is not None and old["ended_at"] < new["acquired_at"], (old, new)
        assert not _old_term_writes_after(cluster, term, new["acquired_at"])  # type: ignore[arg-type]
        wait_for(lambda: a.leader_gauge() == 0 and b.leader_gauge() == 1, 10, "a follows, b leads")


def test_frozen_leader_commits_nothing_after_resuming(cluster: Cluster) -> None:
    a = cluster.start("a")
    leader, term = cluster.wait_leader()
    assert leader == "a"
    b = cluster.start("b")
    wait_for(lambda: b.leader_gauge() == 0, 10, "b follows")
    a.signal(signal.SIGSTOP)
    try:
        new_leader, new_term = cluster.wait_leader(min_term=term, timeout=40)
        assert new_leader == "b"
        wait_for(lambda: [e for e in cluster.events(("probe_write",)) if e["term"] == new_term], 10,
                 "b's fenced writes")
    finally:
        a.signal(signal.SIGCONT)
    wait_for(lambda: a.leader_gauge() == 0, 15, "the resumed ex-leader stands down")
    time.sleep(1.0)  # give the resumed process every chance to (wrongly) commit
    acquired = _term_row(cluster, new_term)["acquired_at"]
    assert not _old_term_writes_after(cluster, term, acquired)  # type: ignore[arg-type]
    assert a.alive() and cluster.db_leader() == ("b", new_term)
    lost = wait_for(lambda: [e for e in cluster.events(("leader_lost",)) if e["term"] == term], 15,
                    "a records leader_lost")
    assert lost[0]["node_id"] == "a"


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[tuple[object, str]]:
    with private_server() as pg:
        url = pg.create_database("leoflow")
        migrations.upgrade(url)
        yield pg, url


def test_postgres_restart(own_server: tuple[object, str], tmp_path: Path) -> None:
    pg, url = own_server
    cluster = Cluster(url, tmp_path)
    try:
        a, b = cluster.start("a", wait=False), cluster.start("b", wait=False)
        for r in (a, b):
            cluster.wait_healthy(r)
        _leader, term = cluster.wait_leader()
        pg.stop("fast")  # type: ignore[attr-defined]
        wait_for(lambda: a.leader_gauge() == 0 and b.leader_gauge() == 0, 15, "nobody leads while it is down")
        for r in (a, b):
            assert r.alive()
            assert r.get("/healthz").status_code == 200
            assert r.get("/readyz", timeout=15).status_code == 503
        time.sleep(1.0)
        assert a.leader_gauge() == 0 and b.leader_gauge() == 0 and a.alive() and b.alive()
        pg.start()  # type: ignore[attr-defined]
        _new_leader, new_term = cluster.wait_leader(min_term=term, timeout=40)
        assert new_term > term
        wait_for(lambda: sorted([a.leader_gauge(), b.leader_gauge()]) == [0, 1], 15, "one gauge at 1")
        wait_for(lambda: all(r.get("/readyz", timeout=10).status_code == 200 for r in (a, b)), 30, "ready again")
    finally:
        cluster.stop_all()


