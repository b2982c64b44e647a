"""The outcome observer lets a burst of run starts pass before it works off a new backlog — boundedly.

At a boundary where thousands of DAGs are due, the observer's bookkeeping of their endings shares
the leader's event loop with the steps that create and start the runs. While the scheduler says
runs are waiting (``ctx.runs.waiting``), a caught-up observer waits, at most ``yield_for``
seconds; one that already has a backlog never waits, so it cannot be starved. Each check below
cannot pass by timing luck: a wait of 30 s either happened or the flag was honoured.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from leoflow.api.app import create_app
from leoflow.clock import SystemClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.leadership import LeaderContext
from leoflow.notify.observer import OutcomeObserver
from leoflow.settings import Settings
from tests.api.conftest import ADMIN, api_settings, spec
from tests.api.live import client_for
from tests.scheduler.harness import set_term


async def _ended_runs(engine: Any, n: int, prefix: str = "r") -> None:
    async with engine.begin() as conn:
        for i in range(n):
            await conn.execute(text("""
                INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, started_at, ended_at)
                SELECT dag_id, :r, current_version_id, 'manual', 'success', now() - interval '1 second', now()
                FROM dags WHERE dag_id = 'alpha'
            """), {"r": f"{prefix}{i}"})


async def _unobserved(engine: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM dag_runs WHERE observed_at IS NULL"))).scalar_one())


def test_a_caught_up_observer_waits_for_run_starts_and_a_busy_one_does_not(settings: Settings) -> None:
    with client_for(create_app(api_settings(settings.database.url or ""))) as client:
        assert client.post("/api/v2/dags", json=spec("alpha"), headers=ADMIN).status_code == 201

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=2)
        try:
            await set_term(engine, settings.cluster.name, 1)
            await _ended_runs(engine, 3)
            ctx = LeaderContext(term=1, settings=settings, db=Database(engine), clock=SystemClock())
            observer = OutcomeObserver(batch=2, yield_for=30.0)

            # Caught up, runs waiting: it waits, observing nothing, until the scheduler clears the flag.
            ctx.runs.waiting = True
            first = asyncio.create_task(observer.observe_once(ctx))
            await asyncio.sleep(0.5)
            assert not first.done() and await _unobserved(engine) == 3
            ctx.runs.waiting = False
            assert await asyncio.wait_for(first, 10) is True  # a batch of 2 of 3: more behind it
            assert await _unobserved(engine) == 1

            # It has a backlog now: it works it off at once, flag or not (never starved by a busy loop).
            ctx.runs.waiting = True
            assert await asyncio.wait_for(observer.observe_once(ctx), 10) is False
            assert await _unobserved(engine) == 0

            # Caught up again, and the flag never clears: it observes after yield_for all the same.
            await _ended_runs(engine, 1, prefix="late")
            bounded = OutcomeObserver(batch=2, yield_for=0.3)
            assert await asyncio.wait_for(bounded.observe_once(ctx), 10) is False
            assert await _unobserved(engine) == 0
        finally:
            await engine.dispose()

    asyncio.run(main())

