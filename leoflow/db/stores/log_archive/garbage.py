"""Archived objects retention must delete from storage (``log_archive_garbage``).

Retention deletes a run's rows in one transaction; the objects of its archived logs cannot be
deleted in that transaction (storage is not PostgreSQL), and deleting them first would leave rows
pointing at nothing if the transaction then failed. So the transaction that deletes the rows
queues their object keys (:func:`queue_run_objects`), and a later step deletes the objects and
then forgets the keys (:func:`claim_garbage`, :func:`forget_garbage`): an object is deleted at
least once, never before its rows are gone. With ``LEOFLOW_LOG_ARCHIVE_RETENTION=lifecycle``
nothing is queued; the bucket's lifecycle rule deletes the objects.

Every function takes an ``AsyncConnection`` inside a transaction the caller owns.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

QUEUE_RUN_OBJECTS = text("""
    INSERT INTO log_archive_garbage (object_key)
    SELECT c.object_key FROM log_archive_chunks c
    JOIN task_tries tt ON tt.id = c.task_try_id JOIN task_instances ti ON ti.id = tt.task_instance_id
    WHERE ti.run_pk = ANY(:ids)
""")


async def queue_run_objects(conn: AsyncConnection, run_pks: Sequence[int]) -> int:
    """Queue the archived objects of these runs for deletion (their rows go with the runs)."""
    result = await conn.execute(QUEUE_RUN_OBJECTS, {"ids": list(run_pks)})
    return result.rowcount


_GARBAGE = text("SELECT id, object_key FROM log_archive_garbage ORDER BY id LIMIT :limit")


async def claim_garbage(conn: AsyncConnection, *, limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` objects to delete from storage, oldest first.

    Not locked: the caller deletes the objects with no transaction open, then forgets the keys;
    two leaders deleting the same object (a failover mid-batch) is harmless.
    """
    return [(r.id, r.object_key) for r in await conn.execute(_GARBAGE, {"limit": limit})]


async def forget_garbage(conn: AsyncConnection, ids: Sequence[int]) -> None:
    """The objects are deleted from storage: forget them."""
    await conn.execute(text("DELETE FROM log_archive_garbage WHERE id = ANY(:ids)"), {"ids": list(ids)})
