"""The hung-test diagnostic (tests/harness/hang_dump.py) names the coroutine that never resumes."""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading

from tests.harness.hang_dump import dump_if_hung


async def waits_for_a_reply_that_never_comes(started: threading.Event) -> None:
    started.set()
    await asyncio.get_running_loop().create_future()


async def service_loop(started: threading.Event) -> None:
    await waits_for_a_reply_that_never_comes(started)


def test_a_block_still_running_prints_the_stack_of_the_stuck_coroutine() -> None:
    started, out = threading.Event(), io.StringIO()
    loop = asyncio.new_event_loop()
    task = loop.create_task(service_loop(started), name="stuck-one")

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # how the test ends it
            loop.run_until_complete(task)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        assert started.wait(10)
        with dump_if_hung(0.2, out):
            for _ in range(100):
                if "stuck-one" in out.getvalue():
                    break
                threading.Event().wait(0.1)
        assert "asyncio task 'stuck-one'" in out.getvalue()
        # The task's own frame is service_loop; the await chain names the coroutine it waits in.
        assert "awaiting waits_for_a_reply_that_never_comes" in out.getvalue()
    finally:
        loop.call_soon_threadsafe(task.cancel)
        runner.join(10)
        loop.close()


def test_a_block_that_ends_in_time_prints_nothing() -> None:
    out = io.StringIO()
    with dump_if_hung(5, out):
        pass
    assert out.getvalue() == ""
