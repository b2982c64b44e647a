"""What leader-only services receive, and the shape they must have.

The elector (``leoflow.election``) only flips a toggle; the replica runtime starts every
:class:`LeaderService` when leadership is acquired and cancels them all, at once, when it is
lost. A service therefore must:

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

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.clock import Clock, SystemClock
from leoflow.settings import Settings


@dataclass
class LeaderContext:
    """One leadership term, as seen by the services that run during it."""

    term: int
    settings: Settings
    engine: AsyncEngine
    clock: Clock = field(default_factory=SystemClock)
    progress: Callable[[], None] = lambda: None

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
