"""The scheduler loop tells the leader's other services while runs wait to be created or started.

``ctx.runs.waiting`` (leoflow.leadership.RunBacklog) is what the outcome observer waits on at a
boundary (tests/day2/test_observer_yields.py): it must be set during such a burst and cleared
once every run has started, or the observer would wait its full bound after every boundary.
"""

from __future__ import annotations

import asyncio
import contextlib

from leoflow.clock import FakeClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.memory import MemoryExecutor
from leoflow.leadership import LeaderContext, RunBacklog
from leoflow.scheduler.service import SchedulerService
from leoflow.settings import Settings
from tests.scheduler.harness import eventually, set_term
from tests.scheduler.test_due_runs import NOW, apply_many, minutely, run_states


class RecordingBacklog(RunBacklog):
    """A RunBacklog that keeps every value the scheduler wrote."""

    def __init__(self) -> None:
        self.written: list[bool] = []
        super().__init__()

    @property  # type: ignore[override]
    def waiting(self) -> bool:
        return self.written[-1] if self.written else False

    @waiting.setter
    def waiting(self, value: bool) -> None:
        self.written.append(value)


def test_the_loop_flags_a_burst_of_run_starts_and_clears_it_after(settings: Settings) -> None:
    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        try:
            await set_term(engine, settings.cluster.name, 1)
            await apply_many(engine, [minutely(f"b{i:02d}") for i in range(40)])
            backlog = RecordingBacklog()
            ctx = LeaderContext(term=1, settings=settings, db=Database(engine), clock=FakeClock(NOW), runs=backlog)
            # Two runs a batch: the 40 due DAGs take several creating steps, then several starting ones.
            executor = MemoryExecutor()
            task = asyncio.create_task(SchedulerService(executor, batch_size=2).run(ctx))
            try:
                await eventually(lambda: run_states(engine), lambda s: s == {"success": 40})
                await eventually(lambda: asyncio.sleep(0, backlog.written), lambda w: bool(w) and not w[-1])
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await executor.stop()
            assert True in backlog.written  # set while runs waited
            assert backlog.waiting is False  # and cleared once all had started
        finally:
            await engine.dispose()

    asyncio.run(main())
