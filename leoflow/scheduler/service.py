"""The leader's scheduling loop, as a :class:`~leoflow.leadership.LeaderService`.

``SchedulerService(executor).run(ctx)`` is started by the replica runtime when this replica
becomes leader and cancelled when it stops being one. It:

1. starts listening on the ``leoflow_wakeup`` channel (:mod:`leoflow.db.connection.wakeup`;
   the API NOTIFYs it on trigger/cancel/pause/apply) on its own connection, so a manual run starts
   well under a second after the API commits it;
2. starts the executor with a ``report`` callback that only appends to the scheduler's inbox and
   wakes the loop (reports are applied in batches by the loop, never inside the callback). A
   try's end wakes it at once; a ``running`` report, which changes nothing downstream, wakes it
   at most :data:`RUNNING_REPORT_DELAY` later, so a short task's start and end are applied in
   one step instead of two (and one that runs longer shows ``running`` 50 ms late);
3. resubmits every try still ``queued`` in the database (a previous leader may have died between
   committing the queue transition and handing the try over; submit is idempotent);
4. ticks (:class:`~leoflow.scheduler.core.SchedulerCore`) until cancelled: immediately again
   after a tick that changed something, otherwise after ``LEOFLOW_SCHEDULER_INTERVAL``, the next
   wake-up or the next DAG's ``next_run_at`` (the boundary itself), whichever comes first.
   ``ctx.progress()`` is called after every successful tick (the stall watchdog releases
   leadership if it stops).

Failure semantics: :class:`~leoflow.errors.FencedOut` means a newer term exists — the service
logs it and returns at once (it has written nothing under the old term). A database error fails
one tick: it is logged, counted, and the loop retries after the interval with a capped backoff;
if errors persist, no progress is reported and the stall watchdog steps down. A dead LISTEN
connection is reconnected in the background; meanwhile the interval still drives the loop.
The executor is *not* stopped here: the runtime stops it after cancelling every leader service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from leoflow.aiotasks import cancel_and_wait, start_guarded, wait_at_most
from leoflow.db.connection import wakeup
from leoflow.errors import DatabaseError, FencedOut
from leoflow.executor.base import Executor
from leoflow.leadership import LeaderContext
from leoflow.metrics import scheduler as metrics
from leoflow.model.tries import StatusUpdate
from leoflow.scheduler.core import DEFAULT_BATCH_SIZE, SchedulerCore

log = logging.getLogger(__name__)

#: Longest pause between retries of a failing tick; short enough to recover quickly once the
#: database is back, long enough not to hammer it while it is down.
MAX_ERROR_BACKOFF = 5.0
#: Pause before reconnecting a dropped LISTEN connection.
LISTEN_RECONNECT_DELAY = 1.0
#: Seconds a stopping scheduler waits for its wake-up listener to end once cancelled. A LISTEN
#: connection ends at once; one that does not (a cancellation lost inside the driver, a close the
#: server never answers) is logged by name and left behind, and must not hold up the hand-over to
#: the next leader (a stopping service that never returned was seen to hang a test for 300 s).
STOP_TIMEOUT = 5.0
#: Longest wait before a ``running`` report alone wakes the loop (see the module docstring).
#: Short against what a user notices, long against a trivial task's runtime (~5-10 ms).
RUNNING_REPORT_DELAY = 0.05


class SchedulerService:
    """The scheduling loop of the leader (see the module docstring)."""

    name = "scheduler"

    def __init__(self, executor: Executor, *, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        self.executor = executor
        self.batch_size = batch_size
        self.core: SchedulerCore | None = None
        self._wake = asyncio.Event()
        self._deferred_wake: asyncio.TimerHandle | None = None
        #: Set when a boundary came within reach: the warm task compiles its DAGs' graphs.
        self._warm_wanted = asyncio.Event()

    async def report(self, update: StatusUpdate) -> None:
        """The executor's callback: queue the update for the loop and wake it (see the module docstring)."""
        if self.core is None:
            return
        self.core.inbox.append(update)
        if update.state != "running":
            self._wake.set()
        elif self._deferred_wake is None:
            self._deferred_wake = asyncio.get_running_loop().call_later(RUNNING_REPORT_DELAY, self._wake_deferred)

    def _wake_deferred(self) -> None:
        self._deferred_wake = None
        self._wake.set()

    def poke(self) -> None:
        """Something changed outside (NOTIFY): run every step at once."""
        if self.core is not None:
            self.core.poke()
        self._wake.set()

    async def run(self, ctx: LeaderContext) -> None:
        core = self.core = SchedulerCore(ctx, self.executor, batch_size=self.batch_size)
        listener = start_guarded(self._listen(ctx), "scheduler-listen")
        log.info("scheduler starting", extra={"term": ctx.term, "executor": getattr(self.executor, "name", "?")})
        try:
            await self.executor.start(ctx, self.report)
            resubmitted = await core.resubmit_queued()
            if resubmitted:
                log.info("queued tries handed to the executor again", extra={"tries": resubmitted})
            await core.sweep_runs(force=True)
            warming = start_guarded(self._warm(ctx, core), "scheduler-warm-graphs")
            try:
                await self._loop(ctx, core)
            finally:
                await cancel_and_wait([warming], timeout=STOP_TIMEOUT)
        except FencedOut as exc:
            log.warning("scheduler stopped: fenced out", extra={"term": ctx.term, "error": str(exc)})
        finally:
            if self._deferred_wake is not None:
                self._deferred_wake.cancel()
                self._deferred_wake = None
            await cancel_and_wait([listener], timeout=STOP_TIMEOUT)
            await core.close(timeout=STOP_TIMEOUT)

    async def _loop(self, ctx: LeaderContext, core: SchedulerCore) -> None:
        interval = ctx.settings.scheduler.interval
        failures = 0
        while True:
            self._wake.clear()
            started = ctx.clock.monotonic()
            try:
                busy = await core.tick()
            except FencedOut:
                raise
            except DatabaseError as exc:
                failures += 1
                metrics.TICK_ERRORS.inc()
                log.warning("scheduler tick failed; retrying", extra={"error": str(exc)[:300], "failures": failures})
                await asyncio.sleep(min(MAX_ERROR_BACKOFF, interval * failures))
                continue
            failures = 0
            ctx.runs.waiting = core.periodic.creating or core.periodic.more_to_start
            if core.periodic.warm_wanted:
                core.periodic.warm_wanted = False
                self._warm_wanted.set()
            metrics.TICKS.inc()
            metrics.TICK_SECONDS.observe(max(0.0, ctx.clock.monotonic() - started))
            ctx.progress()
            if busy or core.inbox:
                await asyncio.sleep(0)  # let the executor and the API run between busy ticks
                continue
            due = core.seconds_to_due()
            with contextlib.suppress(TimeoutError):
                # A boundary within the interval wakes the loop at the boundary (a step that starts
                # up to an interval late makes every DAG due at midnight that much late).
                await wait_at_most(self._wake.wait(), interval if due is None else min(interval, due))

    async def _warm(self, ctx: LeaderContext, core: SchedulerCore) -> None:
        """Compile the graphs the next boundaries need (leoflow.scheduler.graphs): at the term's start,
        then whenever a boundary comes within reach (DAGs applied or moved meanwhile). A failure costs
        only the head start: the steps compile what they miss."""
        while True:
            try:
                compiled = await core.graphs.warm(ctx.db, ctx.clock.now())
            except DatabaseError as exc:
                log.warning("could not compile the due DAGs ahead of time", extra={"error": str(exc)[:300]})
            else:
                if compiled:
                    log.info("compiled the due DAGs ahead of their boundary", extra={"versions": compiled})
            await self._warm_wanted.wait()
            self._warm_wanted.clear()

    async def _listen(self, ctx: LeaderContext) -> None:
        """Wake the loop on every NOTIFY; reconnect forever (the interval covers the gaps)."""
        url = ctx.settings.require_database_url()
        while True:
            try:
                await wakeup.listen(url, application_name=f"leoflow-listen:{ctx.node_id}", on_wakeup=self.poke)
            except DatabaseError as exc:
                log.warning("wake-up listener lost; reconnecting", extra={"error": str(exc)[:200]})
            await asyncio.sleep(LISTEN_RECONNECT_DELAY)
