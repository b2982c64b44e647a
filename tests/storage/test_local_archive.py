"""The local executor archives every try's output while it runs (standalone's default: file://
under its home), and the try's outcome never waits on the archive or depends on it."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import sys
import time
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores.log_archive import index as archive_store
from leoflow.executor.local.executor import LocalExecutor, archives_settled
from leoflow.executor.local.process import TryFiles
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from leoflow.storage.log_chunks import decompress
from leoflow.storage.objects import ObjectStore
from tests.executor.world import Recorder, run_with_term, seed_tries
from tests.harness.s3_server import S3Server

PY = sys.executable
#: Prints a checksummed line a few times a second for a while, waits until the gate file (argv[1])
#: exists — the test opens it once it saw the archive while the try runs, so that observation never
#: depends on how fast a loaded host runs the script — then one 6 MB line, then binary garbage.
SCRIPT = r"""
import hashlib, os, sys, time
for i in range(8):
    line = f"line {i} " + "x" * 100
    sys.stdout.write(f"{line} {hashlib.sha256(line.encode()).hexdigest()[:12]}\n"); sys.stdout.flush()
    time.sleep(0.1)
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.02)
sys.stdout.write("L" * 6_000_000 + "\n")
sys.stdout.flush()
os.write(1, bytes(range(256)) * 64)
"""


def archive_settings(settings: Settings, home: Path, url: str) -> Settings:
    return settings.replace(
        home=home, executor=dataclasses.replace(settings.executor, kind="local"),
        log_archive=dataclasses.replace(settings.log_archive, url=url, flush_interval=0.2))


async def read_back(store: ObjectStore, engine: AsyncEngine, task_try_id: int) -> bytes:
    async with engine.connect() as conn:
        chunks = await archive_store.chunks_between(conn, task_try_id, "task", 0, 2**62)
    return b"".join([decompress(await store.get(c.object_key)) for c in chunks])


def test_a_local_try_is_archived_while_it_runs_and_completed_byte_for_byte(settings: Settings, tmp_path: Path) -> None:
    url = (tmp_path / "archive").as_uri()
    s = archive_settings(settings, tmp_path, url)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = LocalExecutor(s)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        gate = tmp_path / "gate"
        await ex.submit(t.launch([PY, "-c", SCRIPT, str(gate)], term=1))
        # While it runs, its first lines are in the archive already (flushed within the interval).
        deadline = time.monotonic() + 30
        while True:
            async with engine.begin() as conn:
                running = await archive_store.open_log(conn, t.task_try_id, "task")
            if running.size_bytes > 0:
                break
            assert time.monotonic() < deadline, "nothing archived while the try ran"
            await asyncio.sleep(0.05)
        assert not running.complete
        gate.touch()
        final = await rec.wait_final(t.key)
        assert final.state == "success"
        assert await archives_settled(60)
        await ex.stop()
        written = TryFiles(tmp_path, try_name("default", t.key)).log.read_bytes()
        assert len(written) > 6_000_000
        async with engine.begin() as conn:
            done = await archive_store.open_log(conn, t.task_try_id, "task")
        assert done.complete and done.size_bytes == len(written)
        archived = await read_back(ObjectStore(url), engine, t.task_try_id)
        assert hashlib.sha256(archived).hexdigest() == hashlib.sha256(written).hexdigest()

    run_with_term(s, body, pool_size=6)


def test_a_missing_bucket_never_changes_or_delays_the_outcome(settings: Settings, tmp_path: Path,
                                                              s3_env: S3Server) -> None:
    s = archive_settings(settings, tmp_path, "s3://no-such-bucket/logs")

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = LocalExecutor(s, archive_give_up=1.0)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        started = time.monotonic()
        await ex.submit(t.launch([PY, "-c", "print('done')"], term=1))
        final = await rec.wait_final(t.key)
        took = time.monotonic() - started
        assert final.state == "success" and took < 10
        assert await archives_settled(60)
        await ex.stop()
        async with engine.begin() as conn:
            state = await archive_store.open_log(conn, t.task_try_id, "task")
        assert not state.complete and state.size_bytes == 0

    run_with_term(s, body, pool_size=6)
