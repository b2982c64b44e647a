"""The log archive's index (``log_archives``, ``log_archive_chunks``): which objects make up a log.

The objects live in object storage (:mod:`leoflow.storage`); PostgreSQL says which of them make
up a container's log. The rules that make the archive exactly-once under failover:

- an object is written first, its row second: a row never points at an object that is not all
  there (an object store's ``PUT`` is atomic);
- a chunk is indexed only if it starts exactly where the archive ends (:func:`append_chunk` is
  one compare-and-set statement), so two writers — a leader killed mid-upload and its successor,
  or a zombie — never leave a gap or a duplicate: the loser's row is refused and it re-reads
  where the archive ends;
- an object's name is its container's byte offset (:mod:`leoflow.storage.log_chunks`), and the
  output is append-only, so a name always holds the same bytes: an object written but never
  indexed is overwritten by the same content, never taken for another range.

Every function takes an ``AsyncConnection`` inside a transaction the caller owns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass(frozen=True)
class ArchivedLog:
    """One container's archived log: how much is archived and whether that is all of it."""

    container: str
    size_bytes: int
    stored_bytes: int
    chunks: int
    complete: bool


@dataclass(frozen=True)
class Chunk:
    """One object: bytes ``[start, end)`` of the container's output."""

    start: int
    end: int
    object_key: str


_OPEN = text("""
    INSERT INTO log_archives (task_try_id, container) VALUES (:id, :container)
    ON CONFLICT (task_try_id, container) DO NOTHING
""")
_STATE = text("""
    SELECT container, size_bytes, stored_bytes, chunks, complete FROM log_archives
    WHERE task_try_id = :id AND container = :container
""")


async def open_log(conn: AsyncConnection, task_try_id: int, container: str) -> ArchivedLog:
    """The archive of ``container`` (created empty the first time): where the next chunk starts."""
    await conn.execute(_OPEN, {"id": task_try_id, "container": container})
    row = (await conn.execute(_STATE, {"id": task_try_id, "container": container})).one()
    return ArchivedLog(row.container, row.size_bytes, row.stored_bytes, row.chunks, row.complete)


_APPEND = text("""
    WITH advanced AS (
        UPDATE log_archives SET size_bytes = :end, stored_bytes = stored_bytes + :stored, chunks = chunks + 1,
                                updated_at = clock_timestamp()
        WHERE task_try_id = :id AND container = :container AND size_bytes = :start AND NOT complete
        RETURNING task_try_id
    )
    INSERT INTO log_archive_chunks (task_try_id, container, start_offset, end_offset, stored_bytes, object_key)
    SELECT :id, :container, :start, :end, :stored, :key FROM advanced
""")


async def append_chunk(conn: AsyncConnection, task_try_id: int, container: str, *, start: int, end: int,
                       stored_bytes: int, object_key: str) -> bool:
    """Index an object already written; False when the archive does not end at ``start`` (another
    writer got there first, or the log is complete): nothing is changed then."""
    result = await conn.execute(_APPEND, {"id": task_try_id, "container": container, "start": start, "end": end,
                                          "stored": stored_bytes, "key": object_key})
    return result.rowcount == 1


_COMPLETE = text("""
    UPDATE log_archives SET complete = true, updated_at = clock_timestamp()
    WHERE task_try_id = :id AND container = :container AND size_bytes = :size
""")


async def complete_log(conn: AsyncConnection, task_try_id: int, container: str, *, size_bytes: int) -> bool:
    """Mark the log complete if exactly ``size_bytes`` are archived (all the container wrote)."""
    result = await conn.execute(_COMPLETE, {"id": task_try_id, "container": container, "size": size_bytes})
    return result.rowcount == 1


@dataclass(frozen=True)
class WholeLog:
    """A log that ended before any of it was archived: its one object (None if it is empty)."""

    task_try_id: int
    container: str
    size_bytes: int
    stored_bytes: int
    object_key: str | None


#: Tries deleted meanwhile (retention) are left out rather than failing the others' rows.
_WHOLE = text("""
    WITH input AS (
        SELECT i.* FROM unnest(CAST(:ids AS bigint[]), CAST(:containers AS text[]), CAST(:sizes AS bigint[]),
                               CAST(:stored AS bigint[]), CAST(:keys AS text[])) AS i(id, container, size, stored, key)
        WHERE EXISTS (SELECT 1 FROM task_tries t WHERE t.id = i.id)
    ), opened AS (
        INSERT INTO log_archives (task_try_id, container, size_bytes, stored_bytes, chunks, complete)
        SELECT id, container, size, stored, CASE WHEN key IS NULL THEN 0 ELSE 1 END, true FROM input
        ON CONFLICT (task_try_id, container) DO NOTHING
        RETURNING task_try_id, container
    ), chunks AS (
        INSERT INTO log_archive_chunks (task_try_id, container, start_offset, end_offset, stored_bytes, object_key)
        SELECT i.id, i.container, 0, i.size, i.stored, i.key
        FROM input i JOIN opened o ON o.task_try_id = i.id AND o.container = i.container
        WHERE i.key IS NOT NULL
    )
    SELECT task_try_id, container FROM opened
""")


async def archive_whole_logs(conn: AsyncConnection, logs: Sequence[WholeLog]) -> set[tuple[int, str]]:
    """Index logs that ended before any of them was archived, each complete with its one object (or
    none), in one statement. Returns the (try, container) pairs indexed; a log whose archive another
    writer opened first (or whose try is gone) is left unchanged and absent, and its caller carries
    on from where that archive ends. At most one entry per (try, container)."""
    if not logs:
        return set()
    rows = await conn.execute(_WHOLE, {
        "ids": [log.task_try_id for log in logs], "containers": [log.container for log in logs],
        "sizes": [log.size_bytes for log in logs], "stored": [log.stored_bytes for log in logs],
        "keys": [log.object_key for log in logs]})
    return {(int(r.task_try_id), r.container) for r in rows}


_LOGS = text("""
    SELECT container, size_bytes, stored_bytes, chunks, complete FROM log_archives
    WHERE task_try_id = :id ORDER BY container
""")


async def archived_logs(conn: AsyncConnection, task_try_id: int) -> list[ArchivedLog]:
    """Every archived container log of a try."""
    rows = await conn.execute(_LOGS, {"id": task_try_id})
    return [ArchivedLog(r.container, r.size_bytes, r.stored_bytes, r.chunks, r.complete) for r in rows]


#: The chunk holding ``:start`` is the last one starting at or before it (chunks are contiguous), found
#: by one backward step on the primary key: without that bound, the scan for the tail of a 1 GB log
#: walked every earlier chunk's row to filter it out on ``end_offset``.
_CHUNKS = text("""
    SELECT start_offset, end_offset, object_key FROM log_archive_chunks
    WHERE task_try_id = :id AND container = :container AND end_offset > :start AND start_offset < :end
      AND start_offset >= COALESCE((SELECT max(start_offset) FROM log_archive_chunks
                                    WHERE task_try_id = :id AND container = :container AND start_offset <= :start), 0)
    ORDER BY start_offset LIMIT :limit
""")


async def chunks_between(conn: AsyncConnection, task_try_id: int, container: str, start: int, end: int, *,
                         limit: int = 10_000) -> list[Chunk]:
    """The objects holding bytes ``[start, end)`` of the log, in order (at most ``limit``)."""
    rows = await conn.execute(_CHUNKS, {"id": task_try_id, "container": container, "start": start, "end": end,
                                        "limit": limit})
    return [Chunk(r.start_offset, r.end_offset, r.object_key) for r in rows]
