"""The notification outbox: what the leader's deliverer claims and records, what the API lists.

Delivery is at-least-once and never holds a transaction across an HTTP call:

1. :func:`claim_due` (fenced, short): the due ``pending`` rows get ``attempts + 1`` and a
   *lease* — ``next_attempt_at`` moved past the longest a delivery can take — and are returned;
2. the deliverer posts them, outside any transaction;
3. :func:`record_outcomes` (fenced, short): ``delivered``, or the next attempt after a backoff,
   or ``failed`` once ``give_up_at`` has passed.

If the leader dies (or loses its term) between 1 and 3, the lease expires and the next leader
sends the row again: a receiver may see a delivery twice, and can tell by the
``X-Leoflow-Delivery`` header (the row id). Secrets are never stored (see
:class:`~leoflow.db.tables.Notification`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.errors import Conflict, NotFound


@dataclass(frozen=True)
class Claimed:
    id: int
    dag_id: str
    event: str
    target: str
    webhook: dict[str, Any]
    payload: dict[str, Any]
    attempts: int
    give_up_at: datetime


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to: ``next_attempt_at`` None means delivered (or given up when failed)."""

    id: int
    delivered: bool
    status: int | None
    error: str | None
    next_attempt_at: datetime | None


async def claim_due(conn: AsyncConnection, now: datetime, lease_until: datetime, limit: int) -> list[Claimed]:
    """Due pending rows, oldest first, leased until ``lease_until`` (see the module docstring)."""
    rows = await conn.execute(text("""
        WITH due AS (
            SELECT id FROM notifications
            WHERE state = 'pending' AND next_attempt_at <= :now
            ORDER BY next_attempt_at, id LIMIT :limit
            FOR UPDATE SKIP LOCKED
        )
        UPDATE notifications n SET attempts = n.attempts + 1, last_attempt_at = :now, next_attempt_at = :lease
        FROM due WHERE n.id = due.id
        RETURNING n.id, n.dag_id, n.event, n.target, n.webhook, n.payload, n.attempts, n.give_up_at
    """), {"now": now, "lease": lease_until, "limit": limit})
    return sorted((Claimed(**r._mapping) for r in rows), key=lambda c: c.id)


async def record_outcomes(conn: AsyncConnection, outcomes: Sequence[Outcome], now: datetime) -> None:
    if not outcomes:
        return
    await conn.execute(text("""
        UPDATE notifications SET
            state = CASE WHEN :delivered THEN 'delivered'
                         WHEN CAST(:next_at AS timestamptz) IS NULL THEN 'failed' ELSE 'pending' END,
            delivered_at = CASE WHEN :delivered THEN :now ELSE NULL END,
            next_attempt_at = coalesce(CAST(:next_at AS timestamptz), :now),
            last_status = :status, last_error = :error
        WHERE id = :id AND state = 'pending'
    """), [{"id": o.id, "delivered": o.delivered, "status": o.status, "error": o.error,
            "next_at": o.next_attempt_at, "now": now} for o in outcomes])


async def release_claims(conn: AsyncConnection, ids: Sequence[int], at: datetime) -> None:
    """Hand claimed rows back unsent (their destination is busy): due again ``at``, the attempt
    :func:`claim_due` counted taken back."""
    if not ids:
        return
    await conn.execute(text("""
        UPDATE notifications SET attempts = greatest(attempts - 1, 0), next_attempt_at = :at
        WHERE id = ANY(:ids) AND state = 'pending'
    """), {"ids": list(ids), "at": at})


# --------------------------------------------------------------------------- the API's side

_PUBLIC = """id, dag_id, run_id, task_id, try_number, event, target, state, attempts, next_attempt_at,
    last_attempt_at, last_status, last_error, created_at, delivered_at, give_up_at, payload,
    webhook->>'url' AS url"""


async def list_notifications(conn: AsyncConnection, *, dag_id: str | None, run_id: str | None, state: str | None,
                             before_id: int | None, limit: int) -> list[dict[str, Any]]:
    """Newest first, up to ``limit + 1`` older than ``before_id``; the default webhook's URL is never shown."""
    rows = await conn.execute(text(f"""
        SELECT {_PUBLIC} FROM notifications
        WHERE (CAST(:dag_id AS text) IS NULL OR dag_id = :dag_id)
          AND (CAST(:run_id AS text) IS NULL OR run_id = :run_id)
          AND (CAST(:state AS text) IS NULL OR state = :state)
          AND (CAST(:before AS bigint) IS NULL OR id < :before)
        ORDER BY id DESC LIMIT :limit
    """), {"dag_id": dag_id, "run_id": run_id, "state": state, "before": before_id, "limit": limit + 1})
    return [dict(r._mapping) for r in rows]


async def get_notification(conn: AsyncConnection, notification_id: int) -> dict[str, Any] | None:
    row = (await conn.execute(text(f"SELECT {_PUBLIC} FROM notifications WHERE id = :id"),
                              {"id": notification_id})).first()
    return dict(row._mapping) if row else None


async def retry_notification(conn: AsyncConnection, notification_id: int, give_up_at: datetime) -> None:
    """A failed (or waiting) delivery is due again now, with a new give-up time; Conflict once delivered."""
    row = (await conn.execute(text("SELECT state FROM notifications WHERE id = :id FOR UPDATE"),
                              {"id": notification_id})).first()
    if row is None:
        raise NotFound(f"notification {notification_id} not found")
    if row.state == "delivered":
        raise Conflict(f"notification {notification_id} was already delivered")
    await conn.execute(text("""
        UPDATE notifications SET state = 'pending', next_attempt_at = now(), give_up_at = :give_up_at
        WHERE id = :id
    """), {"id": notification_id, "give_up_at": give_up_at})

