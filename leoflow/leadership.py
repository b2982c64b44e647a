"""What leader-only services receive, and the shape they must have.

The elector (``leoflow.election``) only flips a toggle; the supervisor it drives starts every
:class:`LeaderService` that the composition root (:mod:`leoflow.replica`) handed it when
leadership is acquired, and cancels them all, at once, when it is lost. A service therefore
must:

- run until cancelled, doing its work under ``ctx.term`` (every write fenced, see
  :mod:`leoflow.db.fencing`), and stop on :class:`~leoflow.errors.FencedOut`;
- call ``ctx.progress()`` after each unit of work if it is watched for stalls (the scheduler
  loop is: no progress for ``LEOFLOW_SCHEDULER_STALL_TIMEOUT`` releases leadership);
- never swallow ``asyncio.CancelledError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from leoflow.clock import Clock, SystemClock
from leoflow.db.database import Database
from leoflow.settings import Settings


@dataclass
class LeaderContext:
    """One leadership term, as seen by the services that run during it."""

    term: int
    settings: Settings
    #: The background share of the replica's connection budget (leoflow.db.budget).
    db: Database
    clock: Clock = field(default_factory=SystemClock)
    progress: Callable[[], None] = lambda: None
    #: Give up this term (the supervisor steps down): for a component of the term that can no
    #: longer do its job, e.g. an executor whose watch loop died.
    fail: Callable[[str], None] = lambda reason: None

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
