"""A scheduler driven one tick at a time: no loop, no sleeps, no executor of its own.

:class:`Stepper` owns a :class:`SchedulerCore` under a leadership term on the test's real
PostgreSQL and a :class:`RecordingExecutor` that only records what it is handed. The test plays
the executor: it appends reports to the core's inbox (:meth:`Stepper.report`) and calls
:meth:`Stepper.tick`, then looks at the database. Whatever a tick did is therefore visible right
after it — "terminal in the same step" is an assertion, not a race.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.clock import FakeClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.base import Report
from leoflow.leadership import LeaderContext
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey, TryState
from leoflow.scheduler.core import SchedulerCore
from leoflow.settings import Settings
from tests.scheduler.harness import apply, fast, rows, set_term, trigger

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


@dataclass
class RecordingExecutor:
    """An executor that launches nothing: it records launches and cancels; the test reports."""

    name: str = "recording"
    launched: list[TaskLaunch] = field(default_factory=list)
    cancelled: list[TryKey] = field(default_factory=list)

    async def start(self, ctx: LeaderContext, report: Report) -> None:
        return None

    async def submit(self, launch: TaskLaunch) -> None:
        self.launched.append(launch)

    async def cancel(self, key: TryKey) -> None:
        self.cancelled.append(key)

    async def logs(self, key: TryKey) -> str | None:
        return None

    async def stop(self) -> None:
        return None


@dataclass
class Stepper:
    engine: AsyncEngine
    core: SchedulerCore
    executor: RecordingExecutor
    clock: FakeClock

    async def tick(self, *, periodic: bool = False) -> bool:
        if periodic:
            self.core.poke()
        return await self.core.tick()

    async def settle(self, limit: int = 30) -> int:
        """Tick until a tick changes nothing; returns the ticks taken."""
        for n in range(1, limit + 1):
            if not await self.tick():
                return n
        raise AssertionError(f"the scheduler was still busy after {limit} ticks")

    def key(self, dag_id: str, run_id: str, task_id: str) -> TryKey:
        tries = [launch.key for launch in self.executor.launched
                 if (launch.key.dag_id, launch.key.run_id, launch.key.task_id) == (dag_id, run_id, task_id)]
        assert tries, f"{dag_id}/{run_id}/{task_id} was never launched; launched: {self.executor.launched}"
        return max(tries, key=lambda k: k.try_number)

    async def launch_alone(self, dag_id: str) -> tuple[str, TryKey]:
        """A DAG of one container task ``a``, triggered and handed to the executor: (run id, a's try)."""
        await apply(self.engine, {"dag_id": dag_id, "tasks": [container("a")]})
        run_id = await trigger(self.engine, dag_id)
        await self.tick(periodic=True)
        return run_id, self.key(dag_id, run_id, "a")

    def report(self, key: TryKey, state: TryState, *, exit_code: int | None = None, reason: str | None = None,
               seconds: float = 0.0) -> None:
        self.core.inbox.append(StatusUpdate(key=key, state=state, at=self.clock.now() + timedelta(seconds=seconds),
                                            exit_code=exit_code, reason=reason))

    def finish(self, dag_id: str, run_id: str, task_id: str, state: TryState = "success", **kw: Any) -> None:
        """Report the task's latest try running and then ended (``state``)."""
        key = self.key(dag_id, run_id, task_id)
        self.report(key, "running")
        self.report(key, state, exit_code=0 if state == "success" else 1, **kw)

    async def run(self, run_id: str) -> tuple[str, str | None]:
        [(state, reason)] = await rows(self.engine, "SELECT state, reason FROM dag_runs WHERE run_id = :r", r=run_id)
        return state, reason

    async def tasks(self, run_id: str) -> dict[str, tuple[str, str | None]]:
        found = await rows(self.engine, "SELECT ti.task_id, ti.state, ti.reason FROM task_instances ti "
                           "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=run_id)
        return {t: (s, reason) for t, s, reason in found}

    async def sql(self, statement: str, **params: Any) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(text(statement), params)


@contextlib.asynccontextmanager
async def stepper(settings: Settings, *, term: int = 1, batch_size: int | None = None,
                  engine: AsyncEngine | None = None, clock: FakeClock | None = None, queue_on_count: bool = True,
                  **scheduler: Any) -> AsyncIterator[Stepper]:
    """A :class:`Stepper` under ``term`` (made the newest); the engine is disposed at the end if owned.
    ``queue_on_count``: :class:`~leoflow.scheduler.core.SchedulerCore`'s."""
    own = engine is None
    engine = engine or make_async_engine(settings.database, pool_size=4, application_name="leoflow-test-stepper")
    clock = clock or FakeClock(T0)
    try:
        await set_term(engine, settings.cluster.name, term)
        ctx = LeaderContext(term=term, settings=fast(settings, **scheduler), db=Database(engine), clock=clock)
        executor = RecordingExecutor()
        extra = {} if batch_size is None else {"batch_size": batch_size}
        core = SchedulerCore(ctx, executor, queue_on_count=queue_on_count, **extra)
        try:
            yield Stepper(engine, core, executor, clock)
        finally:
            await core.close()
    finally:
        if own:
            await engine.dispose()


def container(task_id: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], "depends_on": list(deps), **extra}


async def insert_version(engine: AsyncEngine, dag_id: str, spec: dict[str, Any] | str) -> int:
    """Store ``spec`` as-is as the DAG's new current version (what an older release or a hand edit
    could have left in the database): no validation on the way in."""
    body = spec if isinstance(spec, str) else json.dumps(spec)
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO dags (dag_id) VALUES (:d) ON CONFLICT DO NOTHING"), {"d": dag_id})
        vid = (await conn.execute(text("""
            INSERT INTO dag_versions (dag_id, version, spec, spec_hash)
            SELECT CAST(:d AS text), coalesce(max(version), 0) + 1, CAST(:spec AS jsonb), 'hand-written'
            FROM dag_versions WHERE dag_id = :d RETURNING id
        """), {"d": dag_id, "spec": body})).scalar_one()
        await conn.execute(text("UPDATE dags SET current_version_id = :v WHERE dag_id = :d"), {"v": vid, "d": dag_id})
    return int(vid)
