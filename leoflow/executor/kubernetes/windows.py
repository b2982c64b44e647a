"""Fenced windows: every pod create and delete of a term reaches the API server before a newer term exists.

A *fenced window* is a write transaction that holds the cluster's ``cluster_leadership`` row
``FOR SHARE`` (:meth:`leoflow.db.connection.database.Database.fenced`) while create and delete calls are
made. A new leader bumps that row (``leoflow.db.stores.leader_terms.start_term``), which waits for
every open window; so a call made inside a window has been answered, or given up on at its
deadline (and logged: the API server may still carry it out, which a pod's deterministic name
makes harmless), before the newer term commits, and an ex-leader (whose check finds a newer
term) makes no call at all. What keeps that wait short, and what makes it a guarantee rather
than a hope:

- **One window at a time** per term, so one database connection whatever the number of pods.
  Calls queue for it (:meth:`FencedCalls.call`); a window runs up to ``concurrency`` at once.
- **A window starts calls only during its first** ``budget`` **seconds** (a quarter of the
  lease). A call not yet sent by then — even one already handed to a worker thread — is refused
  unsent (:class:`~.errors.CallNotSent`) and waits for the next window. Each call has a total
  deadline of a quarter of the lease (:attr:`~.kube_client.KubernetesApi.call_deadline`), so a window
  lasts at most half the lease. A new leader's elector rolls back fenced transactions older than
  the lease (a frozen ex-leader, ``leader_terms.blocking_fenced_writers``): a healthy window is
  never cut under its calls.
- **A window never closes under a call in flight**: cancelling the loop (the term ends) waits
  for the calls to return, and the executor's ``stop`` drains the API client before the replica
  releases leadership (:meth:`~.kube_client.KubernetesApi.drain`).

Failure semantics: the fencing check finds a newer term → every queued and later call raises
:class:`~leoflow.errors.FencedOut` (nothing is sent). The database fails before a window could
open → the calls queued then raise that :class:`~leoflow.errors.DatabaseError` and their callers
retry (with their own backoff). A failure at commit, after the calls, changes nothing: the calls
were made while the row was locked, and their answers were delivered as they came.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from leoflow.aiotasks import wait_at_most
from leoflow.errors import DatabaseError, FencedOut
from leoflow.executor.kubernetes.errors import CallNotSent
from leoflow.leadership import LeaderContext

log = logging.getLogger(__name__)
T = TypeVar("T")

#: ``send(send_by)``: one create or delete, refused unsent (CallNotSent) after ``send_by``.
Send = Callable[[float], Awaitable[T]]


@dataclass
class _Queued:
    send: Send[Any]
    result: asyncio.Future[Any]


class FencedCalls:
    """The queue and the window loop of one term (see the module docstring)."""

    def __init__(self, ctx: LeaderContext, *, budget: float, concurrency: int) -> None:
        self.ctx = ctx
        self.budget = budget
        self._slots = asyncio.Semaphore(concurrency)
        self._queue: deque[_Queued] = deque()
        self._wake = asyncio.Event()
        self._fenced_out: FencedOut | None = None
        #: Windows opened so far (for tests and logs).
        self.windows = 0

    async def call(self, send: Send[T]) -> T:
        """Make ``send`` inside a fenced window of this term; its result, or what it raised."""
        if self._fenced_out is not None:
            raise self._fenced_out
        result: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append(_Queued(send, result))
        self._wake.set()
        return await result

    async def run(self) -> None:
        """The window loop: a guarded task of the term, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue and self._fenced_out is None:
                await self._window()

    async def _window(self) -> None:
        ctx = self.ctx
        started: set[asyncio.Task[None]] = set()
        try:
            async with ctx.db.fenced(ctx.cluster, ctx.term):
                self.windows += 1
                send_by = time.monotonic() + self.budget
                try:
                    await self._start_calls(send_by, started)
                finally:
                    if started:  # also when cancelled: the transaction must outlive its calls
                        await asyncio.wait(started)
        except FencedOut as exc:
            log.warning("pod creates and deletes stop: fenced out", extra={"term": ctx.term, "error": str(exc)})
            self._fenced_out = exc
            self._fail_queued(exc)
        except DatabaseError as exc:
            if started:  # the calls were made under the lock; only the commit failed
                log.warning("fenced window ended with a database error", extra={"error": str(exc)[:300]})
            else:
                log.warning("could not open a fenced window", extra={"error": str(exc)[:300]})
                self._fail_queued(exc)

    async def _start_calls(self, send_by: float, started: set[asyncio.Task[None]]) -> None:
        while self._queue:
            remaining = send_by - time.monotonic()
            if remaining <= 0:
                return
            try:
                await wait_at_most(self._slots.acquire(), remaining)
            except TimeoutError:
                return
            item = self._queue.popleft() if self._queue else None
            if item is None or item.result.done():  # the caller gave up before it was sent
                self._slots.release()
                continue
            task = asyncio.ensure_future(self._send(item, send_by))
            started.add(task)

    async def _send(self, item: _Queued, send_by: float) -> None:
        try:
            value = await item.send(send_by)
        except CallNotSent as exc:
            if time.monotonic() > send_by:  # the window closed first: the next window sends it
                self._queue.appendleft(item)
                self._wake.set()
            elif not item.result.done():
                item.result.set_exception(exc)
        except Exception as exc:  # boundary: the caller owns the call's outcome, whatever it is
            if not item.result.done():
                item.result.set_exception(exc)
        else:
            if not item.result.done():
                item.result.set_result(value)
        finally:
            self._slots.release()

    def _fail_queued(self, exc: BaseException) -> None:
        while self._queue:
            item = self._queue.popleft()
            if not item.result.done():
                item.result.set_exception(exc)
