"""The archiver under load: memory that does not grow with the log, and a thousand tries at once.

A task printing 5 GB is the same work as one printing 64 MB, only longer: what must hold is that
the archiver's memory does not depend on the size, shown here by the same peak at 8 MB and at
64 MB of incompressible output (the worst case for a compressed chunk held in memory). A thousand
tries logging at full speed share one archiver and a small database pool, as on a busy leader:
every log must come out complete and byte for byte, with no storage failure and no lost write.
"""

from __future__ import annotations

import asyncio
import os
import threading
import tracemalloc
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.executor.log_archive import COMPRESS_AHEAD, LogArchiver
from leoflow.metrics.log_archive import ARCHIVE_FAILURES
from leoflow.settings import Settings
from leoflow.storage.log_chunks import CHUNK_BYTES
from leoflow.storage.objects import ObjectStore
from tests.executor.world import run_with_term, seed_tries
from tests.storage.test_log_archive import archived_bytes, state

TRIES = 1000
PER_TRY = 32 * 1024
PIECE = 16 * 1024


def _failures() -> float:
    return sum(ARCHIVE_FAILURES.labels(reason=r)._value.get() for r in ("refused", "unavailable"))


def test_memory_does_not_grow_with_the_size_of_the_log(settings: Settings, tmp_path: Path) -> None:
    peaks: dict[int, int] = {}

    async def body(engine: AsyncEngine) -> None:
        tries = await seed_tries(engine, 2)
        for t, megabytes in zip(tries, (8, 64), strict=True):
            log = tmp_path / f"{megabytes}.log"
            with log.open("wb") as f:
                for _ in range(megabytes):
                    f.write(os.urandom(1024 * 1024))
            store = ObjectStore((tmp_path / "archive").as_uri())
            ended = asyncio.Event()
            ended.set()
            tracemalloc.start()
            try:
                await asyncio.wait_for(LogArchiver(store, Database(engine), "default").follow_file(
                    t.task_try_id, "task", log, ended), 600)
                _, peaks[megabytes] = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            final = await state(engine, t.task_try_id)
            assert final.complete and final.size_bytes == megabytes * 1024 * 1024
            log.unlink()

    run_with_term(settings, body, pool_size=2)
    # Eight times the output, the same memory: what is held is a chunk or two, never the log.
    assert peaks[64] < peaks[8] * 1.5 + 512 * 1024, peaks
    # Each chunk in flight (those compressing ahead and the one uploading) is held compressed, and
    # twice that for a moment while its pieces are joined: incompressible output is a chunk's size.
    assert peaks[64] < 2 * (COMPRESS_AHEAD + 1) * CHUNK_BYTES, peaks


def test_a_thousand_tries_logging_at_full_speed_are_all_archived_whole(settings: Settings, tmp_path: Path) -> None:
    failures_before = _failures()

    async def body(engine: AsyncEngine) -> None:
        tries = await seed_tries(engine, TRIES)
        store = ObjectStore((tmp_path / "archive").as_uri())
        # One archiver and four connections for all of them, as a busy leader shares its pool.
        archiver = LogArchiver(store, Database(engine), "default", flush_interval=0.2, poll_interval=0.05,
                               retry_base=0.05, retry_cap=0.2)
        loop = asyncio.get_running_loop()
        paths = {t.task_try_id: tmp_path / f"{t.task_try_id}.log" for t in tries}
        events = {tid: asyncio.Event() for tid in paths}
        for path in paths.values():
            path.touch()
        written: dict[int, bytes] = {}

        def write_all() -> None:
            """Every try prints at once, round-robin, as fast as the disk takes it; each ends when done."""
            files = {tid: path.open("ab") for tid, path in paths.items()}
            parts: dict[int, list[bytes]] = {tid: [] for tid in paths}
            while files:
                for tid in list(files):
                    piece = os.urandom(PIECE // 2).hex().encode()[:PIECE - 1] + b"\n"
                    files[tid].write(piece)
                    files[tid].flush()
                    parts[tid].append(piece)
                    if sum(map(len, parts[tid])) >= PER_TRY:
                        files.pop(tid).close()
                        written[tid] = b"".join(parts[tid])
                        loop.call_soon_threadsafe(events[tid].set)

        followers = [asyncio.create_task(archiver.follow_file(tid, "task", paths[tid], events[tid])) for tid in paths]
        writer = threading.Thread(target=write_all)
        writer.start()
        await asyncio.to_thread(writer.join)
        await asyncio.wait_for(asyncio.gather(*followers), 600)
        for tid in paths:
            final = await state(engine, tid)
            assert final.complete and final.size_bytes == len(written[tid]), (tid, final)
            assert await archived_bytes(store, engine, tid) == written[tid]

    run_with_term(settings, body, pool_size=4)
    assert _failures() == failures_before  # nothing was retried: the load alone fails nothing
