"""Exit tasks and a retry policy end to end: the real local executor, real subprocesses, real PostgreSQL.

The exit task reads the body's verdict from its environment and runs after the body failed; its
success leaves the run failed (ADR 0014, decision 7). A retry policy retries only the listed exit
code (decision 5).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.local.executor import LocalExecutor
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, rows, run_state, running_scheduler, trigger
from tests.scheduler.test_service_local import local, shell


def test_an_exit_task_sees_the_failed_body_and_leaves_the_run_failed(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    seen = tmp_path / "seen.txt"

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {
                "dag_id": "exits-local",
                "tasks": [shell("flaky", "echo $LEOFLOW_TRY_NUMBER >> " + str(tmp_path / "tries.txt") + "; exit 75",
                                retries=3, retry_delay_seconds=0.1, retry_policy={"on_exit_codes": [75],
                                                                                 "when": "try.number < 2"}),
                          shell("after", "true", "flaky")],
                "on_exit": [shell("notify", f'printf "%s|%s" "$LEOFLOW_RUN_STATE" "$LEOFLOW_RUN_REASON" > {seen}')]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "exits-local")
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            found = await rows(engine, "SELECT ti.task_id, ti.state, ti.reason FROM task_instances ti "
                               "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=run_id)
            tasks = {t: (state, reason) for t, state, reason in found}
            reason = "exited with code 75 (not retried: retry_policy.when was false)"
            assert tasks["flaky"] == ("failed", reason)
            assert (tmp_path / "tries.txt").read_text().split() == ["1", "2"]  # retried once, then the policy said no
            assert tasks["after"][0] == "upstream_failed"
            assert tasks["notify"][0] == "success"
            assert seen.read_text() == f"failed|task 'flaky' failed: {reason}"
            [(state, run_reason, body_state)] = await rows(
                engine, "SELECT state, reason, body_state FROM dag_runs WHERE run_id = :r", r=run_id)
            assert (state, run_reason, body_state) == ("failed", f"task 'flaky' failed: {reason}", "failed")
        finally:
            await engine.dispose()

    asyncio.run(main())
