"""The Kubernetes events of a try's pod (``pod_events``), kept with the try and shown beside its log.

One row per Event object (its ``metadata.uid``): the API server folds a repeated event into one
object whose ``count`` and ``lastTimestamp`` grow, and the row follows it (an older copy of the
object, seen again by a new leader's list, never lowers them). A try keeps at most
:data:`~leoflow.model.limits.POD_EVENTS` distinct events — a pod in a back-off loop repeats a
few events, counted up, rather than making new ones — so a later new event past the bound is
dropped, never an earlier one: the first events say why a pod never started.

Not fenced: events are observations, written by the leader that watches them; an ex-leader's
late write of the same event is the same row. Every function takes an ``AsyncConnection`` inside
a transaction the caller owns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.model.limits import POD_EVENTS


@dataclass(frozen=True)
class PodEventRow:
    """One kept event (already cut to the limits by its reader)."""

    task_try_id: int
    uid: str
    type: str
    reason: str
    message: str
    container: str | None
    count: int
    first_seen: datetime
    last_seen: datetime


# A new event is kept only while its try has fewer than the bound; a known one is always updated.
_RECORD = text("""
    INSERT INTO pod_events (task_try_id, uid, type, reason, message, container, count, first_seen, last_seen)
    SELECT CAST(:task_try_id AS bigint), CAST(:uid AS varchar), CAST(:type AS varchar), CAST(:reason AS varchar),
           CAST(:message AS text), CAST(:container AS varchar), CAST(:count AS integer),
           CAST(:first_seen AS timestamptz), CAST(:last_seen AS timestamptz)
    WHERE EXISTS (SELECT 1 FROM task_tries WHERE id = CAST(:task_try_id AS bigint))
      AND (EXISTS (SELECT 1 FROM pod_events WHERE task_try_id = CAST(:task_try_id AS bigint)
                   AND uid = CAST(:uid AS varchar))
           OR (SELECT count(*) FROM pod_events WHERE task_try_id = CAST(:task_try_id AS bigint))
              < CAST(:cap AS integer))
    ON CONFLICT (task_try_id, uid) DO UPDATE
    SET count = GREATEST(pod_events.count, EXCLUDED.count),
        last_seen = GREATEST(pod_events.last_seen, EXCLUDED.last_seen),
        message = CASE WHEN EXCLUDED.last_seen >= pod_events.last_seen THEN EXCLUDED.message
                       ELSE pod_events.message END
""")


async def record_events(conn: AsyncConnection, rows: Sequence[PodEventRow]) -> None:
    """Insert or update ``rows`` (a try gone meanwhile — purged by retention — is skipped)."""
    if not rows:
        return
    await conn.execute(_RECORD, [{
        "task_try_id": r.task_try_id, "uid": r.uid, "type": r.type, "reason": r.reason,
        "message": r.message.replace("\x00", ""), "container": r.container, "count": r.count,
        "first_seen": r.first_seen, "last_seen": r.last_seen, "cap": POD_EVENTS.maximum} for r in rows])


async def events_of_try(conn: AsyncConnection, task_try_id: int) -> list[PodEventRow]:
    """The try's kept events, oldest first."""
    result = await conn.execute(text("""
        SELECT task_try_id, uid, type, reason, message, container, count, first_seen, last_seen
        FROM pod_events WHERE task_try_id = :id ORDER BY first_seen, last_seen, uid
    """), {"id": task_try_id})
    return [PodEventRow(*row) for row in result.all()]
