"""ADR 0012 for run starts: a backlog of queued runs is started by concurrent steps, split by run.

At a boundary where thousands of DAGs are due, every run is queued first and then started; the
leader's Python and one PostgreSQL backend take turns, one core. A split start reads the runs one
ordinary step would start, splits them by run and starts them in two steps side by side. What a
split could break, each held by a case below: a pool admitted twice (a part never picks tasks for
slots; one whole step picks after the parts), a run started twice or not at all, a failing part
taking the other down with it, a newer term, and the periodic parts (they still run, in their
own step, before the split).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from leoflow.clock import FakeClock
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.db.stores.runs.lifecycle import StartableRun
from leoflow.errors import FencedOut
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.graph import DagGraph
from leoflow.scheduler import shards
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, set_term, trigger
from tests.scheduler.stepper import Stepper, container, stepper
from tests.scheduler.test_due_runs import NOW, apply_many, minutely


def splits_counted(st: Stepper, split: str = "_split_starts") -> Counter[str]:
    """Split every start backlog (or, with ``split="_split_creation"``, every creation) of two
    runs or DAGs or more; counts the splits of that kind that went ahead."""
    st.core.shard_min = 1
    seen: Counter[str] = Counter()
    original = getattr(st.core, split)

    async def counted() -> bool | None:
        result = await original()
        if result is not None:
            seen["splits"] += 1
        return result

    setattr(st.core, split, counted)
    return seen


async def run_states(st: Stepper, dag_id: str) -> Counter[str]:
    found = await rows(st.engine, "SELECT state FROM dag_runs WHERE dag_id = :d", d=dag_id)
    return Counter(state for (state,) in found)


async def queued_or_running(st: Stepper, pool: str) -> int:
    [(n,)] = await rows(st.engine, "SELECT count(*) FROM task_instances WHERE pool = :p "
                        "AND state IN ('queued', 'running')", p=pool)
    return int(n)


def test_the_split_is_by_run_balanced_by_tasks_oldest_first_in_each_part() -> None:
    wide = DagGraph(1, parse_dag_spec({"dag_id": "wide", "tasks": [
        {"id": "start", "kind": "empty"}, *(container(f"c{i}", "start") for i in range(4))]}))
    one = DagGraph(2, parse_dag_spec({"dag_id": "one", "tasks": [{"id": "t", "kind": "empty"}]}))
    runs = [StartableRun(10, 1), StartableRun(11, 2), StartableRun(12, 2), StartableRun(13, 2),
            StartableRun(14, 99)]  # 99: a version that does not compile (its run fails instead)
    parts = shards.split_starts(runs, {1: wide, 2: one}, 2)
    assert [[r.run_pk for r in p] for p in parts] == [[10], [11, 12, 13, 14]]  # 5 tasks against 1+1+1+1
    assert shards.split_starts(runs[:1], {1: wide}, 2) == [[runs[0]]]  # one run: one part (no split)
    assert shards.picks_slots(wide) and not shards.picks_slots(one)


def test_a_backlog_of_empty_runs_is_started_and_ended_by_two_parts(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, batch_size=2) as st:
            seen = splits_counted(st)
            await apply(st.engine, {"dag_id": "quick", "tasks": [{"id": "t", "kind": "empty"}]})
            for _ in range(12):
                await trigger(st.engine, "quick")
            st.core.periodic.more_to_start = True  # a backlog, as after a boundary's creating steps
            await st.tick()
            # One tick reads what one step would start (2 x START_ROUNDS = 10), in two parts of 5.
            assert seen["splits"] == 1 and await run_states(st, "quick") == {"success": 10, "queued": 2}
            await st.settle()
            assert await run_states(st, "quick") == {"success": 12}
            assert await rows(st.engine, "SELECT count(*), count(DISTINCT run_pk) FROM task_instances") == [(12, 12)]

    asyncio.run(main())


def test_two_start_parts_cannot_admit_a_pool_twice(settings: Settings) -> None:
    """Eight runs of one task in a 3-slot pool. Each part would see the pool's free slots (the
    other's queueing is not in its snapshot): a part that picked would queue beside the other.
    The parts only start and classify; the step after them picks, and the pool holds 3."""
    async def main() -> None:
        async with stepper(settings, batch_size=2) as st:
            seen = splits_counted(st)
            await st.sql("INSERT INTO pools (name, slots) VALUES ('gpu', 3)")
            await apply(st.engine, {"dag_id": "pooled", "tasks": [container("work", pool="gpu")]})
            for _ in range(8):
                await trigger(st.engine, "pooled")
            await st.tick(periodic=True)  # an ordinary step starts 2 runs and queues their 2 tasks
            assert await queued_or_running(st, "gpu") == 2 and st.core.periodic.more_to_start
            await st.tick()
            assert seen["splits"] == 1
            assert await run_states(st, "pooled") == {"running": 8}
            assert await queued_or_running(st, "gpu") == 3  # not 4: one part's pick, not two
            assert len(st.executor.launched) == 3

    asyncio.run(main())


def test_what_two_parts_successes_release_cannot_overfill_a_pool(settings: Settings) -> None:
    """Each run: an ``empty`` start, then a task in a 3-slot pool that the start's success makes
    ready. Neither part queues it (a part picks nothing, and no write of a part queues on a
    count): the step after the parts does, and the pool holds 3, not 3 from each part."""
    async def main() -> None:
        async with stepper(settings, batch_size=4) as st:
            seen = splits_counted(st)
            await st.sql("INSERT INTO pools (name, slots) VALUES ('gpu', 3)")
            await apply(st.engine, {"dag_id": "gated", "tasks": [
                {"id": "start", "kind": "empty"}, container("work", "start", pool="gpu")]})
            for _ in range(8):
                await trigger(st.engine, "gated")
            st.core.periodic.more_to_start = True
            await st.tick()
            assert seen["splits"] == 1
            assert await run_states(st, "gated") == {"running": 8}
            assert await queued_or_running(st, "gpu") == 3
            assert len(st.executor.launched) == 3

    asyncio.run(main())


def test_the_periodic_parts_still_run_before_a_split_start(settings: Settings) -> None:
    """A periodic tick with a backlog: its parts (here: a DAG falling due) run in their own step,
    and the split starts the backlog after them — the due DAG's new run among them."""
    async def main() -> None:
        async with stepper(settings, batch_size=2) as st:
            seen = splits_counted(st)
            await apply(st.engine, {"dag_id": "quick", "tasks": [{"id": "t", "kind": "empty"}]})
            for _ in range(4):
                await trigger(st.engine, "quick")
            await apply(st.engine, {"dag_id": "hourly", "schedule": "@hourly", "catchup": False,
                                    "start_date": "2020-01-01T00:00:00+00:00", "tasks": [{"id": "t", "kind": "empty"}]})
            st.core.periodic.more_to_start = True
            await st.tick(periodic=True)
            assert seen["splits"] == 1
            assert await run_states(st, "hourly") == {"success": 1}
            assert await run_states(st, "quick") == {"success": 4}

    asyncio.run(main())


def test_a_failing_start_part_is_isolated_and_the_other_part_commits(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting one run raises (a bug, a row the database refuses): its part fails; the other
    part's runs start; the failing part's runs are started again one by one and only the culprit
    fails, with the reason."""
    async def main() -> None:
        async with stepper(settings, batch_size=2) as st:
            seen = splits_counted(st)
            await apply(st.engine, {"dag_id": "quick", "tasks": [{"id": "t", "kind": "empty"}]})
            runs = [await trigger(st.engine, "quick") for _ in range(6)]
            [(poisoned,)] = await rows(st.engine, "SELECT id FROM dag_runs WHERE run_id = :r", r=runs[3])
            real = run_store.start_runs

            async def refusing(conn: Any, run_pks: Any, *args: Any, **kwargs: Any) -> Any:
                if poisoned in run_pks:
                    raise ValueError("this run cannot start")
                return await real(conn, run_pks, *args, **kwargs)

            monkeypatch.setattr(run_store, "start_runs", refusing)
            st.core.periodic.more_to_start = True
            await st.tick()
            assert seen["splits"] == 1
            await st.settle()
            states = dict(await rows(st.engine, "SELECT run_id, state FROM dag_runs"))
            assert states == {**{r: "success" for r in runs}, runs[3]: "failed"}
            [(reason,)] = await rows(st.engine, "SELECT reason FROM dag_runs WHERE id = :i", i=poisoned)
            assert reason is not None and "this run cannot start" in reason

    asyncio.run(main())


def test_a_newer_term_fails_every_start_part_and_starts_nothing(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, batch_size=2) as st:
            splits_counted(st)
            await apply(st.engine, {"dag_id": "quick", "tasks": [{"id": "t", "kind": "empty"}]})
            for _ in range(6):
                await trigger(st.engine, "quick")
            st.core.periodic.more_to_start = True
            await set_term(st.engine, settings.cluster.name, 2)
            with pytest.raises(FencedOut):
                await st.tick()
            assert await run_states(st, "quick") == {"queued": 6}

    asyncio.run(main())


# --------------------------------------------------------------------------- split creation

async def states_by_dag(st: Stepper) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for dag_id, state in await rows(st.engine, "SELECT dag_id, state FROM dag_runs ORDER BY id"):
        found.setdefault(dag_id, []).append(state)
    return found


def test_many_due_dags_are_queued_by_two_parts_first_then_started(settings: Settings) -> None:
    """40 DAGs due, 5 a step: after the first step finds more due, each tick reads two steps' worth
    and writes them in two parts. Every DAG gets its one run; none starts while DAGs are still
    due; then all start (split as well) and succeed."""
    async def main() -> None:
        async with stepper(settings, clock=FakeClock(NOW)) as st:
            seen = splits_counted(st, "_split_creation")
            await apply_many(st.engine, [minutely(f"b{i:02d}") for i in range(40)])
            st.core.periodic.row_budget = 10
            created: list[int] = []
            while await st.tick(periodic=not created):
                by_dag = await states_by_dag(st)
                created.append(sum(len(v) for v in by_dag.values()))
                if created[-1] < 40:
                    assert {s for v in by_dag.values() for s in v} == {"queued"}, by_dag
            assert created[:5] == [5, 15, 25, 35, 40], created
            assert seen["splits"] == 4
            by_dag = await states_by_dag(st)
            assert by_dag == {f"b{i:02d}": ["success"] for i in range(40)}

    asyncio.run(main())


def test_a_failing_creation_part_is_isolated_and_the_other_part_commits(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing one DAG's run raises: its part fails, the other part's DAGs get their runs; the due
    DAGs are then created entity by entity and only the culprit's schedule is stopped."""
    async def main() -> None:
        async with stepper(settings, clock=FakeClock(NOW)) as st:
            seen = splits_counted(st, "_split_creation")
            await apply_many(st.engine, [minutely(f"b{i:02d}") for i in range(12)])
            st.core.periodic.row_budget = 4
            real = run_store.create_due_runs

            async def refusing(conn: Any, plans: Any, *args: Any, **kwargs: Any) -> Any:
                if any(p.dag_id == "b05" for p in plans):
                    raise ValueError("this DAG's run cannot be written")
                return await real(conn, plans, *args, **kwargs)

            monkeypatch.setattr(run_store, "create_due_runs", refusing)
            await st.tick(periodic=True)  # 2 created by an ordinary step: more are due
            await st.tick(periodic=True)  # b02..b05 read; b05's part fails
            assert seen["splits"] == 1
            await st.settle()
            by_dag = await states_by_dag(st)
            assert set(by_dag) == {f"b{i:02d}" for i in range(12)} - {"b05"}
            [(error,)] = await rows(st.engine, "SELECT schedule_error FROM dags WHERE dag_id = 'b05'")
            assert error is not None and "cannot be written" in error

    asyncio.run(main())


def test_a_newer_term_fails_every_creation_part_and_creates_nothing(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, clock=FakeClock(NOW)) as st:
            seen = splits_counted(st, "_split_creation")
            await apply_many(st.engine, [minutely(f"b{i:02d}") for i in range(12)])
            st.core.periodic.row_budget = 4
            await st.tick(periodic=True)
            before = await rows(st.engine, "SELECT count(*) FROM dag_runs")
            await set_term(st.engine, settings.cluster.name, 2)
            with pytest.raises(FencedOut):
                await st.tick(periodic=True)
            assert seen["splits"] == 0  # the read itself is fenced out
            assert await rows(st.engine, "SELECT count(*) FROM dag_runs") == before

    asyncio.run(main())
