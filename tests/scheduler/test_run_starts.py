"""Issue 21: starting runs reads what it may start, not the backlog of queued runs.

``startable_runs`` used to rank every queued run of every DAG on each call: 0.65 s a call with
100,000 runs waiting (a catch-up, a loop of triggers), on every tick that finished a run, so the
scheduler slowed for every DAG while one had a backlog. It now skips from DAG to DAG through
``ix_dag_runs_active`` (``dag_id, state, id``) and reads each one's running count and oldest
queued runs as index ranges. Two tests: what it returns is what ``max_active_runs`` allows, for
any stored value and any mix of runs (against a model in Python); and its work, counted on the
executed plan, does not grow with the backlog.
"""

from __future__ import annotations

import asyncio
import json
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.db.stores.runs import starts as run_starts
from leoflow.settings import Settings
from tests.scheduler.harness import apply
from tests.scheduler.stepper import container
from tests.scheduler.test_one_write import derandomized
from tests.scheduler.test_plan_work import explained, plan_work

DAGS = ("a", "b", "c")
RUN_STATES = ("queued", "running", "success", "failed", "cancelled")
DEFAULT_MAX_ACTIVE_RUNS = 16
INT_MAX = 2**31 - 1

#: What a version's spec may hold as ``max_active_runs``: what the API accepts, and what an older
#: release or a hand edit may have stored (None: the key is absent).
stored_limits = st.one_of(st.none(), st.integers(-3, 6), st.sampled_from(
    [10**30, -(10**30), 2.5, 0.4, "3", [], {}, True, json.loads("null")]))


def allowed(stored: Any) -> int:
    """How many runs of a DAG may be active, from its stored ``max_active_runs`` (the model)."""
    if isinstance(stored, bool) or not isinstance(stored, int | float):
        return DEFAULT_MAX_ACTIVE_RUNS
    clamped = min(max(Decimal(str(stored)), Decimal(0)), Decimal(INT_MAX))
    return int(clamped.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def expected(limits: dict[str, Any], runs: list[tuple[int, str, str]], limit: int) -> list[int]:
    """Each DAG's oldest queued runs, as many as its room; all of them oldest first, ``limit`` at most."""
    chosen: list[int] = []
    for dag_id, stored in limits.items():
        running = sum(1 for _, d, state in runs if d == dag_id and state == "running")
        queued = sorted(pk for pk, d, state in runs if d == dag_id and state == "queued")
        chosen += queued[:max(allowed(stored) - running, 0)]
    return sorted(chosen)[:limit]


def seed(url: str, limits: dict[str, Any], states: list[tuple[str, str]]) -> list[tuple[int, str, str]]:
    """The DAGs' current versions hold ``limits``; their runs are ``states`` (DAG, state), in order.

    Autovacuum is off for ``dag_runs`` meanwhile: an automatic ANALYZE in the middle of a seed of
    thousands of runs would turn a test's "fresh" statistics into analyzed ones at a random moment
    (seen once, under a parallel suite: a plan-work comparison failed)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE dag_runs SET (autovacuum_enabled = false)")
        conn.execute("DELETE FROM dag_runs")
        for dag_id, stored in limits.items():
            conn.execute("UPDATE dag_versions v SET spec = CASE WHEN %s::jsonb IS NULL THEN v.spec - 'max_active_runs' "
                         "ELSE jsonb_set(v.spec, '{max_active_runs}', %s::jsonb) END "
                         "FROM dags d WHERE d.dag_id = %s AND v.id = d.current_version_id",
                         (None if stored is None else json.dumps(stored),) * 2 + (dag_id,))
        runs = []
        for i, (dag_id, state) in enumerate(states):
            row = conn.execute("""
                INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state)
                SELECT %s, %s, current_version_id, 'manual', now(), %s FROM dags WHERE dag_id = %s
                RETURNING id""", (dag_id, f"r{i}", state, dag_id)).fetchone()
            assert row is not None
            runs.append((int(row[0]), dag_id, state))
        return runs


#: The two reads of startable runs: the walk by DAG, and the scheduler's, oldest queued runs first
#: with the walk as its fallback (issue 45); both must give the same runs.
READS = {"by_dag": run_store.startable_runs, "oldest_first": run_starts.startable_runs}


async def startable(settings: Settings, limit: int, plans: list[dict[str, Any]] | None = None,
                    read: str = "by_dag") -> list[int]:
    """What the scheduler's run start would take now (its statements' plans into ``plans``)."""
    engine = make_async_engine(settings.database, pool_size=1)
    if plans is not None:
        explained(engine, plans)
    try:
        async with engine.connect() as conn:
            return [r.run_pk for r in await READS[read](conn, limit)]
    finally:
        await engine.dispose()


async def applied(settings: Settings, dag_ids: tuple[str, ...]) -> None:
    engine = make_async_engine(settings.database, pool_size=1)
    try:
        for dag_id in dag_ids:
            await apply(engine, {"dag_id": dag_id, "tasks": [container("t")]})
    finally:
        await engine.dispose()


@pytest.mark.parametrize("read", sorted(READS))
@derandomized(60)
@given(limits=st.fixed_dictionaries({d: stored_limits for d in DAGS}),
       states=st.lists(st.tuples(st.sampled_from(DAGS), st.sampled_from(RUN_STATES)), max_size=40),
       limit=st.integers(1, 30))
def test_run_start_takes_what_max_active_runs_allows(settings: Settings, read: str, limits: dict[str, Any],
                                                     states: list[tuple[str, str]], limit: int) -> None:
    """Per DAG, its oldest queued runs, as many as its current version's limit leaves room for
    beside its running ones (16 for a stored value that is not a number, clamped to 0..2^31-1);
    all DAGs' together oldest first, at most ``limit``. Both reads: with at most 40 runs and a
    limit from 1, the oldest-first read's window (4 x the limit) is sometimes full of runs that
    cannot start and sometimes not, so its fallback is taken both ways."""
    with psycopg.connect(settings.database.url, autocommit=True) as conn:
        if conn.execute("SELECT count(*) FROM dags").fetchone() != (len(DAGS),):
            asyncio.run(applied(settings, DAGS))
    runs = seed(settings.database.url, limits, states)
    assert asyncio.run(startable(settings, limit, read=read)) == expected(limits, runs, limit)


@pytest.mark.parametrize("statistics", ["fresh", "analyzed"])
def test_run_start_reads_what_it_starts_not_the_backlog(settings: Settings, statistics: str) -> None:
    """Two DAGs, each with a history of 1,000 finished runs: ``full`` at its limit of 2 running
    with a backlog of queued runs, ``room`` with 1 running of 4 and 5 queued, created last.
    Growing the backlog from 10 to 3,000 may not change the work of the call (rows its plan
    nodes produced or filtered out) by more than a few rows; ranking every queued run, as the
    call did before, grew it by 25,000 to 36,000. Under a new table's statistics as after
    ANALYZE: the planner may not walk the primary key or the history instead."""
    asyncio.run(applied(settings, ("full", "room")))

    def work(backlog: int) -> float:
        seed(settings.database.url, {"full": 2, "room": 4},
             [("full", "success")] * 1000 + [("room", "failed")] * 1000
             + [("full", "running")] * 2 + [("room", "running")] + [("room", "queued")] * 5
             + [("full", "queued")] * backlog)
        if statistics == "analyzed":
            with psycopg.connect(settings.database.url, autocommit=True) as conn:
                conn.execute("ANALYZE dag_runs")
        plans: list[dict[str, Any]] = []
        started = asyncio.run(startable(settings, 2000, plans))
        assert len(started) == 3, started
        assert plans, "auto_explain sent no plan"
        return sum(plan_work(p) for p in plans)

    small, large = work(10), work(3000)
    assert large - small <= 50, f"plan work {small:.0f} with 10 queued runs, {large:.0f} with 3,000"


@pytest.mark.parametrize("statistics", ["fresh", "analyzed"])
def test_oldest_first_read_is_bounded_by_its_window_not_the_backlog(settings: Settings, statistics: str) -> None:
    """The scheduler's read (oldest queued runs first, issue 45) behind a backlog of one DAG at its
    limit: ``full`` (limit 2, 2 running) queues 1,000 or 10,000 runs before ``room`` queues 5.
    It still finds ``room``'s runs (the window of 4 x 20 oldest runs is all ``full``'s, so the walk
    by DAG answers), and its work may not grow with the backlog: at most the window's rows more
    than with no backlog at all; reading every queued run would add 9,000 rows or more."""
    asyncio.run(applied(settings, ("full", "room")))

    def work(backlog: int) -> float:
        seed(settings.database.url, {"full": 2, "room": 4},
             [("full", "success")] * 1000 + [("full", "running")] * 2 + [("full", "queued")] * backlog
             + [("room", "queued")] * 5)
        if statistics == "analyzed":
            with psycopg.connect(settings.database.url, autocommit=True) as conn:
                conn.execute("ANALYZE dag_runs")
        plans: list[dict[str, Any]] = []
        started = asyncio.run(startable(settings, 20, plans, read="oldest_first"))
        assert len(started) == 4, started  # room: 4 of its 5
        assert plans, "auto_explain sent no plan"
        return sum(plan_work(p) for p in plans)

    small, large = work(1000), work(10_000)
    assert large - small <= 50, f"plan work {small:.0f} behind 1,000 queued runs, {large:.0f} behind 10,000"


def test_oldest_first_read_reads_the_runs_it_starts(settings: Settings) -> None:
    """Many DAGs each with one queued run and room (a minute boundary): the oldest-first read's
    work follows the runs asked for, not the DAGs with a queued run; the walk by DAG visits every
    one of them (300 here: over 10 rows of plan work each; the read under 30 per run it returns,
    measured ~23, whatever the number of DAGs)."""
    dags = tuple(f"many-{i:03d}" for i in range(300))
    asyncio.run(applied(settings, dags))
    seed(settings.database.url, {}, [(d, "queued") for d in dags])
    # Statistics of these rows, not whatever an earlier test's rows left (autovacuum may have
    # analyzed the shared table at any point of them; analyzed empty, this read does ~41,000 rows).
    with psycopg.connect(settings.database.url, autocommit=True) as conn:
        conn.execute("ANALYZE dag_runs")
    works = {}
    for read in READS:
        plans: list[dict[str, Any]] = []
        started = asyncio.run(startable(settings, 20, plans, read=read))
        assert len(started) == 20
        works[read] = sum(plan_work(p) for p in plans)
    assert works["by_dag"] >= 10 * len(dags), works
    assert works["oldest_first"] < 30 * 20, works


def test_oldest_first_read_does_not_depend_on_statistics(settings: Settings) -> None:
    """A fresh install: ``dag_runs`` analyzed while empty, then 300 DAGs each queue a run (a minute
    boundary) before autovacuum looks again. The read's plan may not follow the stale statistics
    into a scan per probe: its work stays under 30 rows per run it returns, as with fresh ones
    (measured ~14; sequential scans of ``dag_runs`` in every probe, which such statistics
    make look cheapest, did ~47,000 rows here)."""
    dags = tuple(f"stale-{i:03d}" for i in range(300))
    asyncio.run(applied(settings, dags))
    with psycopg.connect(settings.database.url, autocommit=True) as conn:
        conn.execute("DELETE FROM dag_runs")
        conn.execute("ANALYZE dag_runs")
        conn.execute("ANALYZE dags")
        conn.execute("ANALYZE dag_versions")
    seed(settings.database.url, {}, [(d, "queued") for d in dags])
    plans: list[dict[str, Any]] = []
    started = asyncio.run(startable(settings, 20, plans, read="oldest_first"))
    assert len(started) == 20
    work = sum(plan_work(p) for p in plans)
    assert work < 30 * 20, f"plan work {work:.0f} for 20 runs under statistics of an empty table"
