"""Schedule forms on real PostgreSQL with a FakeClock: lists, ``every``, ``@once``, ``end_date``,
``starting_deadline_seconds``, ``overlap``, and the data interval every run carries into its tasks."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.clock import FakeClock
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.datasets.events import record_api_event
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.executor.memory import MemoryExecutor
from leoflow.scheduler.core import SchedulerCore
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, fast, in_conn, rows, run_state, running_scheduler
from tests.scheduler.stepper import stepper
from tests.scheduler.test_schedule import with_core

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def dag(schedule: Any, **changes: Any) -> dict[str, Any]:
    return {"dag_id": "forms", "schedule": schedule, "start_date": T0.isoformat(), "max_active_runs": 100,
            "tasks": [{"id": "t", "kind": "empty"}], **changes}


async def runs(engine: AsyncEngine) -> list[tuple[str, datetime | None, datetime | None, str]]:
    """(run id, data interval start, data interval end, state) of every run, oldest logical date first."""
    return [tuple(r) for r in await rows(engine, "SELECT run_id, data_interval_start, data_interval_end, state "
                                                 "FROM dag_runs ORDER BY logical_date, id")]


async def next_run_at(engine: AsyncEngine) -> datetime | None:
    found: datetime | None = (await rows(engine, "SELECT next_run_at FROM dags WHERE dag_id = 'forms'"))[0][0]
    return found


def sid(moment: datetime) -> str:
    return f"scheduled__{moment.isoformat()}"


def test_a_list_of_crons_runs_at_each_and_stores_the_interval_since_the_previous_slot(settings: Settings) -> None:
    clock = FakeClock(datetime(2026, 1, 2, 19, tzinfo=UTC))  # a Friday, after both slots

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag(["0 6 * * *", "0 18 * * 1-5"], start_date="2026-01-02T00:00:00Z", catchup=True),
                    clock)
        assert await core.create_scheduled_runs()
        six, eighteen = datetime(2026, 1, 2, 6, tzinfo=UTC), datetime(2026, 1, 2, 18, tzinfo=UTC)
        assert await runs(engine) == [
            (sid(six), datetime(2026, 1, 1, 18, tzinfo=UTC), six, "queued"),  # Thursday evening to Friday morning
            (sid(eighteen), six, eighteen, "queued")]
        assert await next_run_at(engine) == datetime(2026, 1, 3, 6, tzinfo=UTC)  # Saturday: no evening slot

    with_core(settings, clock, body)


def test_every_runs_on_its_grid_and_reapplying_does_not_shift_it(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(minutes=50))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag({"every": "20m"}, start_date="2026-01-01T00:05:00Z"), clock)
        assert await core.create_scheduled_runs()
        slot = T0 + timedelta(minutes=45)
        assert await runs(engine) == [(sid(slot), slot - timedelta(minutes=20), slot, "queued")]
        clock.advance(600)
        await apply(engine, dag({"every": "20m"}, start_date="2026-01-01T00:05:00Z"), clock)  # same spec
        assert await next_run_at(engine) == T0 + timedelta(minutes=65)

    with_core(settings, clock, body)


def test_once_runs_once_even_when_applied_again(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(days=2))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag("@once"), clock)
        assert await core.create_scheduled_runs()
        assert await runs(engine) == [(sid(T0), T0, T0, "queued")]
        assert await next_run_at(engine) is None
        await apply(engine, dag("@once", description="same schedule, new version"), clock)
        clock.advance(86_400)
        assert not await core.create_scheduled_runs()
        assert len(await runs(engine)) == 1

    with_core(settings, clock, body)


def test_end_date_stops_scheduling(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(hours=5, minutes=1))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag("@hourly", catchup=True, end_date="2026-01-01T02:00:00Z"), clock)
        assert await core.create_scheduled_runs()
        assert [r[0] for r in await runs(engine)] == [sid(T0 + timedelta(hours=h)) for h in range(3)]
        assert await next_run_at(engine) is None
        clock.advance(3600)
        assert not await core.create_scheduled_runs()

    with_core(settings, clock, body)


def test_a_slot_missed_by_more_than_the_starting_deadline_is_skipped(settings: Settings) -> None:
    clock = FakeClock(T0)

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag("@hourly", starting_deadline_seconds=300), clock)
        clock.advance(3600 + 600)  # the leader was away: 01:00 is ten minutes late
        await core.create_scheduled_runs()
        assert await runs(engine) == []
        assert await next_run_at(engine) == T0 + timedelta(hours=2)  # moved on, nothing left behind
        clock.advance(3000 + 60)  # 02:01: within the deadline
        assert await core.create_scheduled_runs()
        assert [r[0] for r in await runs(engine)] == [sid(T0 + timedelta(hours=2))]

    with_core(settings, clock, body)


def test_overlap_skip_lets_a_slot_pass_while_a_run_is_active(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(minutes=1))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag("@hourly", overlap="skip"), clock)
        assert await core.create_scheduled_runs()  # 00:00, queued: still active at 01:00
        clock.advance(3600)
        await core.create_scheduled_runs()
        assert [r[0] for r in await runs(engine)] == [sid(T0)]
        assert await next_run_at(engine) == T0 + timedelta(hours=2)
        await in_conn(engine, lambda c: run_store.cancel_run(c, "forms", sid(T0)))
        clock.advance(3600)
        assert await core.create_scheduled_runs()
        assert [r[0] for r in await runs(engine)] == [sid(T0), sid(T0 + timedelta(hours=2))]

    with_core(settings, clock, body)


def test_overlap_replace_cancels_the_active_run_for_the_new_one(settings: Settings) -> None:
    clock = FakeClock(T0 + timedelta(minutes=1))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag("@hourly", overlap="replace"), clock)
        await apply(engine, {**dag(None), "dag_id": "other"}, clock)
        other = await in_conn(engine, lambda c: run_store.trigger_run(c, "other", run_id="other-run", conf={},
                                                                       clock=clock))
        assert await core.create_scheduled_runs()
        clock.advance(3600)
        assert await core.create_scheduled_runs()
        assert [(r[0], r[3]) for r in await runs(engine) if r[0] != other] == [
            (sid(T0), "cancelled"), (sid(T0 + timedelta(hours=1)), "queued")]
        reason = await rows(engine, "SELECT reason FROM dag_runs WHERE run_id = :r", r=sid(T0))
        assert "overlap: replace" in reason[0][0]
        assert await run_state(engine, other) == "queued"  # another DAG's run is not touched

    with_core(settings, clock, body)


def test_overlap_allow_by_default_runs_alongside(settings: Settings) -> None:
    """The control for the two above: without ``overlap`` both slots get runs."""
    clock = FakeClock(T0 + timedelta(minutes=1))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag("@hourly"), clock)
        await core.create_scheduled_runs()
        clock.advance(3600)
        await core.create_scheduled_runs()
        assert [r[3] for r in await runs(engine)] == ["queued", "queued"]

    with_core(settings, clock, body)


def test_a_manual_run_for_a_logical_date_is_named_after_it_and_covers_it(settings: Settings) -> None:
    clock = FakeClock(T0)
    wanted = datetime(2025, 6, 1, tzinfo=UTC)

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag(None), clock)
        run_id = await in_conn(engine, lambda c: run_store.trigger_run(c, "forms", run_id=None, conf={}, clock=clock,
                                                                        logical_date=wanted))
        assert run_id == "manual__2025-06-01T00:00:00+00:00"
        assert await runs(engine) == [(run_id, wanted, wanted, "queued")]
        try:
            await in_conn(engine, lambda c: run_store.trigger_run(c, "forms", run_id=None, conf={}, clock=clock,
                                                                   logical_date=wanted))
        except Exception as exc:  # the same date again: a conflict, not a second run
            assert "already exists" in str(exc), exc
        else:
            raise AssertionError("a second trigger for the same logical date made a run")

    with_core(settings, clock, body)


def test_tasks_get_the_data_interval_as_env_and_templates(settings: Settings) -> None:
    settings = fast(settings)
    start, end = "2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = MemoryExecutor()
        try:
            await apply(engine, {"dag_id": "forms", "tasks": [{
                "id": "work", "image": "busybox",
                "args": ["{{ run.data_interval_start }}", "{{ run.data_interval_end }}", "{{ run.logical_date }}"]}]})
            await in_conn(engine, lambda c: run_store.trigger_run(c, "forms", run_id="r1", conf={},
                                                                   clock=FakeClock(T0), logical_date=T0))
            # A scheduled run's interval, as the leader writes it (the day before its logical date).
            await in_conn(engine, lambda c: run_store.trigger_run(c, "forms", run_id="r2", conf={},
                                                                   clock=FakeClock(T0)))
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE dag_runs SET data_interval_start = :s, data_interval_end = :e, "
                                        "logical_date = :e WHERE run_id = 'r2'"),
                                   {"s": datetime.fromisoformat(start), "e": datetime.fromisoformat(end)})
            async with running_scheduler(settings, executor, engine=engine):
                await eventually(lambda: run_state(engine, "r1"), lambda s: s == "success", timeout=20)
                await eventually(lambda: run_state(engine, "r2"), lambda s: s == "success", timeout=20)
        finally:
            await engine.dispose()
        launches = {key.run_id: t.launch for key, t in executor.world.tries.items()}
        manual = launches["r1"]
        assert manual.env["LEOFLOW_DATA_INTERVAL_START"] == manual.env["LEOFLOW_DATA_INTERVAL_END"] == start
        assert manual.args == (start, start, start)
        scheduled = launches["r2"]
        assert scheduled.env["LEOFLOW_DATA_INTERVAL_START"] == start
        assert scheduled.env["LEOFLOW_DATA_INTERVAL_END"] == end
        assert scheduled.args == (start, end, end)

    asyncio.run(main())


def test_a_cron_with_datasets_runs_on_the_cron_and_on_the_events(settings: Settings) -> None:
    """``{cron, datasets}``: both kinds of run, independently (Airflow's DatasetOrTimeSchedule)."""
    orders = "s3://lake/orders"
    start = datetime(2026, 3, 1, 11, 30, tzinfo=UTC)
    clock = FakeClock(start)

    async def main() -> None:
        async with stepper(settings, clock=clock) as st:
            await apply(st.engine, dag({"cron": "0 * * * *", "datasets": {"any": [orders]}},
                                       start_date=start.isoformat()), clock)
            clock.advance(1800 + 5)  # 12:00: the cron's slot
            await st.tick(periodic=True)
            kinds = await rows(st.engine, "SELECT run_type, data_interval_start FROM dag_runs ORDER BY id")
            assert kinds == [("scheduled", datetime(2026, 3, 1, 11, tzinfo=UTC))]
            async with st.engine.begin() as conn:
                await record_api_event(conn, orders, {}, created_by="test", now=clock.now())
            await st.tick(periodic=True)
            kinds = await rows(st.engine, "SELECT run_type FROM dag_runs ORDER BY id")
            assert [k[0] for k in kinds] == ["scheduled", "dataset"]
            document = await rows(st.engine, "SELECT triggering_events FROM dag_runs WHERE run_type = 'dataset'")
            assert document[0][0][0]["uri"] == orders

    asyncio.run(main())


def test_a_hand_edited_end_date_stops_its_dag_not_the_scan(settings: Settings) -> None:
    """A stored version no apply could have written: that DAG's schedule stops with the reason, the
    others are planned in the same tick."""
    clock = FakeClock(T0 + timedelta(minutes=1))

    async def body(engine: AsyncEngine, core: SchedulerCore) -> None:
        await apply(engine, dag("@hourly", end_date="2027-01-01T00:00:00Z"), clock)
        await apply(engine, {**dag("@hourly"), "dag_id": "healthy"}, clock)
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE dag_versions SET spec = jsonb_set(spec, '{end_date}', '\"not a date\"') "
                                    "WHERE dag_id = 'forms'"))
        await core.create_scheduled_runs()
        assert await rows(engine, "SELECT dag_id FROM dag_runs") == [("healthy",)]
        error = await rows(engine, "SELECT schedule_error FROM dags WHERE dag_id = 'forms'")
        assert error[0][0] and "not a date" in error[0][0]

    with_core(settings, clock, body)
