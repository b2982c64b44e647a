"""Helpers for scheduler tests: a leadership term in the database, a running service, polling."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from leoflow.clock import Clock, SystemClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.executor.base import Executor
from leoflow.leadership import LeaderContext
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.scheduler.service import SchedulerService
from leoflow.settings import SchedulerSettings, Settings

T = TypeVar("T")


def fast(settings: Settings, **scheduler: Any) -> Settings:
    """Settings with a short tick interval (tests must not wait seconds for a tick)."""
    values = {"interval": 0.2, "parallelism": 128, "max_retry_delay": 3600.0, **scheduler}
    return settings.replace(scheduler=SchedulerSettings(**values))


async def set_term(engine: AsyncEngine, cluster: str, term: int, node_id: str = "test-node") -> None:
    """Make ``term`` the cluster's newest term (what the elector does on acquire)."""
    async with engine.begin() as conn:
        await conn.execute(text("""
            INSERT INTO cluster_leadership (cluster, term, node_id) VALUES (:c, :t, :n)
            ON CONFLICT (cluster) DO UPDATE SET term = excluded.term, node_id = excluded.node_id
        """), {"c": cluster, "t": term, "n": node_id})


async def apply(engine: AsyncEngine, doc: dict[str, Any], clock: Clock | None = None) -> None:
    async with engine.begin() as conn:
        await dag_store.apply_dag(conn, parse_dag_spec(doc), clock=clock or SystemClock())


async def trigger(engine: AsyncEngine, dag_id: str, run_id: str | None = None, clock: Clock | None = None) -> str:
    async with engine.begin() as conn:
        return await run_store.trigger_run(conn, dag_id, run_id=run_id, conf={}, clock=clock or SystemClock())


async def rows(engine: AsyncEngine, sql: str, **params: Any) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def task_states(engine: AsyncEngine, run_id: str) -> dict[str, str]:
    return dict(await rows(engine, "SELECT ti.task_id, ti.state FROM task_instances ti "
                           "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=run_id))


async def run_state(engine: AsyncEngine, run_id: str) -> str | None:
    found = await rows(engine, "SELECT state FROM dag_runs WHERE run_id = :r", r=run_id)
    return found[0][0] if found else None


async def eventually(probe: Callable[[], Awaitable[T]], until: Callable[[T], bool], *, timeout: float = 30.0,
                     every: float = 0.05) -> T:
    """Poll ``probe`` until ``until(value)``; fail with the last value after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if until(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s; last value: {value!r}")
        await asyncio.sleep(every)


@dataclasses.dataclass
class RunningScheduler:
    service: SchedulerService
    task: asyncio.Task[None]
    ctx: LeaderContext


@contextlib.asynccontextmanager
async def running_scheduler(settings: Settings, executor: Executor, *, term: int = 1,
                            clock: Clock | None = None, engine: AsyncEngine | None = None,
                            set_newest: bool = True) -> AsyncIterator[RunningScheduler]:
    """A SchedulerService running under ``term`` until the block exits (then executor.stop())."""
    own = engine is None
    engine = engine or make_async_engine(settings.database, pool_size=4, application_name="leoflow-test-sched")
    if set_newest:
        await set_term(engine, settings.cluster.name, term)
    ctx = LeaderContext(term=term, settings=settings, db=Database(engine), clock=clock or SystemClock())
    service = SchedulerService(executor)
    task = asyncio.create_task(service.run(ctx), name=f"test-scheduler-term-{term}")
    try:
        yield RunningScheduler(service, task, ctx)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await executor.stop()
        if own:
            await engine.dispose()


async def in_conn(engine: AsyncEngine, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    async with engine.begin() as conn:
        return await fn(conn)


def process_alive(pid: int) -> bool:
    """Whether the process ``pid`` still runs: a zombie (exited, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
