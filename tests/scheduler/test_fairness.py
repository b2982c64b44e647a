"""Issue 19, fairness: pools, priority (higher first, ties oldest first) and ``max_active_tasks``.

The scheduler is driven one tick at a time (:mod:`tests.scheduler.stepper`); the test plays the
executor, so "queued in the round its slot freed" is read straight from the database after the
tick, never from a clock. The starvation test is the issue's acceptance point: a DAG catching up
with 10,000 ready task instances does not delay a high-priority DAG's tasks by more than one
scheduling round, while a task of the same age without priority is still waiting behind it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import T0, Stepper, container, stepper


def launched_since(st: Stepper, mark: int) -> set[str]:
    return {f"{k.key.dag_id}/{k.key.task_id}" for k in st.executor.launched[mark:]}


def finish_all(st: Stepper, mark: int) -> int:
    """Report every try launched since ``mark`` as succeeded; returns the new mark."""
    for launch in st.executor.launched[mark:]:
        st.report(launch.key, "running")
        st.report(launch.key, "success", exit_code=0)
    return len(st.executor.launched)


async def active(st: Stepper, dag_id: str) -> int:
    [(n,)] = await rows(st.engine, "SELECT count(*) FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk "
                        "WHERE r.dag_id = :d AND ti.state IN ('queued', 'running')", d=dag_id)
    return int(n)


def test_a_pool_runs_higher_priority_first_and_ties_oldest_first(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, parallelism=2) as st:
            tasks = [container("a"), container("b", priority=5), container("c"), container("d", priority=9),
                     container("e", priority=5)]
            await apply(st.engine, {"dag_id": "mix", "tasks": tasks})
            await trigger(st.engine, "mix")
            await st.tick(periodic=True)
            assert launched_since(st, 0) == {"mix/d", "mix/b"}
            mark = finish_all(st, 0)
            await st.tick()
            assert launched_since(st, mark) == {"mix/e", "mix/a"}  # e (5) before the 0s; a older than c
            mark = finish_all(st, mark)
            await st.tick()
            assert launched_since(st, mark) == {"mix/c"}

    asyncio.run(main())


def test_ties_across_dags_go_to_the_oldest_run(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, parallelism=1) as st:
            await apply(st.engine, {"dag_id": "old", "tasks": [container("t")]})
            await apply(st.engine, {"dag_id": "new", "tasks": [container("t")]})
            await apply(st.engine, {"dag_id": "hog", "tasks": [container("t")]})
            await trigger(st.engine, "hog")
            await st.tick(periodic=True)  # hog takes the only slot
            await trigger(st.engine, "old")
            await st.tick(periodic=True)
            await trigger(st.engine, "new")
            await st.tick(periodic=True)
            assert launched_since(st, 0) == {"hog/t"}
            mark = finish_all(st, 0)
            await st.tick()
            assert launched_since(st, mark) == {"old/t"}

    asyncio.run(main())


def test_named_pools_bound_their_tasks_apart_from_the_default_pool(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, parallelism=2) as st:
            await st.sql("INSERT INTO pools (name, slots) VALUES ('gpu', 1)")
            tasks = [container(f"g{i}", pool="gpu") for i in range(3)] + [container(f"d{i}") for i in range(3)]
            await apply(st.engine, {"dag_id": "pooled", "tasks": tasks})
            await trigger(st.engine, "pooled")
            await st.tick(periodic=True)
            # One gpu slot, and the two default slots are not spent on gpu tasks.
            assert launched_since(st, 0) == {"pooled/g0", "pooled/d0", "pooled/d1"}

            await st.sql("UPDATE pools SET slots = 2 WHERE name = 'gpu'")  # resize (the API pokes the leader)
            await st.tick(periodic=True)
            assert launched_since(st, 3) == {"pooled/g1"}

            await st.sql("UPDATE pools SET slots = 0 WHERE name = 'gpu'")  # holds the pool's tasks back
            mark = finish_all(st, 0)
            await st.tick(periodic=True)
            assert launched_since(st, mark) == {"pooled/d2"}
            [(state,)] = await rows(st.engine, "SELECT state FROM task_instances WHERE task_id = 'g2'")
            assert state == "pending"

            # A task naming a pool that does not exist waits (it is not failed) until the pool exists.
            await apply(st.engine, {"dag_id": "early", "tasks": [container("x", pool="later")]})
            run_id = await trigger(st.engine, "early")
            mark = len(st.executor.launched)
            await st.tick(periodic=True)
            await st.tick(periodic=True)
            assert launched_since(st, mark) == set()
            assert (await st.tasks(run_id))["x"][0] == "pending"
            await st.sql("INSERT INTO pools (name, slots) VALUES ('later', 1)")
            await st.tick(periodic=True)
            assert launched_since(st, mark) == {"early/x"}

    asyncio.run(main())


def test_empty_tasks_take_no_slot(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, parallelism=1) as st:
            await apply(st.engine, {"dag_id": "hog", "tasks": [container("t")]})
            await trigger(st.engine, "hog")
            await st.tick(periodic=True)
            await apply(st.engine, {"dag_id": "gate", "tasks": [{"id": "start", "kind": "empty"},
                                                                 {"id": "end", "kind": "empty",
                                                                  "depends_on": ["start"]}]})
            run_id = await trigger(st.engine, "gate")
            await st.tick(periodic=True)
            assert await st.run(run_id) == ("success", None)  # the full pool did not hold it back

    asyncio.run(main())


def test_max_active_tasks_bounds_a_dag_across_its_runs_and_never_holds_a_slot(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, parallelism=4) as st:
            await apply(st.engine, {"dag_id": "capped", "max_active_tasks": 2,
                                    "tasks": [container(f"c{i}", priority=10) for i in range(5)]})
            await apply(st.engine, {"dag_id": "free", "tasks": [container(f"f{i}") for i in range(5)]})
            for _ in range(2):
                await trigger(st.engine, "capped")
            await trigger(st.engine, "free")
            await st.tick(periodic=True)
            # capped's ten tasks outrank free's, but only two may run; free fills the other slots.
            assert (await active(st, "capped"), await active(st, "free")) == (2, 2)
            mark = 0
            for _ in range(6):
                mark = finish_all(st, mark)
                await st.tick()
                assert await active(st, "capped") <= 2
                assert await active(st, "capped") + await active(st, "free") <= 4
            [(done,)] = await rows(st.engine, "SELECT count(*) FROM task_instances ti JOIN dag_runs r "
                                   "ON r.id = ti.run_pk WHERE r.dag_id = 'capped' AND ti.state = 'success'")
            assert done == 10  # two per round: every round used the limit fully

            # Raising the limit (a new version) applies to the runs already running.
            await apply(st.engine, {"dag_id": "capped", "max_active_tasks": 3,
                                    "tasks": [container(f"c{i}", priority=10) for i in range(5)]})
            await trigger(st.engine, "capped")
            await st.tick(periodic=True)
            assert await active(st, "capped") == 3

    asyncio.run(main())


def test_rows_without_a_pool_get_theirs_from_the_spec(settings: Settings) -> None:
    """Task instances the previous release wrote have no pool: the scheduler classifies them."""
    async def main() -> None:
        async with stepper(settings, parallelism=4) as st:
            await st.sql("INSERT INTO pools (name, slots) VALUES ('gpu', 1)")
            await apply(st.engine, {"dag_id": "legacy", "tasks": [container("a", pool="gpu", priority=3),
                                                                   container("b", pool="gpu")]})
            [(vid,)] = await rows(st.engine, "SELECT current_version_id FROM dags WHERE dag_id = 'legacy'")
            await st.sql("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, started_at) "
                         "VALUES ('legacy', 'old', :v, 'manual', 'running', now())", v=vid)
            await st.sql("INSERT INTO task_instances (run_pk, task_id, state, max_tries) "
                         "SELECT id, t, 'pending', 1 FROM dag_runs, unnest(ARRAY['b', 'a']) t WHERE run_id = 'old'")
            await st.tick(periodic=True)
            found = dict((t, (p, prio)) for t, p, prio in await rows(
                st.engine, "SELECT task_id, pool, priority FROM task_instances"))
            assert found == {"a": ("gpu", 3), "b": ("gpu", 0)}
            assert launched_since(st, 0) == {"legacy/a"}  # one gpu slot: the higher priority

    asyncio.run(main())



@pytest.mark.parametrize("queued_by", ["round", "one write"])
def test_a_running_row_without_a_pool_holds_a_default_slot(settings: Settings, queued_by: str) -> None:
    """A task instance an older release left running has no pool, and holds a slot of the default
    pool: in the round's count of a pool's slots, and in the one write's (each counts the pool's
    range of the slot index and the range without a pool apart)."""
    async def main() -> None:
        async with stepper(settings, parallelism=2) as st:
            await apply(st.engine, {"dag_id": "legacy", "tasks": [container("a")]})
            [(vid,)] = await rows(st.engine, "SELECT current_version_id FROM dags WHERE dag_id = 'legacy'")
            await st.sql("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, started_at) "
                         "VALUES ('legacy', 'old', :v, 'manual', 'running', now())", v=vid)
            await st.sql("INSERT INTO task_instances (run_pk, task_id, state, try_number, max_tries) "
                         "SELECT id, 'a', 'running', 1, 1 FROM dag_runs WHERE run_id = 'old'")
            if queued_by == "round":  # two roots, ready when the run starts
                await apply(st.engine, {"dag_id": "two", "tasks": [container("x"), container("y")]})
                await trigger(st.engine, "two")
                await st.tick(periodic=True)
            else:  # two children of a root, ready in the write that counts its success
                await apply(st.engine, {"dag_id": "two", "tasks": [container("root"), container("x", "root"),
                                                                  container("y", "root")]})
                run = await trigger(st.engine, "two")
                await st.tick(periodic=True)
                st.finish("two", run, "root")
                await st.tick()
            children = [launch.key.task_id for launch in st.executor.launched if launch.key.task_id in ("x", "y")]
            assert len(children) == 1, f"two slots, one held by the row without a pool; launched {children}"

    asyncio.run(main())

# --------------------------------------------------------------------------- starvation

CATCH_UP_RUNS, CATCH_UP_TASKS = 100, 100


def catch_up_dag() -> dict[str, Any]:
    return {"dag_id": "catch-up", "schedule": "@hourly", "catchup": True, "max_active_runs": CATCH_UP_RUNS,
            "start_date": (T0 - timedelta(hours=CATCH_UP_RUNS)).isoformat(),
            "tasks": [container(f"t{i:03}") for i in range(CATCH_UP_TASKS)]}


def chain(dag_id: str, **extra: Any) -> dict[str, Any]:
    return {"dag_id": dag_id, "tasks": [container("first", **extra), container("second", "first", **extra),
                                        container("third", "second", **extra)]}


async def ready_and_queued(st: Stepper, dag_id: str) -> dict[str, tuple[bool, bool]]:
    found = await rows(st.engine, """
        SELECT ti.task_id, ti.state = 'pending' AND ti.pending_upstreams = 0, ti.state <> 'pending'
        FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk WHERE r.dag_id = :d""", d=dag_id)
    return {t: (bool(ready), bool(queued)) for t, ready, queued in found}


def test_a_10000_task_catch_up_does_not_delay_a_high_priority_dag_by_more_than_one_round(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, parallelism=8) as st:
            await apply(st.engine, catch_up_dag(), st.clock)
            await st.sql("INSERT INTO pools (name, slots) VALUES ('urgent', 1)")
            for spec in (chain("urgent", priority=10), chain("plain"), chain("own-pool", pool="urgent")):
                await apply(st.engine, spec, st.clock)
            for _ in range(10):  # create and start the catch-up runs (50 per tick)
                await st.tick(periodic=True)
            [(backlog,)] = await rows(st.engine, "SELECT count(*) FROM task_instances WHERE state = 'pending'")
            assert backlog >= CATCH_UP_RUNS * CATCH_UP_TASKS - 8, backlog
            assert await active(st, "catch-up") == 8  # the default pool is full

            for dag_id in ("urgent", "plain", "own-pool"):
                await trigger(st.engine, dag_id, clock=st.clock)
            ready_at: dict[str, int] = {}
            queued_at: dict[str, int] = {}
            mark = 0
            for n in range(12):
                if n == 0:
                    await st.tick(periodic=True)  # the trigger's NOTIFY: the runs start, no slot is free
                else:
                    mark = finish_all(st, mark)  # every try launched so far ends: slots free up
                    await st.tick()
                for dag_id in ("urgent", "plain", "own-pool"):
                    for task_id, (ready, queued) in (await ready_and_queued(st, dag_id)).items():
                        if ready or queued:
                            ready_at.setdefault(f"{dag_id}/{task_id}", n)
                        if queued:
                            queued_at.setdefault(f"{dag_id}/{task_id}", n)
            for task_id in ("first", "second", "third"):
                key = f"urgent/{task_id}"
                assert key in queued_at and queued_at[key] - ready_at[key] <= 1, (key, ready_at, queued_at)
                # A pool of its own needs no priority: its slot is free at once.
                key = f"own-pool/{task_id}"
                assert key in queued_at and queued_at[key] == ready_at[key], (key, ready_at, queued_at)
            urgent_run = (await rows(st.engine, "SELECT state FROM dag_runs WHERE dag_id = 'urgent'"))[0][0]
            assert urgent_run == "success"
            # The control: the same chain without priority still waits behind the backlog.
            assert "plain/first" not in queued_at, queued_at
            [(left,)] = await rows(st.engine, "SELECT count(*) FROM task_instances WHERE state = 'pending'")
            assert left >= CATCH_UP_RUNS * CATCH_UP_TASKS - 12 * 8, left

    asyncio.run(main())
