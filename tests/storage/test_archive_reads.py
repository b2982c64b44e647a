"""The archive's read path does work in proportion to the range asked for, not to the log's size.

The first byte of the last 64 KiB of a 1 GB log is a target (< 200 ms on a loaded host), so what
a tail read costs is pinned in rows and bytes, which do not depend on the host's load: the index
finds the chunk holding the tail in one step whatever the number of chunks before it, and the try
is read without the stored tail in PostgreSQL (up to ``LEOFLOW_TASK_LOG_MAX_BYTES``).
"""

from __future__ import annotations

import json
import random
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.stores import task_logs as log_store
from leoflow.db.stores.log_archive import index as archive_store
from leoflow.settings import Settings
from tests.executor.world import run_with_term, seed_tries

CHUNKS = 3000
SIZE = 1024  # raw bytes per indexed chunk (only the index is read here)


async def index_chunks(engine: AsyncEngine, task_try_id: int, n: int) -> None:
    """``n`` contiguous chunks of ``SIZE`` bytes in the index (objects are not needed to read the index)."""
    async with engine.begin() as conn:
        await archive_store.open_log(conn, task_try_id, "task")
        await conn.execute(text(
            "INSERT INTO log_archive_chunks "
            "(task_try_id, container, start_offset, end_offset, stored_bytes, object_key) "
            "SELECT :id, 'task', g * :size, (g + 1) * :size, 10, 'k' || g FROM generate_series(0, :n - 1) g"),
            {"id": task_try_id, "size": SIZE, "n": n})
        await conn.execute(text("UPDATE log_archives SET size_bytes = :end, chunks = :n WHERE task_try_id = :id"),
                           {"id": task_try_id, "end": n * SIZE, "n": n})
        await conn.execute(text("ANALYZE log_archive_chunks"))


def _removed(plan: dict[str, Any]) -> int:
    """Rows every node of an EXPLAIN ANALYZE plan read and threw away."""
    return (int(plan.get("Rows Removed by Filter", 0)) + int(plan.get("Rows Removed by Index Recheck", 0))
            + sum(_removed(child) for child in plan.get("Plans", [])))


def test_the_chunk_holding_the_tail_is_found_without_reading_the_rows_before_it(settings: Settings) -> None:
    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        await index_chunks(engine, t.task_try_id, CHUNKS)
        size = CHUNKS * SIZE
        start = size - 65536
        async with engine.connect() as conn:
            params = {"id": t.task_try_id, "container": "task", "start": start, "end": size, "limit": 1}
            [[explained]] = (await conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + archive_store._CHUNKS.text),
                                                params)).all()
            plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
            # The unbounded query (filter on end_offset while walking start_offset up) threw away
            # every earlier chunk's row: 2,936 here, 1,000 per GB of log at 1 MiB chunks.
            assert _removed(plan) <= 2, json.dumps(plan)[:2000]
            [first] = await archive_store.chunks_between(conn, t.task_try_id, "task", start, size, limit=1)
            assert first.start == start // SIZE * SIZE and first.end == first.start + SIZE

            # The bound never loses a chunk: every range answers exactly the chunks that overlap it.
            rng = random.Random(42)
            for _ in range(200):
                a = rng.randrange(0, size + 10)
                b = rng.randrange(a, size + 2 * SIZE) + 1
                got = await archive_store.chunks_between(conn, t.task_try_id, "task", a, b, limit=10_000)
                want = [(s, s + SIZE) for s in range(0, size, SIZE) if s + SIZE > a and s < b]
                assert [(c.start, c.end) for c in got] == want, (a, b)

    run_with_term(settings, body, pool_size=2)


def test_reading_the_archive_leaves_the_stored_tail_in_the_database(settings: Settings) -> None:
    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        tail = "x" * 1_000_000
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO task_logs (task_try_id, content, truncated, size_bytes) "
                                    "VALUES (:id, :c, true, :n)"), {"id": t.task_try_id, "c": tail, "n": len(tail)})
            ti = {"id": (await conn.execute(text("SELECT task_instance_id FROM task_tries WHERE id = :id"),
                                            {"id": t.task_try_id})).scalar_one(),
                  "tries": [{"try_number": 1, "state": "queued"}]}
            light = await log_store.get_task_log(conn, ti, None, content=False)
            full = await log_store.get_task_log(conn, ti, None)
        assert light is not None and full is not None
        assert light["content"] is None and full["content"] == tail
        assert {k: v for k, v in light.items() if k != "content"} == {k: v for k, v in full.items() if k != "content"}
        assert light["task_try_id"] == t.task_try_id and light["truncated"] is True

    run_with_term(settings, body, pool_size=2)
