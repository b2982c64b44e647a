"""The scheduling loop on real PostgreSQL with the in-memory executor (fast, deterministic)."""

from __future__ import annotations

import asyncio
from typing import Any

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.executor.memory import MemoryExecutor, Outcome
from leoflow.model.tries import TaskLaunch
from leoflow.settings import Settings
from tests.scheduler.harness import (
    apply,
    eventually,
    fast,
    in_conn,
    rows,
    run_state,
    running_scheduler,
    task_states,
    trigger,
)


def container(task_id: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["sh", "-c", f"echo {task_id}"],
            "depends_on": list(deps), **extra}


def test_diamond_with_empty_join_succeeds_and_trigger_wakes_leader_at_once(settings: Settings) -> None:
    settings = fast(settings, interval=30.0)  # only NOTIFY and reports can wake it quickly

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = MemoryExecutor()
        try:
            await apply(engine, {"dag_id": "diamond", "tasks": [
                container("a"), container("b", "a"), container("c", "a"),
                {"id": "join", "kind": "empty", "depends_on": ["b", "c"]}, container("d", "join")]})
            async with running_scheduler(settings, executor, engine=engine):
                await asyncio.sleep(0.5)  # the loop is now idle, waiting on the 30 s interval
                run_id = await trigger(engine, "diamond")
                await eventually(lambda: run_state(engine, run_id), lambda s: s == "success", timeout=10)
            states = await task_states(engine, run_id)
            assert states == {"a": "success", "b": "success", "c": "success", "join": "success", "d": "success"}
            # The empty task never reached the executor; every container task was launched once.
            launched = sorted(k.task_id for k in executor.world.tries)
            assert launched == ["a", "b", "c", "d"] and executor.world.duplicate_submits == 0
            order = dict(await rows(engine, "SELECT ti.task_id, ti.queued_at FROM task_instances ti"))
            ended = dict(await rows(engine, "SELECT ti.task_id, ti.ended_at FROM task_instances ti"))
            assert ended["a"] <= order["b"] and ended["a"] <= order["c"]
            assert max(ended["b"], ended["c"]) <= order["join"] <= ended["join"] <= order["d"]
            tries = await rows(engine, "SELECT state, executor_ref IS NOT NULL, started_at IS NOT NULL, "
                               "ended_at IS NOT NULL FROM task_tries")
            assert tries == [("success", True, True, True)] * 4
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_failure_retries_then_fails_run_and_marks_downstream(settings: Settings) -> None:
    settings = fast(settings)

    def outcome(launch: TaskLaunch) -> Outcome:
        return ("failed", 3, "boom") if launch.key.task_id == "bad" else ("success", 0, None)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = MemoryExecutor(outcome=outcome)
        try:
            await apply(engine, {"dag_id": "fails", "tasks": [
                container("bad", retries=2, retry_delay_seconds=0.1), container("good"),
                container("after", "bad", "good"), container("last", "after")]})
            async with running_scheduler(settings, executor, engine=engine):
                run_id = await trigger(engine, "fails")
                await eventually(lambda: run_state(engine, run_id), lambda s: s == "failed", timeout=20)
            assert await task_states(engine, run_id) == {
                "bad": "failed", "good": "success", "after": "upstream_failed", "last": "upstream_failed"}
            tries = await rows(engine, "SELECT tt.try_number, tt.state, tt.exit_code, tt.reason FROM task_tries tt "
                               "JOIN task_instances ti ON ti.id = tt.task_instance_id WHERE ti.task_id = 'bad' "
                               "ORDER BY tt.try_number")
            assert tries == [(1, "failed", 3, "boom"), (2, "failed", 3, "boom"), (3, "failed", 3, "boom")]
            ends = [r[0] for r in await rows(engine, "SELECT tt.queued_at FROM task_tries tt JOIN task_instances ti "
                                             "ON ti.id = tt.task_instance_id WHERE ti.task_id = 'bad' "
                                             "ORDER BY tt.try_number")]
            # Exponential delay: 0.1 s before try 2, 0.2 s before try 3 (lower bounds only).
            assert (ends[1] - ends[0]).total_seconds() >= 0.1
            assert (ends[2] - ends[1]).total_seconds() >= 0.2
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_cancel_run_makes_the_leader_cancel_running_tries(settings: Settings) -> None:
    settings = fast(settings)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = MemoryExecutor(mode="manual")
        try:
            await apply(engine, {"dag_id": "slow", "tasks": [container("a"), container("b", "a")]})
            async with running_scheduler(settings, executor, engine=engine):
                run_id = await trigger(engine, "slow")
                await eventually(lambda: asyncio.sleep(0, executor.running()), lambda r: len(r) == 1)
                await in_conn(engine, lambda c: run_store.cancel_run(c, "slow", run_id))
                await eventually(lambda: asyncio.sleep(0, executor.world.cancelled), lambda c: len(c) == 1)
                await eventually(lambda: rows(engine, "SELECT state FROM task_tries"),
                                 lambda r: r in ([("cancelled",)], [("failed",)]))
            assert await run_state(engine, run_id) == "cancelled"
            assert await task_states(engine, run_id) == {"a": "cancelled", "b": "cancelled"}
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_parallelism_and_max_active_runs_are_enforced(settings: Settings) -> None:
    settings = fast(settings, parallelism=3)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = MemoryExecutor(mode="manual")
        try:
            await apply(engine, {"dag_id": "wide", "max_active_runs": 2,
                                 "tasks": [container(f"t{i}") for i in range(5)]})
            async with running_scheduler(settings, executor, engine=engine):
                runs = [await trigger(engine, "wide", run_id=f"r{i}") for i in range(3)]
                await eventually(lambda: asyncio.sleep(0, executor.running()), lambda r: len(r) == 3)
                await asyncio.sleep(0.6)  # several ticks: still no more than 3 slots, 2 active runs
                assert len(executor.running()) == 3
                states = [await run_state(engine, r) for r in runs]
                assert states == ["running", "running", "queued"]
                for _ in range(40):
                    for key in executor.running():
                        await executor.complete(key)
                    if all([await run_state(engine, r) == "success" for r in runs]):
                        break
                    await asyncio.sleep(0.1)
                assert [await run_state(engine, r) for r in runs] == ["success"] * 3
            peak = await rows(engine, "SELECT max(n) FROM (SELECT count(*) AS n FROM task_tries a JOIN task_tries b "
                              "ON b.queued_at <= a.queued_at AND coalesce(b.ended_at, 'infinity') > a.queued_at "
                              "GROUP BY a.id) x")
            assert peak[0][0] <= 3
        finally:
            await engine.dispose()

    asyncio.run(main())
