"""Retention and the log archive: the objects go with their rows (``delete``), or stay for a bucket
lifecycle rule (``lifecycle``); never before the rows are gone."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores.retention import RetentionPolicy
from leoflow.executor.log_archive import LogArchiver
from leoflow.housekeeping.retention import delete_archived_objects, purge
from leoflow.settings import Settings
from leoflow.storage.objects import ObjectStore
from tests.executor.world import run_with_term, seed_tries


async def finish_long_ago(engine: AsyncEngine) -> None:
    long_ago = datetime.now(UTC) - timedelta(days=40)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE dag_runs SET state = 'success', ended_at = :t"), {"t": long_ago})
        await conn.execute(text("UPDATE task_instances SET state = 'success'"))
        await conn.execute(text("UPDATE task_tries SET state = 'success', ended_at = :t, logs_shipped_at = :t"),
                           {"t": long_ago})


@pytest.mark.parametrize("mode", ["delete", "lifecycle"])
def test_retention_deletes_archived_objects_with_their_rows_or_leaves_them(settings: Settings, archive_url: str,
                                                                          tmp_path: Path, mode: str) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"line\n" * 5000)

    async def body(engine: AsyncEngine) -> None:
        tries = await seed_tries(engine, 3)
        store = ObjectStore(archive_url)
        db = Database(engine)
        ended = asyncio.Event()
        ended.set()
        for t in tries:
            await LogArchiver(store, db, "default", chunk_bytes=10_000).follow_file(t.task_try_id, "task", log, ended)
        assert len(await store.keys("logs")) == 9
        await finish_long_ago(engine)
        policy = RetentionPolicy(datetime.now(UTC) - timedelta(days=30), wait_for_pod_cleanup=False,
                                 delete_archived_logs=mode == "delete")
        counts = await purge(db, policy)
        assert counts.dag_runs == 1
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM log_archive_chunks"))).scalar_one() == 0
            queued = (await conn.execute(text("SELECT count(*) FROM log_archive_garbage"))).scalar_one()
        assert queued == (9 if mode == "delete" else 0)
        assert len(await store.keys("logs")) == 9  # nothing deleted from storage inside the purge's transaction
        assert await delete_archived_objects(db, store, batch=4, pause=0) == queued
        assert len(await store.keys("logs")) == (0 if mode == "delete" else 9)
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM log_archive_garbage"))).scalar_one() == 0

    run_with_term(settings, body, pool_size=4)
