"""The executor interface the scheduler talks to.

An executor runs only on the leader, under its fencing term. It is handed task tries to launch
and reports what happens to them; it never decides task states itself — the scheduler applies
each :class:`StatusUpdate` with a compare-and-set under the term.

Contract (checked by ``tests/executor/test_contract.py`` against every implementation):

- ``submit`` is idempotent per :class:`TryKey`: submitting the same try twice runs it once
  (Kubernetes: deterministic pod name, 409 → adopt; local: a claim row in the database).
- ``start`` reconciles with the outside world *before* anything is submitted (a new leader
  adopts the pods/processes of tries it knows and reports their state; it never re-creates them).
- Status updates are delivered through the ``report`` callback given to ``start``, at least once
  per transition; duplicates are harmless (the scheduler's CAS makes them no-ops).
- ``cancel`` stops the try's pod/process and returns only once it is gone (forcing it after
  ``LEOFLOW_KILL_GRACE``), or raises: the scheduler then records the try cancelled and lets a
  cleared task run again (ADR 0015). Cancelling an unknown or finished try is a no-op.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from leoflow.db.connection.database import Database
from leoflow.leadership import LeaderContext
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey
from leoflow.settings import Settings

Report = Callable[[StatusUpdate], Awaitable[None]]


class Executor(Protocol):
    name: str

    async def start(self, ctx: LeaderContext, report: Report) -> None:
        """Reconcile with the outside world, then begin reporting; called once per term."""
        ...

    async def submit(self, launch: TaskLaunch) -> None:
        """Launch a try (idempotent). Raises nothing for the task's own failure: that is reported."""
        ...

    async def cancel(self, key: TryKey) -> None:
        ...

    async def logs(self, key: TryKey) -> str | None:
        """Live logs of a running try, if the executor can fetch them."""
        ...

    async def stop(self) -> None:
        """Stop reporting and release resources (running tries keep running)."""
        ...


class ReplicaService(Protocol):
    """Like a LeaderService, but runs on every replica (e.g. the pod log shipper).

    Must run until cancelled, never swallow ``asyncio.CancelledError``, and coordinate with the
    other replicas through the database (e.g. ``FOR UPDATE SKIP LOCKED``), never by assumption.
    """

    name: str

    async def run(self, settings: Settings, db: Database) -> None:
        ...
