"""Deadlines never compare one leader's wall clock with another's: a leader 60 s off times nothing wrong.

A task's timeout and a failed try's retry delay start under a leader with a correct clock; a
second leader whose clock is off (injected: :class:`~leoflow.clock.SkewedClock`) takes over.

- 60 s **ahead**: it must not time the task out early, nor start the retry early (today both
  happened on its first tick: ``timeout_at`` and ``next_try_at`` were the first leader's instants,
  compared with the second leader's clock).
- 60 s **behind**: the task must still time out and the retry still start within seconds, not a
  minute late.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from leoflow.clock import SkewedClock
from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.memory import MemoryExecutor, MemoryWorld
from leoflow.metrics import scheduler as metrics
from leoflow.model.tries import TryKey
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, fast, rows, running_scheduler, trigger


def dag(timeout: float, retry_delay: float) -> dict[str, Any]:
    return {"dag_id": "skew", "max_active_runs": 10, "tasks": [
        {"id": "slow", "image": "busybox", "command": ["sleep", "600"], "timeout_seconds": timeout},
        {"id": "flaky", "image": "busybox", "command": ["false"], "retries": 1, "retry_delay_seconds": retry_delay},
    ]}


async def ticks() -> float:
    return float(metrics.TICKS._value.get())


async def tasks(engine: Any, run_id: str) -> dict[str, tuple[str, int, str | None]]:
    found = await rows(engine, "SELECT ti.task_id, ti.state, ti.try_number, ti.reason FROM task_instances ti "
                               "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=run_id)
    return {r[0]: (r[1], r[2], r[3]) for r in found}


async def start_under_a_correct_clock(settings: Settings, engine: Any, world: MemoryWorld, run_id: str) -> None:
    """Term 1: both tasks start; flaky's first try fails and waits for its retry."""
    executor = MemoryExecutor(mode="manual", world=world)
    async with running_scheduler(settings, executor, term=1, engine=engine):
        await trigger(engine, "skew", run_id)
        await eventually(lambda: tasks(engine, run_id),
                         lambda t: len(t) == 2 and all(v[0] == "running" for v in t.values()))
        await executor.complete(TryKey("skew", run_id, "flaky", 1), "failed", 1)
        await eventually(lambda: tasks(engine, run_id), lambda t: t["flaky"][0] == "up_for_retry")


def hand_over(settings: Settings, run_id: str, offset: float, *, timeout: float, retry_delay: float,
              under_skew: Callable[[Any], Awaitable[dict[str, tuple[str, int, str | None]]]],
              ) -> dict[str, tuple[str, int, str | None]]:
    """Start both tasks under term 1 (right clock), then run ``under_skew`` under term 2, ``offset`` s off."""

    async def main() -> dict[str, tuple[str, int, str | None]]:
        engine = make_async_engine(settings.database, pool_size=4)
        world = MemoryWorld()
        try:
            await apply(engine, dag(timeout=timeout, retry_delay=retry_delay))
            await start_under_a_correct_clock(settings, engine, world, run_id)
            async with running_scheduler(settings, MemoryExecutor(mode="manual", world=world), term=2,
                                         clock=SkewedClock(offset), engine=engine):
                return await under_skew(engine)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def test_a_leader_60s_ahead_neither_times_out_nor_retries_early(settings: Settings) -> None:
    async def fifteen_ticks_later(engine: Any) -> dict[str, tuple[str, int, str | None]]:
        before = await ticks()
        await eventually(ticks, lambda n: n >= before + 15)  # periodic steps ran several times
        return await tasks(engine, "ahead")

    state = hand_over(fast(settings), "ahead", +60, timeout=30, retry_delay=30, under_skew=fifteen_ticks_later)
    assert state["slow"] == ("running", 1, None), state
    assert state["flaky"][:2] == ("up_for_retry", 1), state


def test_a_leader_60s_behind_times_out_and_retries_on_time(settings: Settings) -> None:
    async def timed_out_and_retried(engine: Any) -> dict[str, tuple[str, int, str | None]]:
        return await eventually(lambda: tasks(engine, "behind"),
                                lambda t: t["slow"][0] == "failed" and t["flaky"][1] == 2, timeout=30)

    state = hand_over(fast(settings), "behind", -60, timeout=2, retry_delay=2, under_skew=timed_out_and_retried)
    assert state["slow"] == ("failed", 1, "timed out after 2s"), state
    assert state["flaky"][:2] in (("queued", 2), ("running", 2)), state
