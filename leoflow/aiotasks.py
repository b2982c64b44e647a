"""Named, guarded asyncio tasks: a never-ending loop that dies is logged and acted on, never lost.

An ``asyncio.create_task`` whose coroutine raises is silent until someone awaits it — often
never, so a dead watch loop or log shipper looks exactly like a quiet one. Every long-running
task in Leoflow is therefore started with :func:`start_guarded`:

- it has a **name** (shown in logs and in ``asyncio.all_tasks()``);
- an unexpected end — an exception, or a ``return`` from a loop that should run until
  cancelled — is **logged with that name** and handed to the owner's ``on_death`` callback,
  which decides what it means (the supervisor steps down, the executor restarts its watch,
  a replica service is restarted after a pause by :func:`restarting`);
- cancellation is not a death: owners cancel their tasks on purpose;
- the task is kept in the owner's ``registry`` (a set) until it ends, so it is neither
  garbage-collected mid-flight nor forgotten at shutdown (:func:`cancel_and_wait`).

Tests enforce the other half: ``tests/conftest.py`` fails any test whose event loop still has
tasks running when it closes (what kopf's test suite does).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ``on_death(name, exception)``; the exception is None when a loop returned unexpectedly.
OnDeath = Callable[[str, BaseException | None], None]
Registry = set[asyncio.Task[Any]]


def start_guarded(coro: Coroutine[Any, Any, Any], name: str, *, on_death: OnDeath | None = None,
                  may_return: bool = False, registry: Registry | None = None) -> asyncio.Task[Any]:
    """Start ``coro`` as a named task whose unexpected end is logged and reported to ``on_death``.

    ``may_return``: the coroutine is a job that ends by itself (a kill, a create with retries):
    returning is normal, only an exception is a death.
    """
    task = asyncio.create_task(coro, name=name)
    if registry is not None:
        registry.add(task)
    task.add_done_callback(functools.partial(_reap, on_death, may_return, registry))
    return task


def _reap(on_death: OnDeath | None, may_return: bool, registry: Registry | None, task: asyncio.Task[Any]) -> None:
    if registry is not None:
        registry.discard(task)
    if task.cancelled():
        return
    error = task.exception()
    if error is None and may_return:
        return
    name = task.get_name()
    if error is None:
        log.error("task %s returned, but it should run until cancelled", name, extra={"task": name})
    else:
        log.error("task %s died: %s", name, type(error).__name__, exc_info=error, extra={"task": name})
    if on_death is not None:
        on_death(name, error)


async def restarting(run: Callable[[], Awaitable[None]], name: str, *, pause: float) -> None:
    """Run ``run()`` until cancelled, starting it again ``pause`` seconds after each death.

    For services that must outlive their own bugs (a replica's log shipper): one bad round is
    logged with the service's name, and the service comes back.
    """
    while True:
        try:
            await run()
            log.error("service %s returned; restarting", name, extra={"service": name})
        except asyncio.CancelledError:
            raise
        except Exception:  # boundary: the point of this loop is to survive any death of the service
            log.exception("service %s died; restarting", name, extra={"service": name})
        await asyncio.sleep(pause)


async def cancel_and_wait(tasks: Collection[asyncio.Task[Any]], timeout: float | None = None) -> set[asyncio.Task[Any]]:
    """Cancel ``tasks`` and wait (at most ``timeout`` s) for them to end; returns those still running."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return set()
    _done, still = await asyncio.wait(pending, timeout=timeout)
    for task in still:
        log.error("task did not stop when cancelled", extra={"task": task.get_name()})
    return still


async def wait_at_most(awaitable: Awaitable[T], timeout: float | None) -> T:
    """``await awaitable``, raising TimeoutError after ``timeout`` seconds (None: no limit).

    Use this, never ``asyncio.wait_for``: on Python 3.11, ``wait_for`` returns the awaitable's result
    when the caller is cancelled in the same loop iteration as the awaitable completes — the
    cancellation is lost and the caller runs on as if never cancelled (CPython gh-86296, fixed in
    3.12). A stopping scheduler whose wake-up event was set just then kept ticking forever: the
    leader's work must stop when it is told to. ``asyncio.timeout`` keeps the cancellation.
    """
    async with asyncio.timeout(timeout):
        return await awaitable
