"""Failure modes the scheduling loop handles, each injected for real (memory executor, real Postgres)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import REGISTRY
from sqlalchemy import text

from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.memory import MemoryExecutor
from leoflow.model.tries import TaskLaunch
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, fast, rows, run_state, running_scheduler, task_states, trigger


def container(task_id: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], "depends_on": list(deps), **extra}


class FlakySubmitExecutor(MemoryExecutor):
    """Refuses the first submit of each task with an exception (an executor bug or API outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    async def submit(self, launch: TaskLaunch) -> None:
        if launch.key.try_number == 1:
            self.refused.append(launch.key.task_id)
            raise RuntimeError("executor backend unavailable")
        await super().submit(launch)


def test_executor_submit_error_fails_the_try_and_the_retry_runs(settings: Settings) -> None:
    settings = fast(settings)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = FlakySubmitExecutor()
        try:
            await apply(engine, {"dag_id": "flaky", "tasks": [container("a", retries=1, retry_delay_seconds=0)]})
            handed_before = REGISTRY.get_sample_value("leoflow_scheduler_tasks_queued_total") or 0.0
            async with running_scheduler(settings, executor, engine=engine):
                run_id = await trigger(engine, "flaky")
                await eventually(lambda: run_state(engine, run_id), lambda s: s in ("success", "failed"))
            assert await run_state(engine, run_id) == "success"
            assert executor.refused == ["a"]
            # Only the try the executor took counts as handed over.
            assert REGISTRY.get_sample_value("leoflow_scheduler_tasks_queued_total") == handed_before + 1
            tries = await rows(engine, "SELECT try_number, state, reason FROM task_tries ORDER BY try_number")
            assert tries[0][:2] == (1, "failed") and "executor backend unavailable" in tries[0][2]
            assert tries[1][:2] == (2, "success")
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_lost_listen_connection_is_reconnected_and_triggers_still_wake_the_leader(settings: Settings) -> None:
    settings = fast(settings, interval=60.0)  # without NOTIFY nothing would happen for a minute

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "wake", "tasks": [container("a")]})
            async with running_scheduler(settings, MemoryExecutor(), engine=engine):
                listeners = "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'leoflow-listen:%'"
                [(old_pid,)] = await eventually(lambda: rows(engine, listeners), lambda r: len(r) == 1)
                async with engine.begin() as conn:
                    await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": old_pid})
                await eventually(lambda: rows(engine, listeners), lambda r: len(r) == 1 and r[0][0] != old_pid)
                run_id = await trigger(engine, "wake")
                await eventually(lambda: run_state(engine, run_id), lambda s: s == "success", timeout=20)
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_database_connections_killed_mid_run_the_loop_recovers(settings: Settings) -> None:
    settings = fast(settings)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = MemoryExecutor(mode="manual")
        try:
            await apply(engine, {"dag_id": "chain", "tasks": [container("a"), container("b", "a")]})
            async with running_scheduler(settings, executor, engine=engine) as sched:
                run_id = await trigger(engine, "chain")
                await eventually(lambda: asyncio.sleep(0, executor.running()), lambda r: len(r) == 1)
                # Kill every server process of the scheduler's pool (as a Postgres restart would).
                async with engine.begin() as conn:
                    await conn.execute(text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = 'leoflow-test-sched' AND pid <> pg_backend_pid()"))
                for key in executor.running():
                    await executor.complete(key)
                await eventually(lambda: asyncio.sleep(0, executor.running()), lambda r: len(r) == 1, timeout=20)
                for key in executor.running():
                    await executor.complete(key)
                await eventually(lambda: run_state(engine, run_id), lambda s: s == "success", timeout=20)
                assert not sched.task.done()
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_runs_keep_the_version_they_started_with(settings: Settings) -> None:
    settings = fast(settings)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = MemoryExecutor(mode="manual")
        try:
            await apply(engine, {"dag_id": "v", "tasks": [container("a")]})
            async with running_scheduler(settings, executor, engine=engine):
                first = await trigger(engine, "v", run_id="first")
                await eventually(lambda: asyncio.sleep(0, executor.running()), lambda r: len(r) == 1)
                await apply(engine, {"dag_id": "v", "tasks": [container("a"), container("b", "a")]})
                second = await trigger(engine, "v", run_id="second")
                for _ in range(100):
                    for key in executor.running():
                        await executor.complete(key)
                    if {await run_state(engine, first), await run_state(engine, second)} == {"success"}:
                        break
                    await asyncio.sleep(0.1)
            assert await task_states(engine, first) == {"a": "success"}
            assert await task_states(engine, second) == {"a": "success", "b": "success"}
        finally:
            await engine.dispose()

    asyncio.run(main())
