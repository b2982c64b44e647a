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

from leoflow.db import dag_store
from leoflow.db.engine import make_async_engine
from leoflow.executor.memory import MemoryExecutor
from leoflow.model.tries import TryKey
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, fast, rows, running_scheduler, task_states, trigger


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
                sched.service.core.slow_kill_after = 0.2
                slow, timed = _sample("leoflow_scheduler_slow_kills_total"), \
                    _sample("leoflow_scheduler_kill_duration_seconds_count")

                async def try_state() -> str:
                    return str((await rows(engine, "SELECT state FROM task_tries"))[0][0])

                async with engine.begin() as conn:
                    await dag_store.cancel_run(conn, "stuck", run_id)
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
