"""``schedule: {cron, datasets, combine: and}`` on real PostgreSQL with a FakeClock: a cron slot that
waits for its data. The rules under test: the slot's run starts only once the condition is met by
events since the DAG's last run (events before the slot count), it is the slot's scheduled run (run
id, logical date, data interval) carrying ``triggering_events``; at most one slot waits (a newer one
replaces it); ``starting_deadline_seconds`` drops a slot; a re-apply clears it; exactly once across a
change of leader."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.clock import FakeClock
from leoflow.db.stores.datasets.events import record_api_event
from leoflow.errors import FencedOut
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, set_term
from tests.scheduler.stepper import container, stepper
from tests.scheduler.test_datasets import _sample

ORDERS = "s3://lake/orders"
CUSTOMERS = "pg://warehouse/customers"
START = datetime(2026, 3, 1, 11, 30, tzinfo=UTC)
NOON, ONE = datetime(2026, 3, 1, 12, tzinfo=UTC), datetime(2026, 3, 1, 13, tzinfo=UTC)


def daily_report(*uris: str, **changes: Any) -> dict[str, Any]:
    return {"dag_id": "report", "start_date": START.isoformat(), "max_active_runs": 10,
            "schedule": {"cron": "0 * * * *", "datasets": {"all": list(uris or (ORDERS,))}, "combine": "and"},
            "tasks": [{"id": "t", "kind": "empty"}], **changes}


async def event(engine: AsyncEngine, clock: FakeClock, uri: str = ORDERS) -> None:
    async with engine.begin() as conn:
        await record_api_event(conn, uri, {}, created_by="test", now=clock.now())


async def runs(engine: AsyncEngine) -> list[tuple[Any, ...]]:
    """(run id, type, data interval start, end, URIs of its triggering events) of every run, in order."""
    found = await rows(engine, "SELECT run_id, run_type, data_interval_start, data_interval_end, triggering_events "
                               "FROM dag_runs WHERE dag_id = 'report' ORDER BY id")
    return [(r[0], r[1], r[2], r[3], [e["uri"] for e in r[4] or []]) for r in found]


async def slot(engine: AsyncEngine) -> tuple[datetime | None, datetime | None]:
    [(at, start)] = await rows(engine, "SELECT pending_slot_at, pending_slot_start FROM dags WHERE dag_id = 'report'")
    return at, start


def sid(moment: datetime) -> str:
    return f"scheduled__{moment.isoformat()}"


def test_the_slot_waits_for_its_data_then_runs_as_the_slots_scheduled_run(settings: Settings) -> None:
    clock = FakeClock(START)

    async def main() -> None:
        async with stepper(settings, clock=clock) as st:
            await apply(st.engine, daily_report(ORDERS, CUSTOMERS), clock)
            clock.advance(1800 + 5)  # 12:00: the slot comes, the data has not
            await st.tick(periodic=True)
            assert await runs(st.engine) == []
            assert await slot(st.engine) == (NOON, datetime(2026, 3, 1, 11, tzinfo=UTC))
            await event(st.engine, clock, ORDERS)  # one of two: still waiting
            await st.tick(periodic=True)
            assert await runs(st.engine) == []
            clock.advance(600)
            await event(st.engine, clock, CUSTOMERS)
            await st.tick(periodic=True)
            assert await runs(st.engine) == [
                (sid(NOON), "scheduled", datetime(2026, 3, 1, 11, tzinfo=UTC), NOON, [ORDERS, CUSTOMERS])]
            assert await slot(st.engine) == (None, None)
            assert await rows(st.engine, "SELECT uri FROM dataset_queue") == []
            await event(st.engine, clock, ORDERS)  # more data, but no slot: nothing runs, the event waits
            await event(st.engine, clock, CUSTOMERS)
            await st.tick(periodic=True)
            assert len(await runs(st.engine)) == 1

    asyncio.run(main())


def test_events_before_the_slot_count_and_start_it_at_once(settings: Settings) -> None:
    clock = FakeClock(START)
    counted = "leoflow_dag_dataset_triggered_runs_total"
    before = _sample(counted, "report")

    async def main() -> None:
        async with stepper(settings, clock=clock) as st:
            await apply(st.engine, daily_report(), clock)
            clock.advance(1200)  # 11:50: the data lands before the slot
            await event(st.engine, clock)
            await st.tick(periodic=True)
            assert await runs(st.engine) == []  # no slot yet: the cron part of "and"
            clock.advance(605)
            await st.tick(periodic=True)  # 12:00: the slot and its data, in one step
            assert [r[0] for r in await runs(st.engine)] == [sid(NOON)]

    asyncio.run(main())
    assert _sample(counted, "report") - before == 1.0  # started by its data: counted per DAG


def test_a_newer_slot_replaces_one_still_waiting(settings: Settings) -> None:
    clock = FakeClock(START)

    async def main() -> None:
        async with stepper(settings, clock=clock) as st:
            await apply(st.engine, daily_report(), clock)
            clock.advance(1805)
            await st.tick(periodic=True)
            assert (await slot(st.engine))[0] == NOON
            clock.advance(3600)  # 13:00: no data for the noon slot; the 13:00 slot takes its place
            await st.tick(periodic=True)
            assert await slot(st.engine) == (ONE, NOON)
            await event(st.engine, clock)
            await st.tick(periodic=True)
            assert [(r[0], r[2], r[3]) for r in await runs(st.engine)] == [(sid(ONE), NOON, ONE)]

    asyncio.run(main())


def test_starting_deadline_drops_a_slot_and_its_data_waits_for_the_next(settings: Settings) -> None:
    clock = FakeClock(START)

    async def main() -> None:
        async with stepper(settings, clock=clock) as st:
            await apply(st.engine, daily_report(starting_deadline_seconds=600), clock)
            clock.advance(1805)
            await st.tick(periodic=True)
            clock.advance(1200)  # 12:20: the data comes, 20 minutes after a slot that waits 10
            await event(st.engine, clock)
            await st.tick(periodic=True)
            assert await runs(st.engine) == [] and await slot(st.engine) == (None, None)
            assert await rows(st.engine, "SELECT uri FROM dataset_queue") == [(ORDERS,)]
            clock.advance(2400)  # 13:00: the next slot finds the data waiting
            await st.tick(periodic=True)
            assert [r[0] for r in await runs(st.engine)] == [sid(ONE)]

    asyncio.run(main())


def test_a_re_applied_schedule_clears_the_slot(settings: Settings) -> None:
    clock = FakeClock(START)

    async def main() -> None:
        async with stepper(settings, clock=clock) as st:
            await apply(st.engine, daily_report(), clock)
            clock.advance(1805)
            await st.tick(periodic=True)
            assert (await slot(st.engine))[0] == NOON
            await apply(st.engine, daily_report(CUSTOMERS), clock)  # another condition: another plan
            assert await slot(st.engine) == (None, None)
            await event(st.engine, clock, ORDERS)  # the old condition's data starts nothing
            await st.tick(periodic=True)  # the new plan makes the latest slot pending again
            assert await runs(st.engine) == [] and (await slot(st.engine))[0] == NOON
            await event(st.engine, clock, CUSTOMERS)
            await st.tick(periodic=True)
            assert [(r[0], r[4]) for r in await runs(st.engine)] == [(sid(NOON), [CUSTOMERS])]

    asyncio.run(main())


def test_exactly_one_run_of_the_slot_across_a_change_of_leader(settings: Settings) -> None:
    clock = FakeClock(START)

    async def main() -> None:
        async with stepper(settings, term=1, clock=clock) as old:
            await apply(old.engine, daily_report(), clock)
            clock.advance(1805)
            await old.tick(periodic=True)  # the old leader made the slot pending
            await event(old.engine, clock)
            await set_term(old.engine, settings.cluster.name, 2, node_id="newer")
            with pytest.raises(FencedOut):  # its next step, which would start the run, is fenced out
                await old.tick(periodic=True)
            assert await runs(old.engine) == [] and (await slot(old.engine))[0] == NOON
            async with stepper(settings, term=2, engine=old.engine, clock=clock) as new:
                await new.tick(periodic=True)
                await new.tick(periodic=True)
                assert [r[0] for r in await runs(new.engine)] == [sid(NOON)]
                assert await slot(new.engine) == (None, None)

    asyncio.run(main())


def test_the_slots_task_gets_the_cron_interval_and_the_triggering_events(settings: Settings) -> None:
    clock = FakeClock(START)

    async def main() -> None:
        async with stepper(settings, clock=clock) as st:
            await apply(st.engine, daily_report(tasks=[container("r")]), clock)
            clock.advance(1805)
            await st.tick(periodic=True)
            await event(st.engine, clock)
            await st.tick(periodic=True)  # the slot's run is created...
            await st.tick(periodic=True)  # ...and started: its root is handed to the executor
            [launch] = [la for la in st.executor.launched if la.key.dag_id == "report"]
            assert launch.key.run_id == sid(NOON)
            assert launch.env["LEOFLOW_DATA_INTERVAL_START"] == "2026-03-01T11:00:00+00:00"
            assert launch.env["LEOFLOW_DATA_INTERVAL_END"] == NOON.isoformat()
            assert [e["uri"] for e in json.loads(launch.env["LEOFLOW_TRIGGERING_EVENTS"])] == [ORDERS]

    asyncio.run(main())
