"""Outside dataset events, written in batches: the reports that arrive while a replica's previous
write commits go into its next write, one transaction for all of them (a group commit).

Why: every event of a URI upserts the same queue rows (one per consuming DAG), and a row lock is
held until commit, so one transaction per report made a burst of one URI a line of commits —
about 70 a second on a 2-core host with durable commits — each waiting request holding a pooled
connection, so the replica's other requests waited for connections too. Batched, a burst costs
one connection and one commit per batch, and a quiet replica still writes a lone report at once
(a batch of one: no timer, no added latency).

Each report still commits with its audit row before its request is answered 201; a report is
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

#: Reports one transaction writes at most: 500 events with their audit rows take a few tens of
#: milliseconds to write, the wait of the report that arrived first in a full batch.
MAX_BATCH = 500


@dataclass
class _Pending:
    request: Request
    event: ApiEvent
    answer: asyncio.Future[int]


class EventBatches:
    """One replica's writer of outside dataset events (see the module docstring)."""

    def __init__(self, db: PooledDatabase) -> None:
        self._db = db
        self._pending: list[_Pending] = []
        self._lock = asyncio.Lock()

    async def record(self, request: Request, event: ApiEvent) -> int:
        """Record ``event`` (validated) with its audit row; the DAGs it was queued for."""
        mine = _Pending(request, event, asyncio.get_running_loop().create_future())
        self._pending.append(mine)
        async with self._lock:
            while not mine.answer.done():  # more than a batch waiting: the earlier ones go first
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                await self._write(batch)
        return mine.answer.result()

    async def _write(self, batch: list[_Pending]) -> None:
        try:
            async with self._db.transaction() as conn:
                queued = await record_api_events(conn, [p.event for p in batch], SystemClock().now())
                for pending, count in zip(batch, queued, strict=True):
                    entry = entry_for(pending.request, 201, {"uri": pending.event.uri[:200], "queued_for": count})
                    if entry is not None:
                        await audit_store.record(conn, entry)
        except BaseException as exc:
            # The others' answer is this failure; a cancelled writer (its client went away) is not
            # theirs to inherit, so they hear the batch was not written and may send it again.
            failure = exc if isinstance(exc, Exception) else DatabaseUnavailable(
                "dataset event not recorded: its batch was cancelled; send it again")
            for pending in batch:
                if not pending.answer.done():
                    pending.answer.set_exception(failure)
            raise
        for pending, count in zip(batch, queued, strict=True):
            pending.request.state.audited = True
            pending.answer.set_result(count)


def event_batches(request: Request, db: PooledDatabase) -> EventBatches:
    """The app's writer, made on first use (in the event loop that serves the app)."""
    batches: EventBatches | None = getattr(request.app.state, "dataset_event_batches", None)
    if batches is None:
        batches = EventBatches(db)
        request.app.state.dataset_event_batches = batches
    return batches
