"""Outputs with the real local executor: a process writes ``$LEOFLOW_OUTPUTS``, the row holds them.

End to end through a subprocess, the executor's read after exit, the leader's check and the
statement that records the success (ADR 0014 decision 1). A task without declarations is given
no ``LEOFLOW_OUTPUTS``; bad outputs fail the try with the reason and retries apply.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.local.executor import LocalExecutor
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, rows, run_state, running_scheduler, task_states, trigger
from tests.scheduler.test_service_local import local, shell

TRIES = ("SELECT ti.task_id, tt.try_number, tt.state, tt.reason, tt.outputs, tt.outputs_bytes FROM task_tries tt "
         "JOIN task_instances ti ON ti.id = tt.task_instance_id ORDER BY ti.task_id, tt.try_number")


async def finished_run(s: Settings, spec: dict[str, Any]) -> tuple[str, list[Any]]:
    engine = make_async_engine(s.database, pool_size=4)
    try:
        await apply(engine, spec)
        async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
            run_id = await trigger(engine, spec["dag_id"])
            await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
        return run_id, [await run_state(engine, run_id), await task_states(engine, run_id), await rows(engine, TRIES)]
    finally:
        await engine.dispose()


def test_a_task_writes_its_outputs_and_the_row_holds_them(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    seen = tmp_path / "seen.txt"
    spec = {"dag_id": "outs", "tasks": [
        shell("list", """printf '{"n": 3, "files": ["a","b"]}' > "$LEOFLOW_OUTPUTS"; echo "$LEOFLOW_OUTPUTS" > "$S" """,
              env={"S": str(seen)}, outputs={"n": {"type": "integer"}, "files": {"type": "array"}}),
        shell("plain", 'echo "${LEOFLOW_OUTPUTS-unset}" >> "$S"', "list", env={"S": str(seen)})]}

    async def main() -> None:
        _, (state, tasks, tries) = await finished_run(s, spec)
        assert (state, tasks) == ("success", {"list": "success", "plain": "success"})
        assert tries == [("list", 1, "success", None, {"n": 3, "files": ["a", "b"]}, 28),
                         ("plain", 1, "success", None, None, None)]
        path, plain = seen.read_text().splitlines()
        assert Path(path).is_absolute() and path.endswith("/outputs.json") and Path(path).parent.parent.name == "tasks"
        assert plain == "unset"  # only a task that declares outputs is given the variable

    asyncio.run(main())


def test_bad_outputs_fail_the_try_with_the_reason_and_retries_apply(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    # Try 1 writes 10,000 bytes (read: 4,097 of them), try 2 a JSON array, try 3 good outputs.
    script = ('case "$LEOFLOW_TRY_NUMBER" in '
              '1) head -c 10000 /dev/zero | tr "\\0" x > "$LEOFLOW_OUTPUTS";; '
              '2) echo \'["uri", "s3://b/p0"]\' > "$LEOFLOW_OUTPUTS";; '
              '*) echo \'{"uri": "s3://b/p0"}\' > "$LEOFLOW_OUTPUTS";; esac')
    spec = {"dag_id": "bad-outs", "tasks": [
        shell("t", script, outputs={"uri": {"type": "string"}}, retries=2, retry_delay_seconds=0),
        shell("missing", "true", outputs={"uri": {"type": "string"}}),  # declared, never written
        shell("after", "true", "t")]}

    async def main() -> None:
        _, (state, tasks, tries) = await finished_run(s, spec)
        assert tasks == {"t": "success", "missing": "failed", "after": "success"}
        assert state == "failed"
        assert tries == [
            ("after", 1, "success", None, None, None),
            ("missing", 1, "failed", "required output 'uri' is missing", None, None),
            ("t", 1, "failed", "outputs are more than 4,096 bytes; at most 4,095 are allowed (pass a URI to larger "
                               "data)", None, None),
            ("t", 2, "failed", "outputs must be a JSON object, got an array", None, None),
            ("t", 3, "success", None, {"uri": "s3://b/p0"}, 21)]  # as written: echo adds a newline

    asyncio.run(main())
