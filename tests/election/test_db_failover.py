"""Database failover (issue 17 §4): fencing terms survive the promotion of an asynchronous standby.

A real primary and streaming standby (``tests/harness/replication.py``). The standby is detached
before the primary's newest term, so promoting it loses that term exactly as an asynchronous
failover can; then:

- in-process, step by step: the term the promoted server still believes newest is void there
  (it began on the old timeline), and the next term is above every term the lost primary issued;
- with real ``leoflow serve`` replicas on the libpq multi-host URL
  (``target_session_attrs=read-write``): a leader emerges on the new primary, no term number is
  issued twice, no write of an older term commits after a newer one, triggered runs complete.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg
import pytest

from leoflow.db import migrations
from leoflow.db.connection.engine import make_sync_engine
from leoflow.db.connection.fencing import check_term
from leoflow.db.stores import leader_terms
from leoflow.db.stores.leader_terms import TERMS_PER_TIMELINE
from leoflow.errors import FencedOut
from tests.election.cluster import Cluster, wait_for
from tests.harness.replication import StreamingPair, streaming_pair

CLUSTER = "default"


@contextmanager
def lock_session(url: str, token: str) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(url, autocommit=True, application_name=f"leoflow-lock:{token}")
    try:
        leader_terms.configure_session(conn, token=token, lock_timeout_ms=5000, keepalive_idle=10,
                                         keepalive_interval=3, keepalive_count=4, user_timeout_ms=20000)
        yield conn
    finally:
        conn.close()


def lead(conn: psycopg.Connection[Any], token: str) -> tuple[int, int | None]:
    """Take the lock and start a term the way the elector does; (term, timeline)."""
    timeline = leader_terms.timeline(conn)
    assert leader_terms.wait_lock(conn, CLUSTER, token)
    return leader_terms.start_term(conn, CLUSTER, token, {}, lock_timeout=5, token=token,
                                     timeline=timeline), timeline


def fenced_write(url: str, term: int) -> None:
    """A scheduling write of ``term``: the fence check, then an insert, in one transaction."""
    engine = make_sync_engine(url, application_name="fenced-writer")
    try:
        with engine.begin() as conn:
            check_term(conn, CLUSTER, term)
            conn.exec_driver_sql("INSERT INTO cluster_events (cluster, kind, term) VALUES (%s, 'probe_write', %s)",
                                 (CLUSTER, term))
    finally:
        engine.dispose()


def lose_the_primary(pair: StreamingPair) -> None:
    """Kill the primary and promote the (detached) standby."""
    pair.primary.stop("immediate")
    pair.promote()


def test_a_promoted_standby_voids_every_earlier_term_and_never_reissues_one() -> None:
    with streaming_pair() as pair:
        primary, standby = pair.primary.url("leoflow"), pair.standby.url("leoflow")
        migrations.upgrade(primary)
        with lock_session(primary, "a") as a:
            t1, timeline = lead(a, "a")
            fenced_write(primary, t1)
            pair.wait_caught_up()
            pair.detach()  # asynchronous replication: what follows never reaches it
        # 'a' is paused (its lock session died with it); 'b' takes over on the primary.
        with lock_session(primary, "b") as b:
            t2, _ = lead(b, "b")
            fenced_write(primary, t2)
            with pytest.raises(FencedOut):
                fenced_write(primary, t1)
        lose_the_primary(pair)

        with psycopg.connect(standby, autocommit=True) as conn:
            # The promoted server lost term t2: it still names t1 the newest ...
            assert conn.execute("SELECT term, timeline FROM cluster_leadership").fetchone() == (t1, timeline)
            assert conn.execute("SELECT max(term) FROM leader_terms").fetchone() == (t1,)
        # ... yet t1's holder, resuming, commits nothing there: its term began on the old timeline.
        with pytest.raises(FencedOut, match="timeline"):
            fenced_write(standby, t1)
        with lock_session(standby, "c") as c:
            t3, new_timeline = lead(c, "c")
        assert timeline is not None and new_timeline == timeline + 1
        # Above every term the lost primary could have issued (t2 included): none issued twice.
        assert t3 > t2 > t1 and t3 >= new_timeline * TERMS_PER_TIMELINE
        fenced_write(standby, t3)
        for old in (t1, t2):
            with pytest.raises(FencedOut):
                fenced_write(standby, old)


def _dag() -> dict[str, object]:
    return {"dag_id": "etl", "schedule": None,
            "tasks": [{"id": t, "image": "busybox", "command": ["true"]} for t in ("a", "b", "c")]}


def _trigger(api: str) -> str:
    """Trigger a run; a 503 (a pooled connection the failover broke) is retried, as its Retry-After says."""
    def attempt() -> str | None:
        answer = httpx.post(f"{api}/api/v2/dags/etl/runs", json={}, timeout=10)
        if answer.status_code == 503:
            return None
        assert answer.status_code == 201, answer.text
        return str(answer.json()["run_id"])
    run_id: str = wait_for(attempt, 30, "a trigger accepted", interval=0.5)
    return run_id


def _succeeded(api: str, run_id: str) -> bool:
    try:
        return httpx.get(f"{api}/api/v2/dags/etl/runs/{run_id}", timeout=5).json().get("state") == "success"
    except (httpx.HTTPError, ValueError):
        return False


def test_replicas_on_a_multi_host_url_follow_the_promotion(tmp_path: Any) -> None:
    with streaming_pair() as pair:
        migrations.upgrade(pair.primary.url("leoflow"))
        url = pair.multi_host_url("leoflow")
        # Fast lease; the real scheduler and memory executor, plus the fenced probe writer.
        cluster = Cluster(url, tmp_path, services="real")
        try:
            a, b = cluster.start("a", wait=False), cluster.start("b", wait=False)
            for r in (a, b):
                cluster.wait_healthy(r)
            old_db = pair.primary.url("leoflow")
            cluster.database_url = old_db
            _leader, old_term = cluster.wait_leader()
            api = a.url
            assert httpx.post(f"{api}/api/v2/dags", json=_dag(), timeout=10).status_code == 201
            before = _trigger(api)
            wait_for(lambda: _succeeded(api, before), 60, "a run before the failover")
            wait_for(lambda: len(cluster.events(("probe_write",))) > 20, 30, "fenced writes")
            pair.wait_caught_up()
            # The standby falls behind; the leader crashes and another replica takes a term the
            # standby never sees, then the primary is lost.
            pair.detach()
            cluster.replicas[_leader].signal(signal.SIGKILL)
            cluster.replicas[_leader].proc.wait(10)
            _second, lost_term = cluster.wait_leader(not_node=_leader, min_term=old_term)
            wait_for(lambda: any(e["term"] == lost_term for e in cluster.events(("probe_write",))), 30,
                     "writes of the term about to be lost")
            old_terms = {t["term"] for t in cluster.terms()}
            lose_the_primary(pair)
            cluster.database_url = pair.standby.url("leoflow")
            cluster.start(_leader, wait=False)
            leader, new_term = cluster.wait_leader(timeout=60)
            assert lost_term not in {t["term"] for t in cluster.terms()}  # it really was lost
            assert new_term not in old_terms and new_term > max(old_terms)
            assert new_term // TERMS_PER_TIMELINE == old_term // TERMS_PER_TIMELINE + 1
            after = _trigger(cluster.replicas[leader].url)
            wait_for(lambda: _succeeded(cluster.replicas[leader].url, after), 60, "a run after the failover")
            # Fenced writes, in commit order on the new primary, never go back to an older term,
            # and none of a term issued before the promotion commits after the new term began.
            wait_for(lambda: any(e["term"] == new_term for e in cluster.events(("probe_write",))), 30,
                     "the new term's writes")
            terms = [e["term"] for e in cluster.events(("probe_write",))]
            assert terms == sorted(terms)
            elected = next(e["id"] for e in cluster.events(("leader_elected",)) if e["term"] == new_term)
            assert all(e["term"] >= new_term for e in cluster.events(("probe_write",)) if e["id"] > elected)
            issued = [t["term"] for t in cluster.terms()]
            assert len(issued) == len(set(issued))
        finally:
            cluster.stop_all()
