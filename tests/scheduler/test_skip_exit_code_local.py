"""``skip_on_exit_code`` and a task without ``command``, end to end: the real local executor, real
subprocesses, real PostgreSQL.

A try that exits with a listed code is ``skipped`` (try and task instance), never retried, and its
downstream counts a skip; any other code still fails and retries. A stored task without a command
(the image's entrypoint) reaching the local executor fails its try with the words the API uses.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.local.executor import LocalExecutor
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.entrypoint import LOCAL_NEEDS_COMMAND
from leoflow.model.tries import StatusUpdate, TryKey
from leoflow.scheduler.transitions import skipped_by_exit_code
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, rows, run_state, running_scheduler, trigger
from tests.scheduler.stepper import insert_version
from tests.scheduler.test_service_local import local, shell


def test_a_listed_exit_code_skips_the_try_and_the_task_and_downstream_sees_a_skip(settings: Settings,
                                                                                  tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "skips", "tasks": [
                shell("check", "exit 99", skip_on_exit_code=[99, 3], retries=2, retry_delay_seconds=0.1),
                shell("other", "exit 7", skip_on_exit_code=[99], retries=1, retry_delay_seconds=0.1),
                shell("after", "true", "check"), shell("cleanup", "true", "check", trigger_rule="all_done")]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "skips")
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            found = await rows(engine, "SELECT ti.task_id, ti.state, ti.reason FROM task_instances ti "
                               "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=run_id)
            tasks = {t: (state, reason) for t, state, reason in found}
            assert tasks["check"] == ("skipped", "exit code 99 is in skip_on_exit_code")
            assert tasks["after"] == ("skipped", "skipped by trigger rule")
            assert tasks["cleanup"][0] == "success"
            assert tasks["other"] == ("failed", "exited with code 7")
            tries = await rows(engine, "SELECT ti.task_id, tt.try_number, tt.state, tt.exit_code FROM task_tries tt "
                               "JOIN task_instances ti ON ti.id = tt.task_instance_id ORDER BY 1, 2")
            assert [t for t in tries if t[0] == "check"] == [("check", 1, "skipped", 99)]  # no retry
            assert [t[2] for t in tries if t[0] == "other"] == ["failed", "failed"]  # retried
            assert await run_state(engine, run_id) == "failed"  # by `other`, not by the skip
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_a_stored_task_without_command_fails_its_try_on_the_local_executor(settings: Settings,
                                                                           tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            # As the API of a cluster on the kubernetes executor stored it (canonical form: command []).
            await insert_version(engine, "entry", {"dag_id": "entry", "tasks": [
                {"id": "serve", "kind": "container", "image": "ghcr.io/acme/etl:5.1", "command": [], "args": ["x"],
                 "env": {}, "resources": {}, "retries": 0, "retry_delay_seconds": 30, "depends_on": []}]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "entry")
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            [(state, reason)] = await rows(engine, "SELECT ti.state, ti.reason FROM task_instances ti "
                                           "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=run_id)
            assert (state, reason) == ("failed", LOCAL_NEEDS_COMMAND)
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_only_a_listed_non_zero_exit_code_of_a_failure_becomes_a_skip() -> None:
    task = parse_dag_spec({"dag_id": "d", "tasks": [shell("t", "true", skip_on_exit_code=[0, 99])]}).tasks[0]
    failed = StatusUpdate(TryKey("d", "r", "t", 1), "failed", datetime(2026, 1, 1, tzinfo=UTC), exit_code=99)
    assert skipped_by_exit_code(failed, task) == failed._replace(state="skipped",
                                                                 reason="exit code 99 is in skip_on_exit_code")
    for other in (failed._replace(exit_code=98), failed._replace(exit_code=None), failed._replace(exit_code=0),
                  failed._replace(state="success")):
        assert skipped_by_exit_code(other, task) == other
    assert skipped_by_exit_code(failed, None) == failed
