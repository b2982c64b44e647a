"""Pools as users see and change them: the API's statements for ``/api/v2/pools``.

A pool document (``pool_document``) says what a pool is and how it is used right now:
``slots`` (the default pool's is LEOFLOW_PARALLELISM, passed by the caller), the task instances
holding its slots (``queued_slots``, ``running_slots``, ``occupied_slots``; ``open_slots`` is what
is left, never below 0 — a pool shrunk below its use drains as tries end), and ``waiting_tasks``,
the ready tasks waiting for a slot, counted up to :data:`WAITING_COUNT_CAP` (the count must not
cost as much as a backlog of a million). A pool that tasks name but that does not exist is
listed too, with 0 slots and ``missing: true``: that is why those tasks wait.

Changes NOTIFY the leader (:func:`leoflow.db.connection.wakeup.notify_wakeup`), so a new or bigger pool is
filled on its next tick rather than its next interval. The statements take the caller's
transaction; a duplicate name raises :class:`~leoflow.errors.Conflict` (the primary key decides,
so two racing creates cannot both win).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.connection.wakeup import notify_wakeup
from leoflow.db.fragments import SLOT_TASKS_SQL
from leoflow.errors import Conflict
from leoflow.model.spec.fairness import DEFAULT_POOL, MAX_POOLS

#: ``waiting_tasks`` is exact up to this many; the value itself means "at least".
WAITING_COUNT_CAP = 100_000

_READY = "state = 'pending' AND pending_upstreams = 0"

_POOLS = f"""
    WITH RECURSIVE named(name) AS (  -- the distinct pools ready tasks name: a loose index scan
        (SELECT pool FROM task_instances WHERE {_READY} AND pool IS NOT NULL ORDER BY pool LIMIT 1)
        UNION ALL
        SELECT (SELECT t.pool FROM task_instances t WHERE t.{_READY.replace(" AND ", " AND t.")}
                AND t.pool > named.name ORDER BY t.pool LIMIT 1)
        FROM named WHERE named.name IS NOT NULL
    ), pool AS (
        SELECT name, slots, description, created_at, updated_at, false AS builtin, false AS missing FROM pools
        UNION ALL
        SELECT :default_pool, :parallelism, 'Tasks that name no pool (LEOFLOW_PARALLELISM)', NULL, NULL, true, false
        UNION ALL
        SELECT named.name, 0, NULL, NULL, NULL, false, true FROM named
        WHERE named.name IS NOT NULL AND named.name <> :default_pool
          AND NOT EXISTS (SELECT 1 FROM pools WHERE pools.name = named.name)
    ), used AS (
        SELECT coalesce(pool, :default_pool) AS name, count(*) FILTER (WHERE state = 'queued') AS queued,
               count(*) FILTER (WHERE state = 'running') AS running
        FROM task_instances WHERE state IN {SLOT_TASKS_SQL} GROUP BY 1
    )
    SELECT pool.*, coalesce(used.queued, 0) AS queued, coalesce(used.running, 0) AS running,
           (SELECT count(*) FROM (SELECT 1 FROM task_instances t WHERE t.pool = pool.name
                                  AND t.{_READY.replace(" AND ", " AND t.")} LIMIT {WAITING_COUNT_CAP}) w) AS waiting
    FROM pool LEFT JOIN used ON used.name = pool.name
    WHERE CAST(:only AS text) IS NULL OR pool.name = CAST(:only AS text)
    ORDER BY pool.builtin DESC, pool.name
"""


def pool_document(row: Any) -> dict[str, Any]:
    occupied = int(row.queued) + int(row.running)
    return {
        "name": row.name, "slots": int(row.slots), "description": row.description, "builtin": bool(row.builtin),
        "missing": bool(row.missing), "occupied_slots": occupied, "queued_slots": int(row.queued),
        "running_slots": int(row.running), "open_slots": max(0, int(row.slots) - occupied),
        "waiting_tasks": int(row.waiting), "created_at": _iso(row.created_at), "updated_at": _iso(row.updated_at),
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


async def list_pools(conn: AsyncConnection, *, parallelism: int, name: str | None = None) -> list[dict[str, Any]]:
    """Every pool (the default first, then by name), or only ``name``; see the module docstring."""
    rows = await conn.execute(text(_POOLS), {"default_pool": DEFAULT_POOL, "parallelism": parallelism,
                                             "only": name})
    return [pool_document(r) for r in rows]


async def create_pool(conn: AsyncConnection, name: str, slots: int, description: str | None,
                      now: datetime) -> None:
    """A new named pool; Conflict if the name is taken or :data:`MAX_POOLS` exist."""
    await conn.execute(text("LOCK TABLE pools IN SHARE ROW EXCLUSIVE MODE"))  # the count below holds
    count = int((await conn.execute(text("SELECT count(*) FROM pools"))).scalar_one())
    if count >= MAX_POOLS:
        raise Conflict(f"there are already {count} pools; at most {MAX_POOLS} may exist")
    created = (await conn.execute(text("""
        INSERT INTO pools (name, slots, description, created_at, updated_at)
        VALUES (:name, :slots, :description, :now, :now)
        ON CONFLICT (name) DO NOTHING RETURNING name
    """), {"name": name, "slots": slots, "description": description, "now": now})).first()
    if created is None:
        raise Conflict(f"pool {name!r} already exists (resize it with PATCH)")
    await notify_wakeup(conn, f"pool:{name}")


async def update_pool(conn: AsyncConnection, name: str, *, slots: int | None, description: str | None,
                      sets_description: bool, now: datetime) -> bool:
    """Resize (and/or describe) a named pool; False if it does not exist."""
    found = (await conn.execute(text("""
        UPDATE pools SET slots = coalesce(:slots, slots),
               description = CASE WHEN :sets_description THEN :description ELSE description END,
               updated_at = :now
        WHERE name = :name RETURNING name
    """), {"name": name, "slots": slots, "description": description, "sets_description": sets_description,
           "now": now})).first()
    if found is not None:
        await notify_wakeup(conn, f"pool:{name}")
    return found is not None


async def delete_pool(conn: AsyncConnection, name: str) -> bool:
    """Delete a named pool; False if it does not exist. Its tasks wait until a pool of that name exists."""
    found = (await conn.execute(text("DELETE FROM pools WHERE name = :name RETURNING name"), {"name": name})).first()
    return found is not None
