"""A boundary's step starts at the boundary (issue 45), not up to an interval after it.

The periodic parts ran once per ``LEOFLOW_SCHEDULER_INTERVAL``, at whatever phase the loop had,
so the DAGs due at midnight waited up to one interval for their step. The periodic step now
reads when the next DAG falls due (:func:`~leoflow.db.stores.runs.starts.next_due_at`), and the
core runs the periodic parts at that moment even when the interval has not passed; the loop
sleeps no longer than until then. Driven tick by tick on a fake clock, with an interval of 30 s
so that only the boundary can explain a step.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.clock import FakeClock
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.runs import starts as run_starts
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows
from tests.scheduler.stepper import T0, stepper

EVERY_FIVE = {"dag_id": "five", "schedule": "*/5 * * * *", "catchup": False,
              "start_date": (T0 + timedelta(minutes=5)).isoformat(), "tasks": [{"id": "t", "kind": "empty"}]}


async def scheduled(engine: AsyncEngine) -> list[tuple[str, str]]:
    return [(r, s) for r, s in await rows(engine, "SELECT run_id, state FROM dag_runs ORDER BY id")]


def test_the_periodic_step_runs_at_the_boundary_not_at_the_next_interval(settings: Settings) -> None:
    """At 12:04:55 the DAG's next run is 12:05:00: the core says 5 s to go, a tick before then does
    nothing, and a tick at 12:05:00 creates the run and ends it (``kind: empty``), although the
    30 s interval since the last periodic step has not passed; then the next boundary is 12:10."""
    clock = FakeClock(T0 + timedelta(minutes=4, seconds=55))

    async def body() -> None:
        async with stepper(settings, clock=clock, interval=30.0) as s:
            await apply(s.engine, EVERY_FIVE, clock)
            await s.tick(periodic=True)
            await s.settle()
            assert await scheduled(s.engine) == []
            assert s.core.seconds_to_due() == 5.0
            clock.advance(4.9)
            assert not await s.tick()
            assert abs((s.core.seconds_to_due() or 0.0) - 0.1) < 1e-6
            clock.advance(0.1)
            assert s.core.seconds_to_due() == 0.0
            await s.tick()
            await s.settle()
            assert await scheduled(s.engine) == [("scheduled__2026-03-01T12:05:00+00:00", "success")]
            assert s.core.seconds_to_due() == 300.0

    asyncio.run(body())


def test_next_due_is_the_earliest_later_boundary_of_a_dag_that_can_run(settings: Settings) -> None:
    """Paused, deleted and unscheduled DAGs have no boundary to wake for, nor does one already due
    (the due scan has it; waking for it would spin the loop if it cannot move); None when nothing is left."""
    clock = FakeClock(T0)

    async def body() -> None:
        engine = make_async_engine(settings.database, pool_size=1)
        try:
            for dag_id in ("paused", "deleted", "manual", "past", "soon", "later"):
                await apply(engine, {**EVERY_FIVE, "dag_id": dag_id}, clock)
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE dags SET paused = true WHERE dag_id = 'paused'"))
                await conn.execute(text("UPDATE dags SET deleted = true WHERE dag_id = 'deleted'"))
                await conn.execute(text("UPDATE dags SET schedule = NULL WHERE dag_id = 'manual'"))
                for dag_id, minutes in (("paused", 1), ("deleted", 1), ("manual", 1), ("past", -1), ("soon", 2),
                                        ("later", 3)):
                    await conn.execute(text("UPDATE dags SET next_run_at = :t WHERE dag_id = :d"),
                                       {"t": T0 + timedelta(minutes=minutes), "d": dag_id})
                assert await run_starts.next_due_at(conn, T0) == T0 + timedelta(minutes=2)
                assert await run_starts.next_due_at(conn, T0 + timedelta(minutes=2)) == T0 + timedelta(minutes=3)
                assert await run_starts.next_due_at(conn, T0 + timedelta(minutes=3)) is None
        finally:
            await engine.dispose()

    asyncio.run(body())
