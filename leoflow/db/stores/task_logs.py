"""Shipped task logs (``task_logs``): a finished try's output, kept in the database.

A ``task_logs`` row and ``task_tries.logs_shipped_at`` say the try's output is safe (not fenced:
any replica may ship; a replica claims a try for a while, with ``FOR UPDATE SKIP LOCKED``, in a
transaction of its own — never one held while the log is read). Each try has its own attempt
count and next attempt time (``log_attempts``, ``log_next_attempt_at``, on the database's clock);
when the budget is spent, ``logs_unavailable`` says why, and the logs count as settled
(``logs_shipped_at``) so garbage collection proceeds. Stored output is never replaced by less of it.

Every function takes an ``AsyncConnection`` inside a transaction the caller owns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import null, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.stores.tries import TRY_COLUMNS, TRY_FROM, TryRecord, claimant_prefix, try_record
from leoflow.db.tables import TaskLog, TaskTry

# ``size_bytes`` is the try's whole output so far: it only grows. A store with less (an adopting
# executor that sees no file, a re-read of a shorter source) never replaces what is kept.
_STORE_LOG_SQL = """
    INSERT INTO task_logs (task_try_id, content, truncated, size_bytes)
    VALUES (:id, :content, :truncated, :size)
    ON CONFLICT (task_try_id) DO UPDATE
    SET content = EXCLUDED.content, truncated = EXCLUDED.truncated, size_bytes = EXCLUDED.size_bytes,
        updated_at = now()
    WHERE task_logs.size_bytes <= EXCLUDED.size_bytes
"""
_STORE_LOG = text(_STORE_LOG_SQL)
# The final store marks the logs shipped in the same statement (one round trip per finished try).
_STORE_FINAL_LOG = text(f"""
    WITH shipped AS (UPDATE task_tries SET logs_shipped_at = clock_timestamp() WHERE id = :id RETURNING id)
    {_STORE_LOG_SQL}
""")


def _log_params(task_try_id: int, content: str, truncated: bool, size_bytes: int) -> dict[str, object]:
    return {"id": task_try_id, "content": content.replace("\x00", ""), "truncated": truncated, "size": size_bytes}


async def store_partial_logs(conn: AsyncConnection, task_try_id: int, content: str, *, truncated: bool,
                             size_bytes: int) -> None:
    """Save the output so far of a try that is still running (logs not marked shipped).

    The API serves it with its "incomplete" note; :func:`store_logs` replaces it when the try
    ends and marks the logs complete.
    """
    await conn.execute(_STORE_LOG, _log_params(task_try_id, content, truncated, size_bytes))


async def store_logs(conn: AsyncConnection, task_try_id: int, content: str, *, truncated: bool,
                     size_bytes: int) -> None:
    """Save a try's (already size-capped) final output and mark its logs shipped, in one statement.

    If more of the output is stored already, that is kept (and marked complete).
    """
    await conn.execute(_STORE_FINAL_LOG, _log_params(task_try_id, content, truncated, size_bytes))


_UNAVAILABLE = text("""
    UPDATE task_tries SET logs_unavailable = :reason, logs_shipped_at = coalesce(logs_shipped_at, clock_timestamp())
    WHERE id = :id
""")


async def mark_logs_unavailable(conn: AsyncConnection, task_try_id: int, reason: str) -> None:
    """Final: the try's output cannot be collected, for ``reason``; whatever was stored stays.

    The logs count as settled (``logs_shipped_at``), so garbage collection may delete the pod.
    """
    await conn.execute(_UNAVAILABLE, {"id": task_try_id, "reason": reason[:1000]})


_LOGS = text("SELECT content FROM task_logs WHERE task_try_id = :id")


async def stored_logs(conn: AsyncConnection, task_try_id: int) -> str | None:
    return (await conn.execute(_LOGS, {"id": task_try_id})).scalar()


@dataclass(frozen=True)
class ShippingClaim:
    """A finished try whose logs this replica may ship now (its ``attempt``-th try, from 1)."""

    record: TryRecord
    attempt: int


_CLAIM_UNSHIPPED = text(f"""
    WITH due AS (
        SELECT tt.id FROM task_tries tt
        WHERE tt.ended_at IS NOT NULL AND tt.logs_shipped_at IS NULL AND tt.executor_ref IS NOT NULL
          AND tt.resource_deleted_at IS NULL AND left(tt.claimed_by, length(:prefix)) = :prefix
          AND (tt.log_next_attempt_at IS NULL OR tt.log_next_attempt_at <= now())
        ORDER BY tt.log_attempts, tt.ended_at
        LIMIT :limit
        FOR UPDATE OF tt SKIP LOCKED
    ), claimed AS (
        UPDATE task_tries tt
        SET log_attempts = tt.log_attempts + 1,
            log_next_attempt_at = now() + make_interval(secs => :claim_for)
        FROM due WHERE tt.id = due.id
        RETURNING tt.id, tt.log_attempts
    )
    SELECT {TRY_COLUMNS}, claimed.log_attempts {TRY_FROM} JOIN claimed ON claimed.id = tt.id
    ORDER BY claimed.log_attempts, tt.ended_at
""")


async def claim_unshipped(conn: AsyncConnection, cluster: str, *, limit: int,
                          claim_for: float) -> list[ShippingClaim]:
    """Claim up to ``limit`` finished tries of ``cluster`` whose logs are due, for ``claim_for`` seconds.

    Commit at once, then read the logs: the claim (the next attempt time pushed ahead, the
    attempt counted) keeps other replicas off the try without a transaction held open across the
    read; if this replica dies, the try is due again when the claim expires. Tries another
    replica is claiming right now are skipped (``SKIP LOCKED``), tries backing off are not due,
    and tries never attempted come first (failing ones cannot crowd out the rest).
    """
    rows = await conn.execute(_CLAIM_UNSHIPPED, {"prefix": claimant_prefix(cluster), "limit": limit,
                                                 "claim_for": claim_for})
    return [ShippingClaim(try_record(r), int(r._mapping["log_attempts"])) for r in rows]


_RETRY_SHIPPING = text("""
    UPDATE task_tries SET log_next_attempt_at = now() + make_interval(secs => :delay)
    WHERE id = :id AND logs_shipped_at IS NULL
""")


async def retry_shipping_later(conn: AsyncConnection, task_try_id: int, *, delay: float) -> None:
    """This attempt failed for a reason that may pass: the try is due again in ``delay`` s (database clock)."""
    await conn.execute(_RETRY_SHIPPING, {"id": task_try_id, "delay": delay})


_tries = TaskTry.__table__
_logs = TaskLog.__table__
_LOG_KEYS = ("task_try_id", "try_number", "state", "ended_at", "logs_shipped_at", "executor_ref", "logs_unavailable",
             "content", "truncated", "size_bytes", "log_updated_at")


async def get_task_log(conn: AsyncConnection, ti: Mapping[str, Any], try_number: int | None, *,
                       content: bool = True) -> dict[str, Any] | None:
    """One try of ``ti`` (a task instance as :func:`get_task_instance` returns it, tries included;
    the newest when ``try_number`` is None) with its stored log, if any.

    ``content=False`` leaves the stored tail out (``content`` is None): a read of the archive needs
    only the try, and the tail is up to ``LEOFLOW_TASK_LOG_MAX_BYTES`` the database would otherwise
    detoast and send for nothing.

    A queued try whose row is not written yet (ADR 0013) is among ``ti``'s tries already: it is
    answered from there, with nothing stored, without asking the database again.
    """
    shown = [t for t in ti["tries"] if try_number in (None, t["try_number"])]
    if not shown:
        return None
    wanted = shown[-1]
    query = (select(_tries.c.id.label("task_try_id"), _tries.c.try_number, _tries.c.state, _tries.c.ended_at,
                    _tries.c.logs_shipped_at,
                    _tries.c.executor_ref,
                    _tries.c.logs_unavailable, _logs.c.content if content else null().label("content"),
                    _logs.c.truncated, _logs.c.size_bytes,
                    _logs.c.updated_at.label("log_updated_at"))
             .select_from(_tries.outerjoin(_logs, _logs.c.task_try_id == _tries.c.id))
             .where(_tries.c.task_instance_id == ti["id"], _tries.c.try_number == wanted["try_number"]))
    row = (await conn.execute(query)).first()
    if row is not None:
        return dict(row._mapping)
    return {k: wanted.get(k) for k in _LOG_KEYS} if wanted["state"] == "queued" else None
