"""Outside dataset events, written in batches: the reports that arrive while a replica's previous
write commits go into its next write, one transaction for all of them (a group commit), in two
statements whatever their number (the events with their queue upserts, then the audit rows).

Why: every event of a URI upserts the same queue rows (one per consuming DAG), and a row lock is
held until commit, so one transaction per report made a burst of one URI a line of commits —
about 70 a second on a 2-core host with durable commits — each waiting request holding a pooled
connection, so the replica's other requests waited for connections too. Batched, a burst costs
one connection and one commit per batch, and a quiet replica still writes a lone report at once
(a batch of one: no timer, no added latency).

A request may carry a list of events (the list form of the endpoint): they go into one batch
together, never split, so they are kept all or none. Each event still commits with its own audit
row before its request is answered 201; a report is
answered only after the transaction holding it committed. If that transaction fails, every
request in the batch gets the same error (a deadlock: the endpoint runs each handler again, as
for any write; the database down: 503) and nothing of the batch was kept. Without a background
task: the first request to find no write under way writes everything pending (up to
:data:`MAX_BATCH`), the others wait for their answer or for their turn (``asyncio.Lock`` is FIFO).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.requests import Request

from leoflow.api.audit import entry_for
from leoflow.clock import SystemClock
from leoflow.db.connection.api_pool import PooledDatabase
from leoflow.db.stores import audit as audit_store
from leoflow.db.stores.datasets.events import ApiEvent, record_api_events
from leoflow.errors import DatabaseUnavailable

#: Events one transaction writes at most (a request's events are never split, so a batch holds
#: this many or one request's list): 2,000 events with their audit rows are two statements of a
#: few tens of milliseconds, the wait of the report that arrived first in a full batch.
MAX_BATCH = 2_000


@dataclass
class _Pending:
    request: Request
    events: list[ApiEvent]
    answer: asyncio.Future[list[int]]


def _take(pending: list[_Pending]) -> tuple[list[_Pending], list[_Pending]]:
    """The reports of the next batch (the oldest first, at least one) and those left."""
    size = 0
    for i, report in enumerate(pending):
        size += len(report.events)
        if size > MAX_BATCH and i:
            return pending[:i], pending[i:]
    return pending, []


class EventBatches:
    """One replica's writer of outside dataset events (see the module docstring)."""

    def __init__(self, db: PooledDatabase) -> None:
        self._db = db
        self._pending: list[_Pending] = []
        self._lock = asyncio.Lock()

    async def record(self, request: Request, events: list[ApiEvent]) -> list[int]:
        """Record ``events`` (validated; one request's, all or none) with an audit row each; per
        event, the DAGs it was queued for."""
        mine = _Pending(request, events, asyncio.get_running_loop().create_future())
        self._pending.append(mine)
        async with self._lock:
            while not mine.answer.done():  # more than a batch waiting: the earlier ones go first
                batch, self._pending = _take(self._pending)
                await self._write(batch)
        return mine.answer.result()

    async def _write(self, batch: list[_Pending]) -> None:
        events = [event for pending in batch for event in pending.events]
        try:
            async with self._db.transaction() as conn:
                queued = await record_api_events(conn, events, SystemClock().now())
                answers = []
                audited = []
                for pending in batch:
                    counts, queued = queued[:len(pending.events)], queued[len(pending.events):]
                    answers.append(counts)
                    entry = entry_for(pending.request, 201, {})
                    if entry is not None:
                        audited.append((entry, [{"uri": event.uri[:200], "queued_for": count}
                                                for event, count in zip(pending.events, counts, strict=True)]))
                await audit_store.record_many(conn, audited)
        except BaseException as exc:
            # The others' answer is this failure; a cancelled writer (its client went away) is not
            # theirs to inherit, so they hear the batch was not written and may send it again.
            failure = exc if isinstance(exc, Exception) else DatabaseUnavailable(
                "dataset event not recorded: its batch was cancelled; send it again")
            for pending in batch:
                if not pending.answer.done():
                    pending.answer.set_exception(failure)
            raise
        for pending, counts in zip(batch, answers, strict=True):
            pending.request.state.audited = True
            pending.answer.set_result(counts)


def event_batches(request: Request, db: PooledDatabase) -> EventBatches:
    """The app's writer, made on first use (in the event loop that serves the app)."""
    batches: EventBatches | None = getattr(request.app.state, "dataset_event_batches", None)
    if batches is None:
        batches = EventBatches(db)
        request.app.state.dataset_event_batches = batches
    return batches
