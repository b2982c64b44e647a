"""The artifacts' index on real PostgreSQL, beside real objects: rows after objects, the source a
consumer reads (the latest successful try), and retention deleting the objects with their rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores.log_archive import artifacts as artifact_store
from leoflow.db.stores.retention import RetentionPolicy
from leoflow.executor.artifacts import manifest_key
from leoflow.housekeeping.retention import delete_archived_objects, purge
from leoflow.model.artifacts.declared import OutputArtifact
from leoflow.settings import Settings
from leoflow.storage.artifacts import upload_outputs
from leoflow.storage.objects import ObjectStore
from tests.executor.world import run_with_term, seed_tries
from tests.storage.test_archive_retention import finish_long_ago


def test_index_sources_and_retention(settings: Settings, archive_url: str, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "f.txt").write_text("x" * 1000)

    async def body(engine: AsyncEngine) -> None:
        store = ObjectStore(archive_url)
        db = Database(engine)
        first = await seed_tries(engine, 2)
        retry = await seed_tries(engine, 1, run="manual-2", try_number=1)
        for seeded in [*first, *retry]:
            results = await upload_outputs(store, "default", seeded.task_try_id, tmp_path,
                                           [OutputArtifact("data", "out"), OutputArtifact("gone", "none")])
            async with db.transaction() as conn:
                await artifact_store.record_artifacts(conn, seeded.task_try_id, results)
                await artifact_store.record_artifacts(conn, seeded.task_try_id, results)  # again: same rows
        assert len(await store.keys("artifacts")) == 3
        await store.put(manifest_key("default", first[0].task_try_id), b"[]")  # as a pod's sidecar leaves it
        async with db.connect() as conn:
            rows = await artifact_store.list_artifacts(conn, "etl", "manual-1", "task0")
            assert [(r.name, r.try_number, r.complete, r.kind) for r in rows] == [
                ("data", 1, True, "directory"), ("gone", 1, False, None)]
            assert rows[1].problem == "nothing at its path when the task ended" and rows[1].object_key is None
            assert rows[0].digest is not None and rows[0].digest.startswith("sha256:")
            # Not a source before the try succeeded.
            assert await artifact_store.input_sources(conn, "etl", "manual-1", ["task0"]) == {}
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE task_tries SET state = 'success'"))
        async with db.connect() as conn:
            sources = await artifact_store.input_sources(conn, "etl", "manual-1", ["task0", "task1"])
        assert sorted(sources) == [("task0", "data"), ("task0", "gone"), ("task1", "data"), ("task1", "gone")]
        assert sources[("task0", "data")].object_key == rows[0].object_key
        await finish_long_ago(engine)
        policy = RetentionPolicy(datetime.now(UTC) - timedelta(days=30), wait_for_pod_cleanup=False,
                                 delete_archived_logs=True)
        counts = await purge(db, policy)
        assert counts.dag_runs == 2
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM task_artifacts"))).scalar_one() == 0
            # Each artifact and its try's manifest (a pod's sidecar writes one; here, for one try, as it would).
            assert (await conn.execute(text("SELECT count(*) FROM log_archive_garbage"))).scalar_one() == 6
        assert len(await store.keys("artifacts")) == 4  # not inside the purge's transaction
        assert await delete_archived_objects(db, store, batch=2, pause=0) == 6  # a missing manifest counts as gone
        assert await store.keys("artifacts") == []

    run_with_term(settings, body, pool_size=4)
