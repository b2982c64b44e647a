"""A short log archived whole at its end (LogArchiver._archive_short): one object, one statement.

Most tries print a few lines and end within seconds; archiving them the chunked way (the index
opened at the start, completed at the end) cost two transactions per try. These tests pin what the
short way must keep: no index row while the try runs, the whole log in one object indexed complete
by one statement, exactly once when two writers race or another writer began the archive, and a
storage failure that falls back to the chunked way (which retries) instead of losing the log.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.executor.log_archive import LogArchiver
from leoflow.metrics.log_archive import ARCHIVE_FAILURES
from leoflow.settings import Settings
from leoflow.storage.log_chunks import chunk_key
from leoflow.storage.objects import ObjectStore
from tests.executor.world import run_with_term, seed_tries
from tests.harness.s3_server import S3Server
from tests.scheduler.harness import eventually
from tests.storage.test_log_archive import CHUNK, archive_ended, archived_bytes, archiver, state

_ROW = text("SELECT size_bytes, chunks, complete, created_at = updated_at AS one_write FROM log_archives "
            "WHERE task_try_id = :i AND container = 'task'")


async def row(engine: AsyncEngine, task_try_id: int) -> tuple[int, int, bool, bool] | None:
    """The archive's row as stored, without creating it (``open_log`` would)."""
    async with engine.connect() as conn:
        found = (await conn.execute(_ROW, {"i": task_try_id})).one_or_none()
    return None if found is None else (found.size_bytes, found.chunks, found.complete, found.one_write)


def test_a_short_log_is_indexed_once_complete_at_its_end(settings: Settings, archive_url: str, tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"")

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(archive_url)
        ended = asyncio.Event()
        follower = asyncio.create_task(archiver(store, engine, flush_interval=30).follow_file(
            t.task_try_id, "task", log, ended))
        log.write_bytes(b"hello\n" + os.urandom(300))
        await asyncio.sleep(0.2)  # ten polls: a short log is not opened while the try runs
        assert await row(engine, t.task_try_id) is None
        ended.set()
        await asyncio.wait_for(follower, 30)
        # Written in one statement: created and completed at the same instant, one chunk, all of it.
        assert await row(engine, t.task_try_id) == (306, 1, True, True)
        assert await archived_bytes(store, engine, t.task_try_id) == log.read_bytes()
        only = chunk_key("default", t.task_try_id, "task", 0, 306)
        assert await store.keys(f"logs/default/{t.task_try_id}") == [only]

    run_with_term(settings, body, pool_size=4)


def test_an_empty_log_is_complete_with_no_object(settings: Settings, archive_url: str, tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"")

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(archive_url)
        await archive_ended(archiver(store, engine), t.task_try_id, log)
        assert await row(engine, t.task_try_id) == (0, 0, True, True)
        assert await store.keys(f"logs/default/{t.task_try_id}") == []

    run_with_term(settings, body, pool_size=4)


def test_a_log_that_outlives_the_flush_interval_is_shipped_while_it_runs(settings: Settings, archive_url: str,
                                                                         tmp_path: Path) -> None:
    """The short way must not hide a running try's output: past the flush interval it is archived."""
    log = tmp_path / "output.log"
    log.write_bytes(b"still running\n")

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(archive_url)
        ended = asyncio.Event()
        follower = asyncio.create_task(archiver(store, engine, flush_interval=0.1).follow_file(
            t.task_try_id, "task", log, ended))
        found = await eventually(lambda: row(engine, t.task_try_id), lambda f: f is not None and f[0] == 14,
                                 timeout=10)
        assert found is not None and found[:3] == (14, 1, False)
        with log.open("ab") as f:
            f.write(b"done\n")
        ended.set()
        await asyncio.wait_for(follower, 30)
        assert (await row(engine, t.task_try_id) or (0,))[:3] == (19, 2, True)
        assert await archived_bytes(store, engine, t.task_try_id) == b"still running\ndone\n"

    run_with_term(settings, body, pool_size=4)


def test_two_writers_of_a_short_log_index_it_once(settings: Settings, archive_url: str, tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(os.urandom(CHUNK - 1))

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(archive_url)
        ended = asyncio.Event()
        ended.set()
        await asyncio.wait_for(asyncio.gather(
            *(archiver(store, engine).follow_file(t.task_try_id, "task", log, ended) for _ in range(4))), 30)
        assert await row(engine, t.task_try_id) == (CHUNK - 1, 1, True, True)
        assert await archived_bytes(store, engine, t.task_try_id) == log.read_bytes()

    run_with_term(settings, body, pool_size=6)


def test_an_archive_begun_by_another_writer_is_carried_on_not_replaced(settings: Settings, archive_url: str,
                                                                       tmp_path: Path) -> None:
    """An adopted try: the previous leader indexed the first 100 bytes, then died. The short way must
    not write the whole log over it; the chunked way carries on from byte 100."""
    log = tmp_path / "output.log"
    log.write_bytes(os.urandom(1000))

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(archive_url)
        dead = LogArchiver(store, Database(engine), "default", chunk_bytes=100)
        assert await dead.ship(t.task_try_id, "task", log, 0, partial=False) == 1000
        async with engine.begin() as conn:  # it had got as far as the first chunk's row
            await conn.execute(text("DELETE FROM log_archive_chunks WHERE task_try_id = :i AND start_offset > 0"),
                               {"i": t.task_try_id})
            await conn.execute(text("UPDATE log_archives SET size_bytes = 100, chunks = 1 WHERE task_try_id = :i"),
                               {"i": t.task_try_id})
        await archive_ended(archiver(store, engine), t.task_try_id, log)
        final = await state(engine, t.task_try_id)
        assert final.complete and final.size_bytes == 1000 and final.chunks == 2
        assert await archived_bytes(store, engine, t.task_try_id) == log.read_bytes()

    run_with_term(settings, body, pool_size=4)


def test_a_storage_failure_at_the_end_falls_back_to_retries(settings: Settings, s3_env: S3Server, bucket: str,
                                                            tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"the one line that explains the hang\n")
    before = ARCHIVE_FAILURES.labels(reason="refused")._value.get()

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(f"s3://{bucket}/archive")
        await asyncio.to_thread(s3_env.delete_bucket, bucket)
        ended = asyncio.Event()
        ended.set()
        follower = asyncio.create_task(archiver(store, engine).follow_file(t.task_try_id, "task", log, ended))
        while ARCHIVE_FAILURES.labels(reason="refused")._value.get() < before + 2:
            await asyncio.sleep(0.05)
        assert not follower.done()
        await asyncio.to_thread(s3_env.create_bucket, bucket)
        await asyncio.wait_for(follower, 30)
        final = await state(engine, t.task_try_id)
        assert final.complete and final.size_bytes == len(log.read_bytes())
        assert await archived_bytes(store, engine, t.task_try_id) == log.read_bytes()

    run_with_term(settings, body, pool_size=4)


def test_a_sparse_spool_past_what_is_archived_never_overwrites_an_indexed_object(
        settings: Settings, archive_url: str, tmp_path: Path) -> None:
    """A pod's log read past what the live archive holds: the spool is zeros below that end. Archived
    whole from byte 0, its object took the name of the live archive's real one and replaced it."""
    real = tmp_path / "live.log"
    real.write_bytes(b"the live archive's real bytes\n")
    spool = tmp_path / "spool.log"

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        store = ObjectStore(archive_url)
        size = len(real.read_bytes())
        assert await archiver(store, engine).ship(t.task_try_id, "task", real, 0, partial=True) == size
        with spool.open("wb") as f:
            f.truncate(size)  # what the end-of-pod read writes: nothing below the archived end
        await archive_ended(archiver(store, engine), t.task_try_id, spool, archived=size)
        assert (await state(engine, t.task_try_id)).complete
        assert await archived_bytes(store, engine, t.task_try_id) == real.read_bytes()

    run_with_term(settings, body, pool_size=4)
