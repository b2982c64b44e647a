"""What leader-only services receive, and the shape they must have.

The elector (``leoflow.election``) only flips a toggle; the supervisor it drives starts every
:class:`LeaderService` that the composition root (:mod:`leoflow.replica`) handed it when
leadership is acquired, and cancels them all, at once, when it is lost. A service therefore
must:

- run until cancelled, doing its work under ``ctx.term`` (every write fenced, see
  :mod:`leoflow.db.connection.fencing`), and stop on :class:`~leoflow.errors.FencedOut`;
- call ``ctx.progress()`` after each unit of work if it is watched for stalls (the scheduler
  loop is: no progress for ``LEOFLOW_SCHEDULER_STALL_TIMEOUT`` releases leadership);
- never swallow ``asyncio.CancelledError``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from leoflow.clock import Clock, SystemClock
from leoflow.db.connection.database import Database
from leoflow.errors import DatabaseError, FencedOut
from leoflow.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class RunBacklog:
    """Whether runs are waiting to be created or started, as the scheduler loop last saw them.

    Why: at a boundary where thousands of DAGs fall due, every run is created, started and (empty)
    ended within seconds, and the leader's other services share its event loop and cores. The
    outcome observer's bookkeeping of those endings — ~0.6 s of Python and ~0.45 s of database
    time per 10,000 runs — waits while this is set (:mod:`leoflow.notify.observer`, bounded), so
    it runs after the burst instead of slowing every step of it. Only the scheduler writes it.
    """

    waiting: bool = False


@dataclass
class LeaderContext:
    """One leadership term, as seen by the services that run during it."""

    term: int
    settings: Settings
    #: The background share of the replica's connection budget (leoflow.db.connection.budget).
    db: Database
    clock: Clock = field(default_factory=SystemClock)
    progress: Callable[[], None] = lambda: None
    #: Give up this term (the supervisor steps down): for a component of the term that can no
    #: longer do its job, e.g. an executor whose watch loop died.
    fail: Callable[[str], None] = lambda reason: None
    #: Runs waiting to be created or started (set by the scheduler loop, read by bookkeeping services).
    runs: RunBacklog = field(default_factory=RunBacklog)

    @property
    def cluster(self) -> str:
        return self.settings.cluster.name

    @property
    def node_id(self) -> str:
        return self.settings.cluster.node_id


class LeaderService(Protocol):
    """A leader-only singleton (scheduler loop, executor watch, pod GC, ...)."""

    name: str

    async def run(self, ctx: LeaderContext) -> None:
        """Do the work until cancelled; return only on an unrecoverable condition."""
        ...


#: Longest pause between retries of a periodic leader service whose step keeps failing.
MAX_STEP_BACKOFF = 30.0


async def run_periodically(ctx: LeaderContext, name: str, step: Callable[[LeaderContext], Awaitable[bool]], *,
                           interval: float) -> None:
    """Run ``step`` until cancelled: again at once while it reports more work, else after ``interval``.

    For leader services that are not the scheduler (backfills, notifications). A
    :class:`~leoflow.errors.FencedOut` ends the service (a newer term exists: it must not write
    again); a :class:`~leoflow.errors.DatabaseError` fails one step, logged, retried after a
    growing pause (capped at :data:`MAX_STEP_BACKOFF`). Any other exception is a bug of the
    service: it is logged with its traceback and retried the same way — never allowed to end the
    service, because a service that dies gives up the term, and the next leader would hit the
    same bug: one broken notification must not stop scheduling.
    """
    failures = 0
    while True:
        try:
            busy = await step(ctx)
        except FencedOut:
            log.info("leader service stops: fenced out", extra={"service": name, "term": ctx.term})
            return
        except DatabaseError as exc:
            failures += 1
            log.warning("leader service step failed; retrying", extra={
                "service": name, "error": str(exc)[:300], "failures": failures})
            await asyncio.sleep(min(MAX_STEP_BACKOFF, interval * 2 ** min(failures, 8)))
            continue
        except Exception:  # boundary: a bug in this service must not cost the term (see the docstring)
            failures += 1
            log.exception("leader service step raised; retrying", extra={"service": name, "failures": failures})
            await asyncio.sleep(min(MAX_STEP_BACKOFF, interval * 2 ** min(failures, 8)))
            continue
        failures = 0
        await asyncio.sleep(0 if busy else interval)
