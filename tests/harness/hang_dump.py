"""When a test hangs, say where: the stacks of every asyncio task of every running event loop.

pytest-timeout (``timeout`` in pyproject.toml) ends a hung test with the main thread's stack,
which for an asyncio test is only the event loop waiting in ``select`` — the coroutine that
never resumes is not on any thread's stack. Shortly before that timeout, this prints each task's
own stack (``Task.print_stack``) to stderr, which pytest shows with the failure. Reading another
thread's loop is not thread-safe in general; a loop stuck for minutes is idle, which is the case
this is for.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


def dump_running_loops(out: TextIO) -> int:
    """Print the stack of every task of every running loop; returns the tasks printed."""
    printed = 0
    for obj in gc.get_objects():
        if isinstance(obj, asyncio.AbstractEventLoop) and obj.is_running():
            for task in list(asyncio.all_tasks(obj)):
                print(f"--- asyncio task {task.get_name()!r} (done={task.done()})", file=out)
                task.print_stack(file=out)
                for line in await_chain(task):
                    print(f"    awaiting {line}", file=out)
                printed += 1
    out.flush()
    return printed


def await_chain(task: asyncio.Task[object]) -> list[str]:
    """Where the task's coroutine waits, innermost last: ``Task.print_stack`` shows only the task's
    own frame, not the coroutines it awaits (a CI hang showed ``await self._loop(...)`` and no more)."""
    chain: list[str] = []
    coro: object = task.get_coro()
    while coro is not None and len(chain) < 50:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is not None:
            chain.append(f"{frame.f_code.co_qualname} ({frame.f_code.co_filename}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)
    return chain


@contextmanager
def dump_if_hung(after: float, out: TextIO | None = None) -> Iterator[None]:
    """Dump the running loops' tasks if the block is still running ``after`` seconds on."""
    def fire() -> None:
        stream = out or sys.stderr
        print(f"=== still running after {after:.0f} s: asyncio tasks of the running loops", file=stream)
        dump_running_loops(stream)

    timer = threading.Timer(after, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
