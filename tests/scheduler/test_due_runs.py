"""Issue 45: every DAG due at one boundary gets its run in one statement, not two round trips each.

Before, a tick took 100 due DAGs and, for each, planned its cron, inserted its runs, advanced its
``next_run_at`` (two round trips) and logged a line: 1,000 DAGs due at one minute waited 10 s
for their runs. Now the due DAGs of a step are planned in one pass (each distinct schedule once)
and written with one statement, as many as their rows fit the step's row budget; the rest follow
in the next step at once. The statements and commits are counted as in ``test_round_trips``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.clock import FakeClock, SystemClock
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import dags as dag_store
from leoflow.errors import FencedOut
from leoflow.executor.memory import MemoryExecutor
from leoflow.model.spec import timetable
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.graph import GraphCache
from leoflow.scheduler import periodic
from leoflow.scheduler.core import SchedulerCore
from leoflow.settings import Settings
from tests.scheduler.harness import RunningScheduler, eventually, rows, running_scheduler, set_term
from tests.scheduler.test_round_trips import counted
from tests.scheduler.test_schedule import with_core

T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: Ten minutes and a few seconds after every DAG's start: without catchup, one run each (00:10).
NOW = T0 + timedelta(minutes=10, seconds=5)
SLOT = "scheduled__2026-01-01T00:10:00+00:00"
#: The fencing check, the scan of due DAGs, the one write of their runs and ``next_run_at``, and the
#: next due time (one probe of ix_dags_due: the loop sleeps until that boundary, not a whole interval).
CREATE_STATEMENTS = 4


def minutely(dag_id: str, **changes: Any) -> dict[str, Any]:
    return {"dag_id": dag_id, "schedule": "* * * * *", "start_date": T0.isoformat(), "catchup": False,
            "tasks": [{"id": "t", "kind": "empty"}], **changes}


async def apply_many(engine: AsyncEngine, docs: list[dict[str, Any]]) -> None:
    """Apply every DAG in one transaction (one at a time would be most of the test's time)."""
    async with engine.begin() as conn:
        for doc in docs:
            await dag_store.apply_dag(conn, parse_dag_spec(doc), clock=SystemClock())


async def scheduled(engine: AsyncEngine) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for dag_id, run_id in await rows(engine, "SELECT dag_id, run_id FROM dag_runs ORDER BY id"):
        found.setdefault(dag_id, []).append(run_id)
    return found


async def next_runs(engine: AsyncEngine) -> set[datetime]:
    return {r[0] for r in await rows(engine, "SELECT DISTINCT next_run_at FROM dags")}


def test_five_hundred_due_dags_get_their_runs_in_one_statement_and_one_log_line(
        settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """500 DAGs on ``* * * * *`` due at once: one transaction of four statements (as for 5 DAGs;
    it was 2 per DAG), the cron planned once for all (it was twice per DAG), and one info line."""
    clock = FakeClock(NOW)
    crons = {"made": 0}

    def counting(evaluate: Callable[..., datetime]) -> Callable[..., datetime]:
        def counted_evaluation(*args: Any, **kwargs: Any) -> datetime:
            crons["made"] += 1
            return evaluate(*args, **kwargs)
        return counted_evaluation

    # Every fire time the timetable computes is one croniter evaluation (leoflow.model.cron).
    monkeypatch.setattr(timetable, "next_fire", counting(timetable.next_fire))
    monkeypatch.setattr(timetable, "previous_fire", counting(timetable.previous_fire))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        sent: dict[int, list[str]] = {}
        for n, prefix in ((5, "few"), (500, "many")):
            await apply_many(engine, [minutely(f"{prefix}{i:03d}") for i in range(n)])
            crons["made"] = 0
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="leoflow.scheduler.periodic"), counted(engine) as trips:
                assert await core.create_scheduled_runs()
            assert trips.commits == 1, trips.statements
            sent[n] = list(trips.statements)
            assert crons["made"] <= 2, f"the cron of {n} DAGs sharing it was evaluated {crons['made']} times"
            lines = [r for r in caplog.records if r.name == "leoflow.scheduler.periodic"]
            assert [r.getMessage() for r in lines] == ["scheduled runs created"]
            assert (lines[0].__dict__["runs"], lines[0].__dict__["due"]) == (n, n)
        assert len(sent[500]) == len(sent[5]) <= CREATE_STATEMENTS, sent
        runs = await scheduled(engine)
        assert len(runs) == 505 and all(ids == [SLOT] for ids in runs.values())
        assert await next_runs(engine) == {T0 + timedelta(minutes=11)}
        assert not await core.create_scheduled_runs()  # nothing due until 00:11
        assert len(await scheduled(engine)) == 505

    with_core(settings, clock, body)


def test_a_step_takes_as_many_due_dags_as_their_rows_fit_the_row_budget(settings: Settings) -> None:
    """A budget of 22 rows: a catch-up DAG with 11 slots due (12 rows: its runs and its own row)
    and 5 one-run DAGs (2 rows each) fit the first step; the next steps take 11 DAGs each, at once
    (without waiting for the interval), until all 40 are done."""
    clock = FakeClock(NOW)

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply_many(engine, [minutely("a-catchup", catchup=True), *(minutely(f"b{i:02d}") for i in range(40))])
        core.periodic.row_budget = 22
        assert await core.create_scheduled_runs()
        runs = await scheduled(engine)
        assert len(runs["a-catchup"]) == 11 and sorted(runs) == ["a-catchup", *(f"b{i:02d}" for i in range(5))]
        assert core.periodic.more_due, "left over the budget: the next step must come at once"
        per_step: list[int] = []
        while await core.tick():
            per_step.append(len(await scheduled(engine)) - sum(per_step) - len(runs))
        created = await scheduled(engine)
        assert len(created) == 41 and all(len(ids) == 1 for d, ids in created.items() if d != "a-catchup")
        assert [n for n in per_step if n] == [11, 11, 11, 2], per_step
        assert not core.periodic.more_due

    with_core(settings, clock, body)


def test_a_dag_costlier_than_the_budget_still_gets_its_runs(settings: Settings) -> None:
    """Catch-up of 50 slots (51 rows) under a budget of 10: it goes through alone, as a report does."""
    clock = FakeClock(T0 + timedelta(hours=2))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply_many(engine, [minutely("big", catchup=True), minutely("small")])
        core.periodic.row_budget = 10
        await core.create_scheduled_runs()
        assert {d: len(ids) for d, ids in (await scheduled(engine)).items()} == {"big": 50}

    with_core(settings, clock, body)


def test_an_older_terms_batch_writes_nothing(settings: Settings) -> None:
    """200 due DAGs and a newer term: the step stops at its fencing check, before the scan; no
    run is created and no ``next_run_at`` moves."""
    clock = FakeClock(NOW)

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply_many(engine, [minutely(f"d{i:03d}") for i in range(200)])
        before = await next_runs(engine)
        await set_term(engine, settings.cluster.name, 2, node_id="newer")
        with counted(engine) as trips, pytest.raises(FencedOut):
            await core.create_scheduled_runs()
        assert len(trips.statements) == 1 and trips.commits == 0, trips.statements
        assert await scheduled(engine) == {}
        assert await next_runs(engine) == before == {T0}

    with_core(settings, clock, body)


def test_a_dag_paused_or_reapplied_since_the_scan_gets_nothing_in_that_step(settings: Settings) -> None:
    """The write's compare-and-set names the ``next_run_at`` and version the plan was made from:
    a DAG paused, re-applied with another version or deleted between the scan and the write gets
    no run from the stale plan, and keeps its row; the others get theirs."""
    clock = FakeClock(NOW)

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply_many(engine, [minutely(d) for d in ("kept", "paused", "reapplied", "deleted")])
        scan = core.periodic._due

        async def racing_scan(step: Any) -> Any:
            found = await scan(step)
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE dags SET paused = true WHERE dag_id = 'paused'"))
                await dag_store.apply_dag(conn, parse_dag_spec(minutely("reapplied", description="v2")),
                                          clock=SystemClock())
                await dag_store.delete_dag(conn, "deleted")
            return found

        core.periodic._due = racing_scan  # type: ignore[method-assign]
        await core.create_scheduled_runs()
        assert await scheduled(engine) == {"kept": [SLOT]}
        core.periodic._due = scan  # type: ignore[method-assign]
        await core.create_scheduled_runs()  # the re-applied DAG is planned from its new version
        assert await scheduled(engine) == {"kept": [SLOT], "reapplied": [SLOT]}

    with_core(settings, clock, body)


def one_task_spec(dag_id: str, tasks: int = 1) -> dict[str, Any]:
    return {"dag_id": dag_id, "tasks": [{"id": f"t{i}", "kind": "empty"} for i in range(tasks)]}


def test_the_graph_cache_keeps_a_thousand_small_versions_from_one_boundary_to_the_next() -> None:
    """Bounded by 256 versions, 1,000 DAGs due at each boundary were all compiled again at every
    boundary (2.5 s of the leader's CPU a minute). The cache is bounded by versions and by their
    tasks together: 1,000 one-task versions stay; large ones still go by the task bound."""
    cache = GraphCache()
    for vid in range(1000):
        cache.add(vid, one_task_spec(f"d{vid}"))
    assert all(vid in cache for vid in range(1000)) and cache.tasks == 2000

    small = GraphCache(size=10, tasks=100)
    for vid in range(4):  # 31 each (30 tasks and the version): the fourth passes 100
        small.add(vid, one_task_spec(f"d{vid}", tasks=30))
    assert [vid in small for vid in range(4)] == [False, True, True, True] and small.tasks == 93
    small.add(9, one_task_spec("huge", tasks=200))  # alone over the bound: kept, every other evicted
    assert len(small) == 1 and 9 in small and small.tasks == 201
    for vid in range(20, 40):
        small.add(vid, one_task_spec(f"d{vid}"))
    assert len(small) == 10 and small.tasks == 20


async def run_states(engine: AsyncEngine) -> dict[str, int]:
    return {state: int(n) for state, n in await rows(engine, "SELECT state, count(*) FROM dag_runs GROUP BY state")}


def test_every_due_run_is_queued_before_any_starts(settings: Settings) -> None:
    """40 DAGs due, 11 per step: the steps that leave DAGs due behind them only create; the runs
    start once all 40 are queued (creating is a few rows, starting the costly part). Without this,
    each step started what it had just created and the last DAGs waited to be queued at all."""
    clock = FakeClock(NOW)

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply_many(engine, [minutely(f"b{i:02d}") for i in range(40)])
        core.periodic.row_budget = 22
        seen: list[tuple[int, dict[str, int]]] = []
        while await core.tick():
            seen.append((len(await scheduled(engine)), await run_states(engine)))
        created = [n for n, _ in seen]
        assert created[:4] == [11, 22, 33, 40], seen
        for n, states in seen:
            if n < 40:
                assert set(states) == {"queued"}, f"a run started while DAGs were still due: {seen}"
        assert seen[-1][1] == {"success": 40}, seen

    with_core(settings, clock, body)


def test_a_long_creation_never_starves_the_starts(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most CREATE_FIRST_STEPS creating steps in a row: then a step starts runs though DAGs are still due."""
    monkeypatch.setattr(periodic, "CREATE_FIRST_STEPS", 2)
    clock = FakeClock(NOW)

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply_many(engine, [minutely(f"b{i:02d}") for i in range(40)])
        core.periodic.row_budget = 10  # 5 DAGs a step: 8 creating steps
        seen: list[tuple[int, dict[str, int]]] = []
        while await core.tick():
            seen.append((len(await scheduled(engine)), await run_states(engine)))
        started_while_due = [n for n, states in seen if n < 40 and set(states) != {"queued"}]
        assert started_while_due and started_while_due[0] == 15, seen
        assert seen[-1][1] == {"success": 40}, seen

    with_core(settings, clock, body)


def test_a_new_term_compiles_the_due_dags_before_their_boundary(settings: Settings) -> None:
    """The graphs of DAGs due within WARM_AHEAD are compiled beside the loop at the term's start, so
    the first boundary's steps find them cached; DAGs due later, paused or broken are not."""
    clock = FakeClock(NOW)
    tomorrow = (T0 + timedelta(days=1)).isoformat()

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply_many(engine, [*(minutely(f"soon{i:03d}") for i in range(250)),
                                  *(minutely(f"later{i}", start_date=tomorrow) for i in range(5))])
        versions = {dag_id: int(v) for dag_id, v in await rows(engine, "SELECT dag_id, current_version_id FROM dags")}
        assert not any(v in core.graphs.cache for v in versions.values())
        compiled = await core.graphs.warm(core.ctx.db, clock.now())
        assert compiled == 250  # in chunks of WARM_CHUNK, yielding between them
        assert all(versions[f"soon{i:03d}"] in core.graphs.cache for i in range(250))
        assert not any(versions[f"later{i}"] in core.graphs.cache for i in range(5))
        assert await core.graphs.warm(core.ctx.db, clock.now()) == 0  # cached already: nothing compiled twice

    with_core(settings, clock, body)


async def compiled_ahead(running: RunningScheduler, versions: list[int]) -> None:
    """Wait (10 s at most) until the running term's graph cache holds every one of ``versions``."""
    async def cached() -> int:
        core = running.service.core
        return 0 if core is None else sum(v in core.graphs.cache for v in versions)

    await eventually(cached, lambda n: n == len(versions), timeout=10)


def test_the_scheduler_warms_the_graphs_when_its_term_starts(settings: Settings) -> None:
    """Wired into the service: a term that starts five minutes before a boundary has the due DAGs'
    graphs compiled before that boundary, without a step having needed them."""
    clock = FakeClock(T0 + timedelta(minutes=5))  # every DAG's first slot is minutes away

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        try:
            start = (T0 + timedelta(minutes=8)).isoformat()
            await apply_many(engine, [minutely(f"soon{i:02d}", start_date=start) for i in range(20)])
            versions = [int(v) for (v,) in await rows(engine, "SELECT current_version_id FROM dags")]
            async with running_scheduler(settings, MemoryExecutor(), clock=clock, engine=engine) as running:
                await compiled_ahead(running, versions)
                assert await rows(engine, "SELECT count(*) FROM dag_runs") == [(0,)]  # none due yet
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_dags_applied_during_the_term_are_compiled_before_their_boundary(settings: Settings) -> None:
    """A sync minutes before midnight brings new versions: once their boundary is within reach,
    the warm task compiles them, not the boundary's steps."""
    clock = FakeClock(T0 + timedelta(minutes=5))

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        try:
            async with running_scheduler(settings, MemoryExecutor(), clock=clock, engine=engine) as running:
                start = (T0 + timedelta(minutes=8)).isoformat()
                await apply_many(engine, [minutely(f"late{i:02d}", start_date=start) for i in range(20)])
                versions = [int(v) for (v,) in await rows(engine, "SELECT current_version_id FROM dags")]
                running.service.poke()  # what the apply's NOTIFY does
                await compiled_ahead(running, versions)
                assert await rows(engine, "SELECT count(*) FROM dag_runs") == [(0,)]
        finally:
            await engine.dispose()

    asyncio.run(main())
