"""A stopping scheduler does not wait forever for a helper task that ignores its cancellation.

Two scheduler tests once hung for 300 s in full runs with the service's own stop as the suspect:
it cancelled its wake-up listener and waited for it without a bound, and a cancellation lost
inside the driver would make that wait endless — holding up the next leader's take-over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from leoflow.executor.memory import MemoryExecutor
from leoflow.scheduler import service
from leoflow.settings import Settings
from tests.scheduler.harness import fast, running_scheduler


def test_a_listener_that_ignores_its_cancellation_does_not_hold_the_stop(
        settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    stubborn = True
    listening = asyncio.Event()

    async def deaf_listen(url: str, *, application_name: str, on_wakeup: Callable[[], None]) -> None:
        listening.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if not stubborn:
                    raise
                # what a lost cancellation looks like from outside: the task keeps waiting

    monkeypatch.setattr(service.wakeup, "listen", deaf_listen)
    monkeypatch.setattr(service, "STOP_TIMEOUT", 0.2)

    async def main() -> None:
        nonlocal stubborn
        async with running_scheduler(fast(settings), MemoryExecutor()) as sched:
            await asyncio.wait_for(listening.wait(), timeout=30)
            sched.task.cancel()
            # Without the bound this waits forever (the harness would then hang on the same await).
            await asyncio.wait_for(asyncio.gather(sched.task, return_exceptions=True), timeout=30)
        [left] = [t for t in asyncio.all_tasks() if t.get_name() == "scheduler-listen"]
        stubborn = False
        left.cancel()
        await asyncio.gather(left, return_exceptions=True)

    with caplog.at_level(logging.ERROR, logger="leoflow.aiotasks"):
        asyncio.run(main())
    assert any(r.getMessage() == "task did not stop when cancelled" and getattr(r, "task", None) == "scheduler-listen"
               for r in caplog.records)


def test_a_scheduler_woken_as_it_is_cancelled_stops(settings: Settings) -> None:
    """A report (or a NOTIFY) that wakes the idle loop in the same moment the service is cancelled
    must not swallow the cancellation: with Python 3.11's ``asyncio.wait_for`` the loop ticked on
    forever (seen in CI as a 300-s hang of tests/scheduler/test_service_local.py)."""
    async def main() -> None:
        async with running_scheduler(fast(settings, interval=30.0), MemoryExecutor()) as sched:
            wake = sched.service._wake
            while not any(not w.done() for w in wake._waiters):  # the loop waits on its wake-up event
                assert not sched.task.done()
                await asyncio.sleep(0.01)
            sched.service.poke()
            sched.task.cancel()
            ended = await asyncio.wait_for(asyncio.gather(sched.task, return_exceptions=True), timeout=30)
            assert isinstance(ended[0], asyncio.CancelledError)

    asyncio.run(main())
