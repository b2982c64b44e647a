"""Every try's environment carries its run context (conf, ids, try number, logical date), on the
first launch, on a retry, and when a new leader resubmits tries queued under the old one."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from leoflow.clock import SystemClock
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.errors import ValidationFailed
from leoflow.executor.base import Report
from leoflow.executor.memory import MemoryExecutor, Outcome
from leoflow.leadership import LeaderContext
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.tries import TaskLaunch, TryKey
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, fast, in_conn, run_state, running_scheduler

CONF = {"day": "2026-11-21", "regions": ["eu", "us"], "note": "héllo"}


def dag(**task: Any) -> dict[str, Any]:
    return {"dag_id": "ctx", "tasks": [{"id": "work", "image": "busybox", "command": ["true"],
                                        "env": {"MINE": "1"}, **task}]}


async def trigger_with_conf(engine: Any, run_id: str) -> None:
    await in_conn(engine, lambda conn: run_store.trigger_run(conn, "ctx", run_id=run_id, conf=CONF,
                                                             clock=SystemClock()))


def test_first_try_and_retry_see_the_run_context(settings: Settings) -> None:
    settings = fast(settings)

    def fail_first(launch: TaskLaunch) -> Outcome:
        return ("failed", 1, "first try fails") if launch.key.try_number == 1 else ("success", 0, None)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        executor = MemoryExecutor(outcome=fail_first)
        try:
            await apply(engine, dag(retries=1, retry_delay_seconds=0))
            async with running_scheduler(settings, executor, engine=engine):
                await trigger_with_conf(engine, "r1")
                await eventually(lambda: run_state(engine, "r1"), lambda s: s == "success", timeout=20)
        finally:
            await engine.dispose()
        envs = {key.try_number: t.launch.env for key, t in executor.world.tries.items()}
        assert sorted(envs) == [1, 2]
        for number, env in envs.items():
            assert env["MINE"] == "1"
            assert env["LEOFLOW_DAG_ID"] == "ctx" and env["LEOFLOW_RUN_ID"] == "r1"
            assert env["LEOFLOW_TASK_ID"] == "work" and env["LEOFLOW_TRY_NUMBER"] == str(number)
            logical = datetime.fromisoformat(env["LEOFLOW_LOGICAL_DATE"])  # a manual run's: its trigger time
            assert logical.utcoffset() == timedelta(0) and abs(datetime.now(UTC) - logical) < timedelta(hours=1)
            assert json.loads(env["LEOFLOW_RUN_CONF"]) == CONF

    asyncio.run(main())


class HoldingExecutor:
    """Accepts tries and never reports: they stay queued, as when a leader dies right after queueing."""

    name = "holding"

    def __init__(self) -> None:
        self.launches: list[TaskLaunch] = []

    async def start(self, ctx: LeaderContext, report: Report) -> None:
        return None

    async def submit(self, launch: TaskLaunch) -> None:
        self.launches.append(launch)

    async def count(self) -> int:
        return len(self.launches)

    async def cancel(self, key: TryKey) -> None:
        return None

    async def logs(self, key: TryKey) -> str | None:
        return None

    async def stop(self) -> None:
        return None


def test_a_new_leader_resubmits_queued_tries_with_the_same_context(settings: Settings) -> None:
    settings = fast(settings)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        first, second = HoldingExecutor(), HoldingExecutor()
        try:
            await apply(engine, dag())
            async with running_scheduler(settings, first, engine=engine, term=1):
                await trigger_with_conf(engine, "r1")
                await eventually(first.count, lambda n: n == 1)
            async with running_scheduler(settings, second, engine=engine, term=2):
                await eventually(second.count, lambda n: n == 1)
        finally:
            await engine.dispose()
        assert second.launches[0].key == first.launches[0].key
        assert second.launches[0].env == first.launches[0].env
        assert json.loads(second.launches[0].env["LEOFLOW_RUN_CONF"]) == CONF

    asyncio.run(main())


def test_specs_may_not_define_leoflow_variables() -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(dag(env={"LEOFLOW_RUN_ID": "forged"}))
    assert info.value.path == "tasks[0].env.LEOFLOW_RUN_ID"
