"""The leader services supervisor: start on acquire, cancel on loss, stall and death watchdogs."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from leoflow.clock import SystemClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.election.supervisor import LeaderSupervisor
from leoflow.leadership import LeaderContext, LeaderService
from leoflow.settings import Settings, load_settings


class FakeExecutor:
    def __init__(self) -> None:
        self.stopped = False

    async def stop(self) -> None:
        self.stopped = True


class Busy:
    """Runs until cancelled; calls progress() only if told to."""

    name = "busy"

    def __init__(self, progress: bool) -> None:
        self.progress = progress
        self.cancelled = False
        self.terms: list[int] = []

    async def run(self, ctx: LeaderContext) -> None:
        self.terms.append(ctx.term)
        try:
            while True:
                if self.progress:
                    ctx.progress()
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            self.cancelled = True
            raise


class Crashes:
    name = "crashes"

    async def run(self, ctx: LeaderContext) -> None:
        raise RuntimeError("boom")


def _settings(url: str, stall: str = "60") -> Settings:
    return load_settings({"LEOFLOW_DATABASE_URL": url, "LEOFLOW_NODE_ID": "n1", "LEOFLOW_LOG_FORMAT": "text",
                          "LEOFLOW_SCHEDULER_STALL_TIMEOUT": stall, "LEOFLOW_SHUTDOWN_GRACE": "2"})


async def _with_supervisor(settings: Settings, services: list[LeaderService], body: Any) -> Any:
    engine = make_async_engine(settings.database, pool_size=2)
    executor = FakeExecutor()
    reasons: list[str] = []
    sup = LeaderSupervisor(settings, Database(engine), SystemClock(), step_down=reasons.append,
                           factory=lambda s: (executor, list(services)))
    runner = asyncio.create_task(sup.run())
    try:
        return await body(sup, executor, reasons)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await engine.dispose()


async def _until(predicate: Any, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_start_on_acquire_cancel_on_loss_and_work_resumed_event(database_url: str) -> None:
    settings = _settings(database_url)
    busy = Busy(progress=True)

    async def body(sup: LeaderSupervisor, executor: FakeExecutor, reasons: list[str]) -> None:
        loop = asyncio.get_running_loop()
        sup.notify(loop, "acquired", 7)
        await _until(lambda: busy.terms == [7])

        def started_events() -> list[tuple[int]]:
            with psycopg.connect(database_url) as conn:
                return conn.execute("SELECT term FROM cluster_events WHERE kind = 'scheduler_started'").fetchall()
        deadline = loop.time() + 30
        while not await asyncio.to_thread(started_events):  # recorded once, after the first progress()
            assert loop.time() < deadline, "no scheduler_started event"
            await asyncio.sleep(0.05)
        sup.notify(loop, "lost", 6, "lost", "stale term")  # not the current term: ignored
        await asyncio.sleep(0.2)
        assert not busy.cancelled
        sup.notify(loop, "lost", 7, "lost", "keepalive failed")
        await _until(lambda: busy.cancelled and executor.stopped)
        assert sup.term is None and reasons == []

    asyncio.run(_with_supervisor(settings, [busy], body))
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT term FROM cluster_events WHERE kind = 'scheduler_started'").fetchall() == [(7,)]


def test_stalled_scheduler_makes_the_leader_step_down(database_url: str) -> None:
    settings = _settings(database_url, stall="0.5")

    async def body(sup: LeaderSupervisor, executor: FakeExecutor, reasons: list[str]) -> None:
        sup.notify(asyncio.get_running_loop(), "acquired", 3)
        await _until(lambda: reasons == ["scheduler stalled"])

    asyncio.run(_with_supervisor(settings, [Busy(progress=False)], body))


def test_progressing_scheduler_is_not_stalled(database_url: str) -> None:
    settings = _settings(database_url, stall="0.5")

    async def body(sup: LeaderSupervisor, executor: FakeExecutor, reasons: list[str]) -> None:
        sup.notify(asyncio.get_running_loop(), "acquired", 3)
        await asyncio.sleep(1.5)
        assert reasons == []

    asyncio.run(_with_supervisor(settings, [Busy(progress=True)], body))


def test_dead_service_makes_the_leader_step_down(database_url: str) -> None:
    settings = _settings(database_url)
    busy = Busy(progress=True)

    async def body(sup: LeaderSupervisor, executor: FakeExecutor, reasons: list[str]) -> None:
        sup.notify(asyncio.get_running_loop(), "acquired", 4)
        await _until(lambda: reasons == ["crashes died: RuntimeError"])

    asyncio.run(_with_supervisor(settings, [busy, Crashes()], body))
