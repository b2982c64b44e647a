"""The log archiver (leoflow.executor.log_archive) against a real PostgreSQL, a real S3 server and a directory.

What is checked is what an on-call engineer needs a week later: the archived bytes equal what was
written, byte for byte (binary garbage and a line longer than a chunk included), the index has no
gap and no duplicate whatever two writers do, and a storage that refuses writes mid-stream costs a
retry, never the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tracemalloc
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores.log_archive import index as archive_store
from leoflow.executor.log_archive import LogArchiver
from leoflow.metrics.log_archive import ARCHIVE_FAILURES
from leoflow.settings import Settings
from leoflow.storage.log_chunks import CHUNK_BYTES, chunk_key, decompress
from leoflow.storage.objects import ObjectStore
from tests.executor.world import run_with_term, seed_tries
from tests.harness.s3_server import S3Server

CHUNK = 4096


def archiver(store: ObjectStore, engine: AsyncEngine, **options: float) -> LogArchiver:
    return LogArchiver(store, Database(engine), "default", chunk_bytes=CHUNK, retry_base=0.05, retry_cap=0.2,
                       poll_interval=0.02, **{"flush_interval": 0.1, **options})  # type: ignore[arg-type]


async def archived_bytes(store: ObjectStore, engine: AsyncEngine, task_try_id: int, container: str = "task") -> bytes:
    """The log as a reader gets it: the indexed objects, in order, decompressed — checked contiguous."""
    async with engine.connect() as conn:
        chunks = await archive_store.chunks_between(conn, task_try_id, container, 0, 2**62)
    at, parts = 0, []
    for chunk in chunks:
        assert chunk.start == at, f"gap or overlap at {at}: next chunk starts at {chunk.start}"
        data = decompress(await store.get(chunk.object_key))
        assert len(data) == chunk.end - chunk.start
        parts.append(data)
        at = chunk.end
    return b"".join(parts)


async def archive_ended(writer: LogArchiver, task_try_id: int, log: Path, *, archived: int | None = None) -> None:
    """Archive the ``task`` log of a try that has ended already, within 30 s."""
    ended = asyncio.Event()
    ended.set()
    await asyncio.wait_for(writer.follow_file(task_try_id, "task", log, ended, archived=archived), 30)


async def state(engine: AsyncEngine, task_try_id: int) -> archive_store.ArchivedLog:
    async with engine.begin() as conn:
        return await archive_store.open_log(conn, task_try_id, "task")


def test_a_growing_log_is_archived_while_written_and_completed_at_the_end(settings: Settings, archive_url: str,
                                                                          tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"")
    written = bytearray()

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(archive_url)
        ended = asyncio.Event()
        follower = asyncio.create_task(archiver(store, engine).follow_file(t.task_try_id, "task", log, ended))
        pieces = [b"first line\n", os.urandom(3000), b"x" * (CHUNK * 3 + 17) + b"\n",  # binary; a line of 3+ chunks
                  "ünïcödé, cut mid-character: ".encode() + "é".encode()[:1], b"\x00\xff last\n"]
        for piece in pieces:
            with log.open("ab") as f:
                f.write(piece)
            written.extend(piece)
            await asyncio.sleep(0.15)
        # While it runs, what was written is archived already (within the flush interval), not complete.
        running = await state(engine, t.task_try_id)
        assert running.size_bytes > CHUNK and not running.complete
        ended.set()
        await asyncio.wait_for(follower, 30)
        final = await state(engine, t.task_try_id)
        assert final.complete and final.size_bytes == len(written)
        assert await archived_bytes(store, engine, t.task_try_id) == bytes(written)
        # Every object is indexed, and nothing else is under the try's prefix.
        assert len(await store.keys(f"logs/default/{t.task_try_id}")) == final.chunks

    run_with_term(settings, body, pool_size=4)


def test_two_writers_leave_no_gap_and_no_duplicate(settings: Settings, archive_url: str, tmp_path: Path) -> None:
    """A leader killed mid-upload and its successor, or a zombie: both ship the same log at once."""
    log = tmp_path / "output.log"
    log.write_bytes(os.urandom(CHUNK * 10 + 123))

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(archive_url)
        # The dead leader: its object for byte 0 is written, its row never was (killed in between).
        await store.put(chunk_key("default", t.task_try_id, "task", 0, CHUNK), b"not even gzip")
        ended = asyncio.Event()
        ended.set()
        await asyncio.wait_for(asyncio.gather(
            archiver(store, engine).follow_file(t.task_try_id, "task", log, ended),
            archiver(store, engine).follow_file(t.task_try_id, "task", log, ended)), 60)
        final = await state(engine, t.task_try_id)
        assert final.complete and final.chunks == 11
        assert await archived_bytes(store, engine, t.task_try_id) == log.read_bytes()
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT count(*) FROM log_archive_chunks WHERE task_try_id = :i"),
                                       {"i": t.task_try_id})).scalar_one()
        assert rows == 11

    run_with_term(settings, body, pool_size=6)


def test_a_zombies_late_partial_chunk_never_replaces_an_indexed_object(settings: Settings, archive_url: str,
                                                                       tmp_path: Path) -> None:
    """A writer that cut its chunk at another end (a flush of what it had seen) and uploads after the
    archive moved on: its object must not land under a name the index uses. Named by the first byte
    alone, it did — the reader then got the zombie's 100 bytes where 4,096 were indexed."""
    log = tmp_path / "output.log"
    log.write_bytes(os.urandom(CHUNK * 3))

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(archive_url)
        await archive_ended(archiver(store, engine), t.task_try_id, log)
        zombie = LogArchiver(store, Database(engine), "default", chunk_bytes=100)
        await zombie.ship(t.task_try_id, "task", log, 0, partial=True)  # its rows are refused; its objects stay
        assert await archived_bytes(store, engine, t.task_try_id) == log.read_bytes()

    run_with_term(settings, body, pool_size=4)


def test_a_bucket_refusing_writes_mid_stream_costs_retries_not_the_log(settings: Settings, s3_env: S3Server,
                                                                      bucket: str, tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"a" * CHUNK * 2)
    before = ARCHIVE_FAILURES.labels(reason="refused")._value.get()

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(f"s3://{bucket}/archive")
        ended = asyncio.Event()
        follower = asyncio.create_task(archiver(store, engine).follow_file(t.task_try_id, "task", log, ended))
        while (await state(engine, t.task_try_id)).size_bytes < CHUNK * 2:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(s3_env.delete_bucket, bucket)  # the bucket goes away mid-stream
        with log.open("ab") as f:
            f.write(b"b" * CHUNK * 3)
        ended.set()
        while ARCHIVE_FAILURES.labels(reason="refused")._value.get() < before + 2:
            await asyncio.sleep(0.05)
        assert not follower.done()
        await asyncio.to_thread(s3_env.create_bucket, bucket)  # an operator restores it (its objects are gone)
        await asyncio.wait_for(follower, 30)
        final = await state(engine, t.task_try_id)
        assert final.complete and final.size_bytes == CHUNK * 5
        # What was written after the bucket came back is all there (the first objects went with the bucket).
        async with engine.connect() as conn:
            late = await archive_store.chunks_between(conn, t.task_try_id, "task", CHUNK * 2, CHUNK * 5)
        assert b"".join([decompress(await store.get(c.object_key)) for c in late]) == b"b" * CHUNK * 3

    run_with_term(settings, body, pool_size=4)


def test_storage_that_never_comes_back_is_given_up_after_the_window(settings: Settings, tmp_path: Path,
                                                                   s3_env: S3Server) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"lost\n")

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore("s3://never-created/archive")
        await archive_ended(archiver(store, engine, give_up_after=0.5), t.task_try_id, log)
        assert not (await state(engine, t.task_try_id)).complete

    run_with_term(settings, body, pool_size=4)


@pytest.mark.parametrize("size", [0, 1, CHUNK, CHUNK + 1])
def test_chunk_boundaries(settings: Settings, tmp_path: Path, size: int) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(os.urandom(size))

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore((tmp_path / "archive").as_uri())
        await archive_ended(archiver(store, engine), t.task_try_id, log)
        final = await state(engine, t.task_try_id)
        assert final.complete and final.size_bytes == size and final.chunks == -(-size // CHUNK)
        assert await archived_bytes(store, engine, t.task_try_id) == log.read_bytes()

    run_with_term(settings, body, pool_size=4)


def test_a_100_mb_line_is_archived_whole_with_bounded_memory(settings: Settings, tmp_path: Path) -> None:
    """One line of 100 MB (no newline at all): chunks cut it anywhere, memory stays at about two chunks."""
    log = tmp_path / "output.log"
    with log.open("wb") as f:
        for _ in range(100):
            f.write(os.urandom(512 * 1024).hex().encode())  # 1 MB of hex, no newline
    size = log.stat().st_size

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore((tmp_path / "archive").as_uri())
        ended = asyncio.Event()
        ended.set()
        tracemalloc.start()
        try:
            await asyncio.wait_for(LogArchiver(store, Database(engine), "default").follow_file(
                t.task_try_id, "task", log, ended), 300)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 5 * CHUNK_BYTES, f"peak Python allocations {peak / 1e6:.1f} MB for a {size / 1e6:.0f} MB line"
        final = await state(engine, t.task_try_id)
        assert final.complete and final.size_bytes == size and final.chunks == -(-size // CHUNK_BYTES)
        digest = hashlib.sha256()
        async with engine.connect() as conn:
            chunks = await archive_store.chunks_between(conn, t.task_try_id, "task", 0, 2**62)
        for chunk in chunks:
            digest.update(decompress(await store.get(chunk.object_key)))
        assert digest.hexdigest() == hashlib.sha256(log.read_bytes()).hexdigest()

    run_with_term(settings, body, pool_size=4)
