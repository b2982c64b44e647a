"""The elector in-process (threads, real PostgreSQL): acquire, handover, keepalive, step-down."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from leoflow.db import migrations
from leoflow.election.elector import Elector
from leoflow.model.lock_key import pg_locks_ids
from leoflow.settings import Settings, load_settings
from tests.api.test_probes import declare_schema


class Recorder:
    """An ElectionListener that records transitions."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, str]] = []
        self.lock = threading.Lock()

    def acquired(self, term: int) -> None:
        with self.lock:
            self.events.append(("acquired", term, ""))

    def lost(self, term: int, kind: str, reason: str) -> None:
        with self.lock:
            self.events.append((kind, term, reason))

    def kinds(self) -> list[str]:
        with self.lock:
            return [e[0] for e in self.events]


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def node_settings(url: str, node: str, cluster: str = "default", **env: str) -> Settings:
    base = {"LEOFLOW_DATABASE_URL": url, "LEOFLOW_NODE_ID": node, "LEOFLOW_CLUSTER": cluster,
            "LEOFLOW_LOG_FORMAT": "text", "LEOFLOW_ELECTION_POLL_INTERVAL": "1",
            "LEOFLOW_KEEPALIVE_INTERVAL": "0.2", "LEOFLOW_LEADER_LEASE": "4"}
    base.update(env)
    return load_settings(base)


@pytest.fixture
def electors(database_url: str) -> Iterator[Callable[..., tuple[Elector, Recorder]]]:
    made: list[Elector] = []

    def make(node: str, cluster: str = "default", url: str | None = None) -> tuple[Elector, Recorder]:
        rec = Recorder()
        elector = Elector(node_settings(url or database_url, node, cluster), rec)
        elector.start()
        made.append(elector)
        return elector, rec

    yield make
    for e in made:
        e.release_and_join(5)


def holder_pid(url: str, cluster: str = "default") -> int | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pid FROM pg_locks WHERE locktype='advisory' AND classid=%s AND objid=%s"
                           " AND objsubid=2 AND granted", pg_locks_ids(cluster)).fetchone()
        return int(row[0]) if row else None


def test_one_leader_then_graceful_handover(database_url: str, electors: Any) -> None:
    a, ra = electors("a")
    wait_for(lambda: ra.kinds() == ["acquired"], what="a leads")
    _b, rb = electors("b")
    time.sleep(0.5)
    assert rb.kinds() == []
    started = time.monotonic()
    a.release_and_join(5)
    wait_for(lambda: rb.kinds() == ["acquired"], what="b leads")
    assert time.monotonic() - started < 5
    assert ra.kinds() == ["acquired", "released"]
    assert rb.events[0][1] > ra.events[0][1]
    with psycopg.connect(database_url, autocommit=True) as conn:
        kinds = [r[0] for r in conn.execute("SELECT kind FROM cluster_events ORDER BY id")]
        assert kinds == ["leader_elected", "leader_released", "leader_elected"]
        app = conn.execute("SELECT application_name FROM pg_stat_activity WHERE pid = %s",
                           (holder_pid(database_url),)).fetchone()
        assert app == ("leoflow-lock:b",)


def test_terminated_session_steps_down_and_reacquires_higher_term(database_url: str, electors: Any) -> None:
    _a, ra = electors("a")
    wait_for(lambda: ra.kinds() == ["acquired"], what="a leads")
    first = ra.events[0][1]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (holder_pid(database_url),))
    wait_for(lambda: ra.kinds()[:2] == ["acquired", "lost"], what="a steps down")
    wait_for(lambda: ra.kinds() == ["acquired", "lost", "acquired"], what="a re-acquires")
    assert ra.events[2][1] > first
    with psycopg.connect(database_url, autocommit=True) as conn:
        lost = wait_for(lambda: conn.execute("SELECT term, details FROM cluster_events WHERE kind='leader_lost'")
                        .fetchone(), what="leader_lost recorded")
        assert lost[0] == first and lost[1]["reason"]


def test_unlock_all_detected_by_ownership_keepalive(database_url: str, electors: Any) -> None:
    a, ra = electors("a")
    wait_for(lambda: ra.kinds() == ["acquired"], what="a leads")
    # Simulate a pooler swapping the backend / a stray pg_advisory_unlock_all: drop the lock
    # from under the session while the session itself stays healthy.
    a._conn._conn.execute("SELECT pg_advisory_unlock_all()")  # type: ignore[union-attr]  # the raw psycopg session
    wait_for(lambda: "lost" in ra.kinds(), what="a notices the lock is missing")
    assert "missing" in ra.events[1][2]


def test_a_second_cluster_is_refused_and_leads_in_a_schema_of_its_own(
        database_url: str, electors: Any, caplog: pytest.LogCaptureFixture) -> None:
    """ADR 0010 in-process: one cluster per database (or schema), names unique across schemas."""
    _a, ra = electors("a", "blue")
    wait_for(lambda: ra.kinds() == ["acquired"], what="blue leads")
    with caplog.at_level("ERROR", logger="leoflow.election.elector"):
        green, rg = electors("g", "green")
        problem = wait_for(lambda: green.health.problem, what="green refused")
        time.sleep(1.5)  # another poll interval: still refused, logged once, never contending
    assert "is 'green'" in problem and "belongs to cluster 'blue'" in problem and "csearch_path" in problem
    assert rg.kinds() == [] and holder_pid(database_url, "green") is None
    assert len([r for r in caplog.records if "refusing to elect" in r.getMessage()]) == 1
    # A schema of its own: migrated from empty by the same URL, green leads there.
    green_url = f"{database_url}?options=-csearch_path%3Dgreen"
    migrations.upgrade(green_url)
    _g2, rg2 = electors("g2", "green", green_url)
    wait_for(lambda: rg2.kinds() == ["acquired"], what="green leads in its schema")
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("SELECT cluster FROM green.installation").fetchone() == ("green",)
        assert conn.execute("SELECT cluster FROM public.installation").fetchone() == ("blue",)
        assert conn.execute("SELECT count(*) FROM green.cluster_leadership").fetchone() == (1,)
    # A third schema may not reuse a name (the lock and pod names are per name).
    teal_url = f"{database_url}?options=-csearch_path%3Dteal"
    migrations.upgrade(teal_url)
    teal, rt = electors("t", "blue", teal_url)
    problem = wait_for(lambda: teal.health.problem, what="a second 'blue' refused")
    assert "already used by the Leoflow cluster in schema 'public'" in problem
    assert rt.kinds() == [] and ra.kinds() == ["acquired"]


def test_a_build_the_schema_left_behind_never_leads(database_url: str, electors: Any) -> None:
    """ADR 0006: only code the schema declares compatible may lead — checked when a session opens,
    and again once the lock is granted (a follower that opened its session before the migration
    must not lead what a newer leader wrote after it: ADR 0013's queued tries without rows)."""
    head = migrations.head_revision()
    a, ra = electors("a")
    wait_for(lambda: ra.kinds() == ["acquired"], what="a leads")
    b, rb = electors("b")
    wait_for(lambda: b._blocking, what="b waits for the lock")
    declare_schema(database_url, "9999_future", ["0001"])  # a newer build migrated; this one is left out
    a.release_and_join(5)
    problem = wait_for(lambda: b.health.problem, what="b refused once granted the lock")
    assert "may not lead" in problem and "newer than this build's head" in problem
    time.sleep(1.5)  # another poll interval: refused at its new session too, never a term
    assert rb.kinds() == [] and holder_pid(database_url) is None
    declare_schema(database_url, "9999_future", [head])  # the newer revision declares this build compatible
    wait_for(lambda: rb.kinds() == ["acquired"], what="b leads once the schema declares it compatible")
    assert b.health.problem is None


def test_a_leader_a_migration_leaves_behind_releases_its_term(database_url: str, electors: Any) -> None:
    """A contract revision applied while an older build leads: it stops within a poll interval."""
    head = migrations.head_revision()
    a, ra = electors("a")
    wait_for(lambda: ra.kinds() == ["acquired"], what="a leads")
    declare_schema(database_url, "9999_future", ["0001"])
    wait_for(lambda: ra.kinds() == ["acquired", "released"], what="a releases its term")
    assert "may not lead" in ra.events[1][2]
    assert "newer than this build's head" in wait_for(lambda: a.health.problem, what="a refuses")
    time.sleep(1.5)  # another poll interval: still out
    assert ra.kinds() == ["acquired", "released"] and holder_pid(database_url) is None
    declare_schema(database_url, "9999_future", [head])
    wait_for(lambda: ra.kinds() == ["acquired", "released", "acquired"], what="a leads again")


def test_hot_standby_is_refused_with_one_clear_line(caplog: pytest.LogCaptureFixture) -> None:
    from tests.harness.replication import streaming_pair

    with streaming_pair() as pair:
        migrations.upgrade(pair.primary.url("leoflow"))
        pair.wait_caught_up()
        rec = Recorder()
        elector = Elector(node_settings(pair.standby.url("leoflow"), "s1"), rec)
        with caplog.at_level("ERROR", logger="leoflow.election.elector"):
            elector.start()
            wait_for(lambda: any("hot standby" in r.getMessage() for r in caplog.records), 30, "the refusal")
            time.sleep(1.5)  # another poll: still refused, logged once
            elector.release_and_join(5)
        lines = [r.getMessage() for r in caplog.records if "refusing" in r.getMessage()]
        assert len(lines) == 1 and "LEOFLOW_DATABASE_URL" in lines[0] and "primary" in lines[0]
        assert "target_session_attrs=read-write" in lines[0] and elector.health.problem == lines[0].split(": ", 1)[1]
        assert rec.kinds() == []


@pytest.mark.parametrize("lease", [1.0, 2.0, 2.5, 10.0, 37.0])
def test_server_notices_a_dead_client_no_earlier_than_twice_the_lease(lease: float) -> None:
    from leoflow.election.lock_setup import session_timeouts

    t = session_timeouts(lease)
    assert t.server_keepalive_idle + t.server_keepalive_interval * t.server_keepalive_count >= 2 * lease
    assert t.server_user_timeout_ms >= 2 * lease * 1000
    assert t.client_user_timeout_ms < lease * 1000  # the client notices a dead server within the lease


def test_keepalive_runs_while_the_caller_hogs_the_interpreter(database_url: str, electors: Any) -> None:
    """A long, CPU-bound scheduler tick (no awaits, no sleeps) must not starve the keepalive."""
    from prometheus_client import REGISTRY

    def keepalives() -> float:
        return REGISTRY.get_sample_value("leoflow_lock_keepalive_seconds_count") or 0.0

    _a, ra = electors("a")
    wait_for(lambda: ra.kinds() == ["acquired"], what="a leads")
    before = keepalives()
    deadline = time.monotonic() + 6.0  # 1.5 x the lease
    spins = 0
    while time.monotonic() < deadline:
        spins += 1
    assert keepalives() - before >= 5, "the keepalive did not run during the stall"
    assert ra.kinds() == ["acquired"]
    assert holder_pid(database_url) is not None
