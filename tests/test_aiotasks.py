"""Guarded tasks (leoflow.aiotasks) and the leftover-task check every test runs under."""

from __future__ import annotations

import asyncio
import logging

import pytest

from leoflow.aiotasks import cancel_and_wait, restarting, start_guarded, wait_at_most
from tests.harness.leftovers import LeftoverTasks


def test_a_dying_loop_is_logged_by_name_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    deaths: list[tuple[str, str | None]] = []

    async def dies() -> None:
        raise RuntimeError("boom")

    async def returns() -> None:
        return None

    async def main() -> None:
        registry: set[asyncio.Task[object]] = set()
        on_death = lambda name, error: deaths.append((name, type(error).__name__ if error else None))  # noqa: E731
        start_guarded(dies(), "watch-loop", on_death=on_death, registry=registry)
        start_guarded(returns(), "resync-loop", on_death=on_death, registry=registry)
        start_guarded(returns(), "one-job", on_death=on_death, may_return=True, registry=registry)
        cancelled = start_guarded(asyncio.sleep(60), "sleeper", on_death=on_death, registry=registry)
        await asyncio.sleep(0.01)
        await cancel_and_wait([cancelled])
        assert registry == set()  # every ended task left the registry

    with caplog.at_level(logging.ERROR, logger="leoflow.aiotasks"):
        asyncio.run(main())
    assert sorted(deaths) == [("resync-loop", None), ("watch-loop", "RuntimeError")]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "watch-loop died" in logged and "resync-loop returned" in logged and "sleeper" not in logged


def test_restarting_brings_a_dead_service_back() -> None:
    runs: list[int] = []

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise ValueError("bad round")
        await asyncio.sleep(60)

    async def main() -> None:
        task = asyncio.create_task(restarting(flaky, "flaky", pause=0.01))
        while len(runs) < 3:
            await asyncio.sleep(0.01)
        await cancel_and_wait([task])

    asyncio.run(main())
    assert runs == [0, 1, 2]


def test_the_leftover_check_names_a_forgotten_task() -> None:
    """The autouse fixture is only as good as this: a forgotten task must be caught by name."""
    async def main() -> None:
        forgotten = asyncio.create_task(asyncio.sleep(60), name="forgotten-loop")
        await asyncio.sleep(0)
        assert not forgotten.done()

    inner = LeftoverTasks()
    with inner.watching():
        asyncio.run(main())
    assert inner.names == ["forgotten-loop"]


def test_wait_at_most_keeps_a_cancellation_that_arrives_as_the_wait_ends() -> None:
    """Python 3.11's ``asyncio.wait_for`` returns normally here (the cancellation is lost);
    ``wait_at_most`` raises it. Also: a result comes back, and the limit raises TimeoutError."""
    async def main() -> None:
        done = asyncio.Event()
        waiting = asyncio.create_task(wait_at_most(done.wait(), 10))
        await asyncio.sleep(0)
        done.set()
        waiting.cancel()  # in the same loop iteration as the event
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await wait_at_most(asyncio.sleep(0, result="ok"), 10) == "ok"
        with pytest.raises(TimeoutError):
            await wait_at_most(asyncio.Event().wait(), 0.01)

    asyncio.run(main())
