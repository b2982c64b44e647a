"""Scheduled runs on real PostgreSQL with a FakeClock: cron, catchup, pause, deterministic ids."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.clock import FakeClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import dags as dag_store
from leoflow.errors import FencedOut
from leoflow.executor.memory import MemoryExecutor
from leoflow.leadership import LeaderContext
from leoflow.scheduler.core import SchedulerCore
from leoflow.settings import Settings
from tests.scheduler.harness import apply, fast, in_conn, rows, set_term

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def hourly(**changes: Any) -> dict[str, Any]:
    return {"dag_id": "hourly", "schedule": "@hourly", "start_date": T0.isoformat(), "max_active_runs": 100,
            "tasks": [{"id": "t", "kind": "empty"}], **changes}


def with_core(settings: Settings, clock: FakeClock,
              body: Callable[[AsyncEngine, SchedulerCore], Awaitable[None]]) -> None:
    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        try:
            await set_term(engine, settings.cluster.name, 1)
            core = SchedulerCore(LeaderContext(term=1, settings=fast(settings), db=Database(engine), clock=clock),
                                 MemoryExecutor())
            await body(engine, core)
        finally:
            await engine.dispose()
    asyncio.run(main())


async def run_ids(engine: AsyncEngine) -> list[str]:
    return [r[0] for r in await rows(engine, "SELECT run_id FROM dag_runs ORDER BY logical_date")]


def test_catchup_creates_every_missed_run_with_deterministic_ids(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(hours=3, minutes=30))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, hourly(catchup=True), clock)
        assert await core.create_scheduled_runs()
        assert await run_ids(engine) == [f"scheduled__2026-01-01T0{h}:00:00+00:00" for h in range(4)]
        await core.create_scheduled_runs()
        assert len(await run_ids(engine)) == 4  # nothing new until the next fire time
        clock.advance(3600)
        await core.create_scheduled_runs()
        assert (await run_ids(engine))[-1] == "scheduled__2026-01-01T04:00:00+00:00"
        logical = await rows(engine, "SELECT DISTINCT run_type FROM dag_runs")
        assert logical == [("scheduled",)]

    with_core(settings, clock, body)


def test_without_catchup_only_the_latest_slot_runs(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(hours=3, minutes=30))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, hourly(catchup=False), clock)
        await core.create_scheduled_runs()
        await core.create_scheduled_runs()
        assert await run_ids(engine) == ["scheduled__2026-01-01T03:00:00+00:00"]
        clock.advance(2 * 3600)  # leader was away for two slots: still only the latest
        await core.create_scheduled_runs()
        assert (await run_ids(engine))[1:] == ["scheduled__2026-01-01T05:00:00+00:00"]

    with_core(settings, clock, body)


def test_paused_dag_gets_no_scheduled_runs_until_unpaused(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(minutes=90))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, hourly(paused=True), clock)
        assert not await core.create_scheduled_runs()
        assert await run_ids(engine) == []
        await in_conn(engine, lambda c: dag_store.set_paused(c, "hourly", False))
        await core.create_scheduled_runs()
        assert await run_ids(engine) == ["scheduled__2026-01-01T01:00:00+00:00"]

    with_core(settings, clock, body)


def test_scheduled_runs_execute_and_finish_with_a_fake_clock(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(minutes=1))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, hourly(catchup=True), clock)
        for _ in range(10):
            if not await core.tick():
                break
        assert await rows(engine, "SELECT run_id, state FROM dag_runs") == [
            ("scheduled__2026-01-01T00:00:00+00:00", "success")]

    with_core(settings, clock, body)


def test_a_fenced_out_term_creates_nothing(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(hours=2, minutes=1))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, hourly(catchup=True), clock)
        await set_term(engine, settings.cluster.name, 2, node_id="newer")
        with pytest.raises(FencedOut):
            await core.create_scheduled_runs()
        assert await run_ids(engine) == []

    with_core(settings, clock, body)
