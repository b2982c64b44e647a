"""The leader services supervisor: start the leader-only work on acquire, cancel it on loss.

The elector only flips a toggle (its threads call :meth:`LeaderSupervisor.acquired` /
:meth:`LeaderSupervisor.lost` through ``loop.call_soon_threadsafe``). Transitions are applied
strictly in order by one consumer task, so a new term's services never start before the previous
term's have been cancelled and awaited.

On acquire: ``executor = make_executor(settings)``, then ``SchedulerService(executor)`` plus
``leader_services(settings, executor)`` (plus any extra services the caller passes), each in a
named, guarded task. On loss: every task is cancelled *at once*, awaited for at most
``LEOFLOW_SHUTDOWN_GRACE`` seconds, then ``await executor.stop()``.

Watchdogs: a service that returns or dies, or the scheduler making no ``ctx.progress()`` for
``LEOFLOW_SCHEDULER_STALL_TIMEOUT`` seconds, makes the replica step down (the elector releases
the lock so another replica can lead). The first ``progress()`` of a term is recorded as a
``scheduler_started`` cluster event ("work resumed", used by ``bench/failover.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.clock import Clock
from leoflow.db import election_store as store
from leoflow.errors import FencedOut
from leoflow.leadership import LeaderContext, LeaderService
from leoflow.settings import Settings

log = logging.getLogger(__name__)

#: Builds the executor and leader services of one term: ``(executor or None, services)``.
ServicesFactory = Callable[[Settings], tuple[Any, list[LeaderService]]]


def default_services(settings: Settings) -> tuple[Any, list[LeaderService]]:
    """The production wiring: a fresh executor, the scheduler, and the executor's singletons."""
    from leoflow.executor.factory import leader_services, make_executor
    from leoflow.scheduler.service import SchedulerService

    executor = make_executor(settings)
    return executor, [SchedulerService(executor), *leader_services(settings, executor)]


def preload_leader_modules(settings: Settings) -> None:
    """Import what the first term needs, ahead of time (call it in a worker thread).

    Importing ``kubernetes`` takes seconds on a busy host; done lazily inside the first
    acquisition it ran on the event loop and stalled the API and membership heartbeats.
    """
    import importlib

    modules = ["leoflow.scheduler.service", "leoflow.executor.factory"]
    modules += {"kubernetes": ["leoflow.executor.kubernetes", "leoflow.executor.kubernetes_gc"],
                "local": ["leoflow.executor.local"]}.get(settings.executor.kind, ["leoflow.executor.memory"])
    for name in modules:
        importlib.import_module(name)


class LeaderSupervisor:
    """Runs the leader-only services of the current term; see the module docstring."""

    def __init__(self, settings: Settings, engine: AsyncEngine, clock: Clock, *,
                 step_down: Callable[[str], None], factory: ServicesFactory = default_services,
                 extra: Sequence[LeaderService] = ()) -> None:
        self.settings = settings
        self.engine = engine
        self.clock = clock
        self._step_down = step_down
        self._factory = factory
        self._extra = list(extra)
        self._queue: asyncio.Queue[tuple[str, int, str, str]] = asyncio.Queue()
        self._term: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._executor: Any = None
        self._last_progress = 0.0
        self._progressed = asyncio.Event()

    @property
    def term(self) -> int | None:
        return self._term

    # ------------------------------------------------------------------ thread-safe entry points
    def notify(self, loop: asyncio.AbstractEventLoop, kind: str, term: int, lost_kind: str = "",
               reason: str = "") -> None:
        loop.call_soon_threadsafe(self._queue.put_nowait, (kind, term, lost_kind, reason))

    async def run(self) -> None:
        """Apply transitions in order until cancelled."""
        try:
            while True:
                kind, term, lost_kind, reason = await self._queue.get()
                if kind == "acquired":
                    await self._stop_services(f"new term {term}")
                    await self._start(term)
                elif self._term == term:
                    await self._stop_services(f"{lost_kind}: {reason}")
        finally:
            await self._stop_services("replica stopping")

    async def stop(self) -> None:
        """Graceful shutdown: stop the services (bounded by the grace period) while still leading."""
        await self._stop_services("shutdown")

    # ------------------------------------------------------------------ internals
    async def _start(self, term: int) -> None:
        try:
            executor, services = self._factory(self.settings)
        except Exception as exc:
            log.exception("cannot build the leader services; stepping down", extra={"term": term})
            self._step_down(f"leader services failed to start: {exc}")
            return
        self._term, self._executor = term, executor
        self._last_progress = self.clock.monotonic()
        self._progressed = asyncio.Event()
        ctx = LeaderContext(term=term, settings=self.settings, engine=self.engine, clock=self.clock,
                            progress=self._progress)
        for service in [*services, *self._extra]:
            self._tasks.append(asyncio.create_task(self._guard(service, ctx), name=f"leader:{service.name}"))
        self._tasks.append(asyncio.create_task(self._watch_stall(term), name="leader:stall-watchdog"))
        self._tasks.append(asyncio.create_task(self._record_started(term), name="leader:started-event"))
        log.info("leader services started", extra={"term": term, "services": [s.name for s in services]})

    def _progress(self) -> None:
        self._last_progress = self.clock.monotonic()
        self._progressed.set()

    async def _guard(self, service: LeaderService, ctx: LeaderContext) -> None:
        try:
            await service.run(ctx)
        except asyncio.CancelledError:
            raise
        except FencedOut as exc:
            log.warning("leader service fenced out; stepping down", extra={"service": service.name,
                                                                        "term": ctx.term, "error": str(exc)})
            self._step_down(f"{service.name} fenced out")
            return
        except Exception as exc:
            log.exception("leader service died; stepping down", extra={"service": service.name, "term": ctx.term})
            self._step_down(f"{service.name} died: {type(exc).__name__}")
            return
        log.error("leader service returned; stepping down", extra={"service": service.name, "term": ctx.term})
        self._step_down(f"{service.name} stopped")

    async def _watch_stall(self, term: int) -> None:
        limit = self.settings.election.scheduler_stall_timeout
        while True:
            await asyncio.sleep(min(1.0, limit / 4))
            if self.clock.monotonic() - self._last_progress > limit:
                log.error("scheduler made no progress; releasing leadership",
                          extra={"term": term, "stall_timeout": limit})
                self._step_down("scheduler stalled")
                return

    async def _record_started(self, term: int) -> None:
        await self._progressed.wait()
        try:
            async with self.engine.begin() as conn:
                await store.record_event_async(conn, self.settings.cluster.name, "scheduler_started",
                                               self.settings.cluster.node_id, term, {})
        except Exception as exc:  # informational only
            log.warning("could not record scheduler_started", extra={"term": term, "error": str(exc)})

    async def _stop_services(self, why: str) -> None:
        tasks, self._tasks = self._tasks, []
        executor, self._executor = self._executor, None
        term, self._term = self._term, None
        if not tasks and executor is None:
            return
        for task in tasks:
            task.cancel()
        grace = self.settings.election.shutdown_grace
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=max(grace, 0.01))
            for task in pending:
                log.error("leader service did not stop within the grace period", extra={"task": task.get_name()})
        if executor is not None:
            try:
                await asyncio.wait_for(executor.stop(), timeout=max(grace, 1.0))
            except Exception:
                log.exception("executor did not stop cleanly", extra={"term": term})
        log.info("leader services stopped", extra={"term": term, "why": why})

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._stop_services("replica stopping")
