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
                printed += 1
    out.flush()
    return printed


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
