"""Backfills of the new schedule forms: each slot's run gets the data interval a scheduled run of it
gets, and a ``@once`` DAG (no series of slots) is a 422 naming the schedule."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import httpx

from leoflow.backfill.service import BackfillService
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.settings import Settings
from tests.day2.test_backfill import HOURLY, START, _apply, _backfill, _ctx
from tests.scheduler.harness import rows, set_term


def test_backfilled_runs_carry_the_interval_since_the_slot_before(api_client: httpx.Client,
                                                                   settings: Settings) -> None:
    _apply(api_client, {**HOURLY, "schedule": ["0 0 * * *", "0 12 * * *"]})
    bid = _backfill(api_client, start=START, end="2026-03-02T00:00:00Z").json()["id"]

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=2)
        try:
            await set_term(engine, settings.cluster.name, 1)
            await BackfillService().step_all(_ctx(settings, Database(engine)))
            found = await rows(engine, "SELECT logical_date, data_interval_start, data_interval_end FROM dag_runs "
                               "WHERE backfill_id = :b ORDER BY logical_date", b=bid)
        finally:
            await engine.dispose()
        midnight, noon = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 1, 12, tzinfo=UTC)
        assert found == [(midnight, datetime(2026, 2, 28, 12, tzinfo=UTC), midnight), (noon, midnight, noon)]

    asyncio.run(main())


def test_a_once_dag_has_no_slots_to_backfill(api_client: httpx.Client) -> None:
    _apply(api_client, {**HOURLY, "schedule": "@once"})
    answer = _backfill(api_client, start=START, end="2026-03-02T00:00:00Z")
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == "schedule"
