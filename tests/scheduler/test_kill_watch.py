"""A kill the executor does not finish is visible while it hangs (issue 21: cancellation).

The scheduler marks a try ``cancelled`` only once the executor's kill returned; until then the
user sees ``cancelling``. A kill that hangs is therefore reported while it hangs (a warning
naming the try, ``leoflow_scheduler_slow_kills_total``), and every kill's duration is measured
(``leoflow_scheduler_kill_duration_seconds``). Real PostgreSQL, memory executor.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import REGISTRY
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import tries as try_store
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.executor.memory import MemoryExecutor
from leoflow.model.tries import TryKey
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, fast, in_conn, rows, running_scheduler, task_states, trigger
from tests.scheduler.stepper import stepper


class StuckCancelExecutor(MemoryExecutor):
    """Tries run until cancelled; a cancel hangs until the test releases it (an API server that
    never answers the delete)."""

    def __init__(self) -> None:
        super().__init__(mode="manual")
        self.cancel_started = asyncio.Event()
        self.release = asyncio.Event()

    async def cancel(self, key: TryKey) -> None:
        self.cancel_started.set()
        await self.release.wait()
        await super().cancel(key)


def _sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_a_hanging_kill_is_reported_while_it_hangs_and_timed_once_done(settings: Settings,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    settings = fast(settings)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = StuckCancelExecutor()
        try:
            await apply(engine, {"dag_id": "stuck", "tasks": [{"id": "a", "image": "busybox", "command": ["true"]}]})
            async with running_scheduler(settings, executor, engine=engine) as sched:
                run_id = await trigger(engine, "stuck")
                await eventually(lambda: task_states(engine, run_id), lambda s: s.get("a") == "running")
                assert sched.service.core is not None
                sched.service.core.kills.slow_kill_after = 0.2
                slow, timed = _sample("leoflow_scheduler_slow_kills_total"), \
                    _sample("leoflow_scheduler_kill_duration_seconds_count")

                async def try_state() -> str:
                    return str((await rows(engine, "SELECT state FROM task_tries"))[0][0])

                async with engine.begin() as conn:
                    await run_store.cancel_run(conn, "stuck", run_id)
                sched.service.poke()
                await asyncio.wait_for(executor.cancel_started.wait(), timeout=30)
                # The cancel hangs (until released): it is counted and logged while it hangs.
                await eventually(lambda: asyncio.sleep(0, _sample("leoflow_scheduler_slow_kills_total")),
                                 lambda v: v == slow + 1)
                warnings = [r for r in caplog.records if r.getMessage() == "kill not completed"]
                assert [getattr(r, "try") for r in warnings] == [str(TryKey("stuck", run_id, "a", 1))]
                assert await try_state() == "cancelling"
                assert _sample("leoflow_scheduler_kill_duration_seconds_count") == timed
                executor.release.set()
                await eventually(try_state, lambda s: s == "cancelled")
                await eventually(lambda: asyncio.sleep(0, _sample("leoflow_scheduler_kill_duration_seconds_count")),
                                 lambda v: v == timed + 1)
                assert _sample("leoflow_scheduler_slow_kills_total") == slow + 1  # counted once, not per tick
                assert [r for r in caplog.records if r.getMessage() == "slow kill recorded"]
        finally:
            await engine.dispose()

    with caplog.at_level(logging.WARNING, logger="leoflow.scheduler.core"):
        asyncio.run(main())


def test_a_kill_recorded_while_a_step_lists_its_victims_is_not_done_twice(settings: Settings,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A step reads the tries to kill inside its transaction; a kill running beside the loop can
    record its try killed before that step commits. The step's list then names a try that is no
    longer ``cancelling``: it must not be cancelled (a second pod delete) or timed a second time.
    The race is forced: the kill is released and awaited between the list's read and the commit."""
    async def main() -> None:
        async with stepper(settings) as st:
            run_id, key = await st.launch_alone("race")
            st.report(key, "running")
            await st.tick()

            release, cancels = asyncio.Event(), list[TryKey]()

            async def hanging_cancel(victim: TryKey) -> None:
                cancels.append(victim)
                await release.wait()

            st.core.executor.cancel = hanging_cancel  # type: ignore[method-assign,assignment]
            await in_conn(st.engine, lambda c: run_store.cancel_run(c, "race", run_id))
            await st.tick(periodic=True)  # lists the try, spawns its kill, which hangs
            await eventually(lambda: asyncio.sleep(0, len(cancels)), lambda n: n == 1)
            timed = _sample("leoflow_scheduler_kill_duration_seconds_count")

            listed = try_store.tries_to_kill
            raced: list[TryKey] = []

            async def listed_then_killed(conn: AsyncConnection, limit: int) -> list[try_store.TryToKill]:
                victims = await listed(conn, limit)
                if not release.is_set():  # the kill ends while this step's transaction is open
                    raced.extend(v.key for v in victims)
                    release.set()
                    await eventually(lambda: asyncio.sleep(0, bool(st.core.kills.killing)), lambda busy: not busy)
                return victims

            monkeypatch.setattr(try_store, "tries_to_kill", listed_then_killed)
            await st.tick(periodic=True)
            assert raced == [key]  # the race happened: the step listed the try its kill then recorded
            await eventually(lambda: asyncio.sleep(0, bool(st.core.kills.killing)), lambda busy: not busy)
            assert cancels == [key]
            assert _sample("leoflow_scheduler_kill_duration_seconds_count") == timed + 1
            [(state,)] = await rows(st.engine, "SELECT state FROM task_tries")
            assert state == "cancelled"

    asyncio.run(main())
