"""The scheduling loop with the real local executor: real subprocesses, real PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from leoflow.clock import SystemClock
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.executor.local.executor import LocalExecutor
from leoflow.settings import Settings
from tests.scheduler.harness import (
    apply,
    eventually,
    fast,
    process_alive,
    rows,
    run_state,
    running_scheduler,
    set_term,
    task_states,
    trigger,
)


def local(settings: Settings, home: Path, **scheduler: Any) -> Settings:
    s = fast(settings, **scheduler)
    return s.replace(home=home, executor=dataclasses.replace(s.executor, kind="local", local_parallelism=4))


def shell(task_id: str, script: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["sh", "-c", script], "depends_on": list(deps), **extra}


def test_diamond_runs_in_dependency_order(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    journal = tmp_path / "journal.txt"

    def step(name: str, *deps: str) -> dict[str, Any]:
        return shell(name, f'echo "start {name}" >> "$J"; sleep 0.2; echo "end {name}" >> "$J"', *deps,
                     env={"J": str(journal)})

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "diamond", "tasks": [step("a"), step("b", "a"), step("c", "a"),
                                                                 step("d", "b", "c")]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "diamond")
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            assert await run_state(engine, run_id) == "success"
            lines = journal.read_text().split("\n")[:-1]
            pos = {line: i for i, line in enumerate(lines)}
            assert len(lines) == 8
            assert pos["end a"] < pos["start b"] and pos["end a"] < pos["start c"]
            assert pos["end b"] < pos["start d"] and pos["end c"] < pos["start d"]
            logs = await rows(engine, "SELECT count(*) FROM task_logs")
            assert logs[0][0] == 4
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_failing_task_retries_then_fails_run_and_downstream_is_upstream_failed(settings: Settings,
                                                                              tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "flaky", "tasks": [
                shell("broken", "echo trying; exit 7", retries=1, retry_delay_seconds=0.2),
                shell("after", "echo never", "broken")]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "flaky")
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            assert await run_state(engine, run_id) == "failed"
            assert await task_states(engine, run_id) == {"broken": "failed", "after": "upstream_failed"}
            tries = await rows(engine, "SELECT tt.try_number, tt.state, tt.exit_code FROM task_tries tt "
                               "ORDER BY tt.try_number")
            assert tries == [(1, "failed", 7), (2, "failed", 7)]
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_timeout_kills_the_task(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    pidfile = tmp_path / "pid"

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "stuck", "tasks": [
                shell("sleeper", f'echo $$ > "{pidfile}"; exec sleep 120', timeout_seconds=1)]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "stuck")
                # the shell creates the file before it writes the pid: wait for the whole line
                await eventually(lambda: asyncio.sleep(0, pidfile.exists() and pidfile.read_text().endswith("\n")),
                                 bool, timeout=30)
                pid = int(pidfile.read_text())
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
                await eventually(lambda: asyncio.sleep(0, process_alive(pid)), lambda alive: not alive, timeout=30)
            assert await task_states(engine, run_id) == {"sleeper": "failed"}
            [(reason,)] = await rows(engine, "SELECT reason FROM task_instances")
            assert "timed out" in reason
            [(started, ended)] = await rows(engine, "SELECT started_at, ended_at FROM task_instances")
            assert (ended - started).total_seconds() < 60  # nowhere near the 120 s the task wanted
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_two_schedulers_with_different_terms_never_double_create_or_double_queue(settings: Settings,
                                                                                 tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home", interval=0.1, parallelism=2)  # forces work across both terms
    journal = tmp_path / "journal.txt"
    now = datetime.now(UTC)
    start = (now - timedelta(hours=5)).replace(minute=0, second=0, microsecond=0)
    step = shell("x", 'pwd >> "$J"; sleep 0.1', env={"J": str(journal)})
    tasks = [dict(step, id=f"t{i}") for i in range(4)]

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=6)
        try:
            await apply(engine, {"dag_id": "race", "schedule": "@hourly", "catchup": True,
                                 "start_date": start.isoformat(), "max_active_runs": 10, "tasks": tasks})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine, term=1) as old:
                await eventually(lambda: rows(engine, "SELECT count(*) FROM task_tries"), lambda r: r[0][0] >= 2)
                # A newer leader appears while the old one is mid-work (as after a partition).
                await set_term(engine, s.cluster.name, 2, node_id="newer")
                async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine, term=2,
                                             set_newest=False):
                    await eventually(lambda: asyncio.sleep(0, old.task.done()), bool, timeout=30)
                    assert old.task.exception() is None  # it stopped on FencedOut, quietly
                    await eventually(lambda: rows(engine, "SELECT count(*) FILTER (WHERE state = 'success'), "
                                                  "count(*) FROM dag_runs"),
                                     lambda r: r[0][0] == r[0][1] >= 5, timeout=120)
            runs = await rows(engine, "SELECT logical_date, count(*) FROM dag_runs GROUP BY logical_date")
            assert all(n == 1 for _, n in runs) and len(runs) >= 5
            per_ti = await rows(engine, "SELECT task_instance_id, count(*) FROM task_tries GROUP BY task_instance_id")
            assert len(per_ti) == 4 * len(runs) and all(n == 1 for _, n in per_ti)
            executions = Counter(journal.read_text().split())
            assert len(executions) == 4 * len(runs) and set(executions.values()) == {1}
            terms = {t for (t,) in await rows(engine, "SELECT DISTINCT term FROM task_tries")}
            assert terms <= {1, 2} and 2 in terms
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_a_subprocess_reads_its_run_context_and_none_of_leoflows_settings(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = local(settings, tmp_path / "home")
    monkeypatch.setenv("LEOFLOW_DATABASE_URL", "postgresql://secret@nowhere/db")  # what a replica has
    script = ('echo "conf=$LEOFLOW_RUN_CONF try=$LEOFLOW_TRY_NUMBER run=$LEOFLOW_RUN_ID task=$LEOFLOW_TASK_ID"; '
              'echo "db=${LEOFLOW_DATABASE_URL:-unset}"')

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "ctx", "tasks": [shell("show", script)]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                async with engine.begin() as conn:
                    await run_store.trigger_run(conn, "ctx", run_id="r1", conf={"day": "mon"}, clock=SystemClock())
                await eventually(lambda: run_state(engine, "r1"), lambda st: st in ("success", "failed"), timeout=60)
            assert await run_state(engine, "r1") == "success"
            (content,), = await rows(engine, "SELECT content FROM task_logs")
            assert 'conf={"day":"mon"} try=1 run=r1 task=show' in content
            assert "db=unset" in content
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_a_running_try_shows_its_output_so_far_then_the_whole_of_it(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    go_on = tmp_path / "go-on"
    script = 'echo first; while [ ! -f "$GO_ON" ]; do sleep 0.05; done; echo second'

    async def stored() -> tuple[str | None, bool, bool]:
        found = await rows(engine, "SELECT l.content, tt.logs_shipped_at IS NOT NULL, tt.ended_at IS NOT NULL"
                                   " FROM task_tries tt LEFT JOIN task_logs l ON l.task_try_id = tt.id")
        return found[0] if found else (None, False, False)

    engine = make_async_engine(s.database, pool_size=4)

    async def main() -> None:
        try:
            await apply(engine, {"dag_id": "slow", "tasks": [shell("talk", script, env={"GO_ON": str(go_on)})]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "slow")
                partial = await eventually(stored, lambda row: row[0] is not None, timeout=30)
                assert partial == ("first\n", False, False)  # while running: stored, not complete
                go_on.touch()
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=30)
            assert await run_state(engine, run_id) == "success"
            assert await stored() == ("first\nsecond\n", True, True)
        finally:
            await engine.dispose()

    asyncio.run(main())
