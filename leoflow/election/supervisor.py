"""The leader services supervisor: start the leader-only work on acquire, cancel it on loss.

The elector only flips a toggle (its threads call :meth:`LeaderSupervisor.notify` through
``loop.call_soon_threadsafe``). Transitions are applied strictly in order by one consumer task,
so a new term's services never start before the previous term's have been cancelled and awaited.

*Which* services a leader runs is not decided here: the composition root
(:mod:`leoflow.replica`) hands the supervisor a :data:`ServicesFactory` that builds a term's
executor and its services. This package therefore imports nothing of the scheduler, the
executors or the API (docs/adr/0008-layers.md).

On acquire: ``factory(settings)`` → ``(executor, services)``; each service (plus any extra the
caller passes) runs in a named, guarded task (:mod:`leoflow.aiotasks`). On loss: every task is
cancelled *at once*, awaited for at most ``LEOFLOW_SHUTDOWN_GRACE`` seconds, then
``await executor.stop()`` (which waits for the term's calls in flight, at most
``LEOFLOW_SHUTDOWN_GRACE`` + ``LEOFLOW_LEADER_LEASE`` seconds), and only then is leadership
released.

Watchdogs: a service that returns or dies, or the scheduler making no ``ctx.progress()`` for
``LEOFLOW_SCHEDULER_STALL_TIMEOUT`` seconds, makes the replica step down (the elector releases
the lock so another replica can lead). The first ``progress()`` of a term is recorded as a
``scheduler_started`` cluster event ("work resumed", used by ``bench/failover.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from leoflow.aiotasks import cancel_and_wait, start_guarded, wait_at_most
from leoflow.clock import Clock
from leoflow.db.connection.database import Database
from leoflow.db.stores import cluster_events
from leoflow.errors import DatabaseError, FencedOut
from leoflow.leadership import LeaderContext, LeaderService
from leoflow.settings import Settings

log = logging.getLogger(__name__)


class Stoppable(Protocol):
    """What the supervisor needs of a term's executor: a way to stop it after its services."""

    async def stop(self) -> None: ...


#: Builds the executor and leader services of one term: ``(executor or None, services)``.
ServicesFactory = Callable[[Settings], tuple[Stoppable | None, list[LeaderService]]]


class LeaderSupervisor:
    """Runs the leader-only services of the current term; see the module docstring."""

    def __init__(self, settings: Settings, db: Database, clock: Clock, *, step_down: Callable[[str], None],
                 factory: ServicesFactory, extra: Sequence[LeaderService] = ()) -> None:
        self.settings = settings
        self.db = db
        self.clock = clock
        self._step_down = step_down
        self._factory = factory
        self._extra = list(extra)
        self._queue: asyncio.Queue[tuple[str, int, str, str]] = asyncio.Queue()
        self._term: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._executor: Stoppable | None = None
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
                    self._start(term)
                elif self._term == term:
                    await self._stop_services(f"{lost_kind}: {reason}")
        finally:
            await self._stop_services("replica stopping")

    async def stop(self) -> None:
        """Graceful shutdown: stop the services (bounded by the grace period) while still leading."""
        await self._stop_services("shutdown")

    # ------------------------------------------------------------------ internals
    def _start(self, term: int) -> None:
        try:
            executor, services = self._factory(self.settings)
        except Exception as exc:  # boundary: whatever the wiring raised, this term cannot lead
            log.exception("cannot build the leader services; stepping down", extra={"term": term})
            self._step_down(f"leader services failed to start: {exc}")
            return
        self._term, self._executor = term, executor
        self._last_progress = self.clock.monotonic()
        self._progressed = asyncio.Event()
        ctx = LeaderContext(term=term, settings=self.settings, db=self.db, clock=self.clock,
                            progress=self._progress, fail=self._step_down)
        for service in [*services, *self._extra]:
            start_guarded(service.run(ctx), f"leader:{service.name}", on_death=self._service_died,
                          registry=self._tasks)
        start_guarded(self._watch_stall(term), "leader:stall-watchdog", may_return=True, registry=self._tasks)
        start_guarded(self._record_started(term), "leader:started-event", may_return=True, registry=self._tasks)
        log.info("leader services started", extra={"term": term, "services": [s.name for s in services]})

    def _progress(self) -> None:
        self._last_progress = self.clock.monotonic()
        self._progressed.set()

    def _service_died(self, name: str, error: BaseException | None) -> None:
        """A leader service ended on its own: the term cannot continue without it."""
        service = name.removeprefix("leader:")
        if isinstance(error, FencedOut):
            self._step_down(f"{service} fenced out")
        elif error is not None:
            self._step_down(f"{service} died: {type(error).__name__}")
        else:
            self._step_down(f"{service} stopped")

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
            async with self.db.transaction() as conn:
                await cluster_events.record_event_async(conn, self.settings.cluster.name, "scheduler_started",
                                               self.settings.cluster.node_id, term, {})
        except DatabaseError as exc:  # informational only
            log.warning("could not record scheduler_started", extra={"term": term, "error": str(exc)})

    async def _stop_services(self, why: str) -> None:
        tasks, self._tasks = self._tasks, set()
        executor, self._executor = self._executor, None
        term, self._term = self._term, None
        if not tasks and executor is None:
            return
        await cancel_and_wait(tasks, timeout=max(self.settings.election.shutdown_grace, 0.01))
        if executor is not None:
            try:
                # An executor's stop waits for its calls in flight (bounded by half the lease):
                # this timeout only guards against a broken one.
                election = self.settings.election
                limit = max(election.shutdown_grace, 1.0) + election.leader_lease
                await wait_at_most(executor.stop(), limit)
            except Exception:  # boundary: a broken executor must not keep the next term from starting
                log.exception("executor did not stop cleanly", extra={"term": term})
        log.info("leader services stopped", extra={"term": term, "why": why})
