"""Retention of dataset events: the history older than the runs' cutoff goes, except the events a
consuming DAG's queue still points at (its first or last), and newer ones stay."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
from prometheus_client import REGISTRY

from leoflow.clock import FakeClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.housekeeping.retention import RetentionService
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.retention.test_retention import NOW
from tests.scheduler.harness import set_term


def test_old_dataset_events_go_unless_a_queue_points_at_them(settings: Settings, database_url: str) -> None:
    ages = {"old-1": timedelta(days=60), "old-2": timedelta(days=45), "queued-first": timedelta(days=50),
            "queued-last": timedelta(days=40), "new": timedelta(days=1)}
    ids: dict[str, int] = {}
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO dags (dag_id) VALUES ('waiting')")
        for name, age in ages.items():
            row = conn.execute("INSERT INTO dataset_events (uri, source, created_by, created_at) "
                               "VALUES ('s3://o', 'api', %s, now() - %s) RETURNING id", (name, age)).fetchone()
            assert row is not None
            ids[name] = int(row[0])
        conn.execute("INSERT INTO dataset_queue (dag_id, uri, first_event_id, last_event_id, events, first_at, "
                     "last_at) VALUES ('waiting', 's3://o', %s, %s, 2, now(), now())",
                     (ids["queued-first"], ids["queued-last"]))
    before = REGISTRY.get_sample_value("leoflow_retention_purged_rows_total", {"table": "dataset_events"}) or 0.0

    async def run() -> list[int]:
        engine = make_async_engine(settings.database, pool_size=2, application_name="test-retention")
        try:
            await set_term(engine, settings.cluster.name, 1)
            ctx = LeaderContext(term=1, settings=settings, db=Database(engine), clock=FakeClock(NOW))
            first = await RetentionService(30, pause=0).purge_once(ctx)
            second = await RetentionService(30, pause=0).purge_once(ctx)
            return [first.dataset_events, second.dataset_events]
        finally:
            await engine.dispose()

    assert asyncio.run(run()) == [2, 0]
    with psycopg.connect(database_url) as conn:
        left = {r[0] for r in conn.execute("SELECT created_by FROM dataset_events")}
    assert left == {"queued-first", "queued-last", "new"}
    after = REGISTRY.get_sample_value("leoflow_retention_purged_rows_total", {"table": "dataset_events"}) or 0.0
    assert after - before == 2
