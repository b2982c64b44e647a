"""Artifacts on the local executor, end to end: the real scheduler, real subprocesses, real
PostgreSQL and a file:// bucket. A producer writes a directory, its consumer reads it at its input
path; a required output that is missing fails its try with a reason naming it, an optional one
does not; without object storage a task declaring artifacts fails saying why."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.artifacts import NO_STORAGE
from leoflow.executor.local.executor import LocalExecutor, archives_settled
from leoflow.settings import Settings
from leoflow.storage.objects import ObjectStore
from tests.scheduler.harness import apply, eventually, rows, run_state, running_scheduler, trigger
from tests.scheduler.test_service_local import local, shell

PRODUCE = ('mkdir -p "$LEOFLOW_ARTIFACTS/out/sub" && echo alpha > "$LEOFLOW_ARTIFACTS/out/a.txt" && '
           'head -c 300000 /dev/urandom > "$LEOFLOW_ARTIFACTS/out/sub/noise.bin" && '
           'sha256sum "$LEOFLOW_ARTIFACTS/out/sub/noise.bin" | cut -d" " -f1 > "$LEOFLOW_ARTIFACTS/out/sum"')
CONSUME = ('test "$(cat "$LEOFLOW_ARTIFACTS/in/d/a.txt")" = alpha && '
           'test "$(sha256sum "$LEOFLOW_ARTIFACTS/in/d/sub/noise.bin" | cut -d" " -f1)" = '
           '"$(cat "$LEOFLOW_ARTIFACTS/in/d/sum")" && test ! -e "$LEOFLOW_ARTIFACTS/in/maybe"')


def dag() -> dict[str, Any]:
    return {"dag_id": "artifacts", "schedule": None, "tasks": [
        shell("produce", PRODUCE, artifacts={"outputs": [{"name": "data", "path": "out"},
                                                         {"name": "maybe", "path": "never", "optional": True}]}),
        shell("consume", CONSUME, "produce", artifacts={"inputs": [
            {"name": "d", "from": "{{ tasks.produce.artifacts.data }}", "path": "in/d"},
            {"name": "m", "from": "{{ tasks.produce.artifacts.maybe }}", "path": "in/maybe", "optional": True}]}),
        shell("lacking", "true", artifacts={"outputs": [{"name": "report", "path": "report.html"}]}),
        shell("needs", "true", "lacking", artifacts={"inputs": [
            {"name": "r", "from": "{{ tasks.lacking.artifacts.report }}", "path": "r.html"}]},
            trigger_rule="all_done"),
    ]}


async def _states(engine: Any, run_id: str) -> dict[str, tuple[str, str | None]]:
    found = await rows(engine, "SELECT ti.task_id, ti.state, ti.reason FROM task_instances ti "
                       "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=run_id)
    return {t: (state, reason) for t, state, reason in found}


def test_a_consumer_reads_the_directory_its_producer_wrote(settings: Settings, tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    s = local(settings, tmp_path / "home")
    s = s.replace(log_archive=dataclasses.replace(s.log_archive, url=bucket.as_uri()))

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, dag())
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "artifacts")
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=90)
            states = await _states(engine, run_id)
            assert states["produce"] == ("success", None)
            assert states["consume"] == ("success", None), states["consume"]
            assert states["lacking"][0] == "failed"
            assert "artifact 'report': nothing at its path" in (states["lacking"][1] or "")
            assert states["needs"][0] == "failed"
            assert "input artifact 'r'" in (states["needs"][1] or "")
            index = await rows(engine, "SELECT ti.task_id, a.name, a.complete, a.kind, a.size_bytes, a.object_key "
                               "FROM task_artifacts a JOIN task_tries tt ON tt.id = a.task_try_id "
                               "JOIN task_instances ti ON ti.id = tt.task_instance_id ORDER BY 1, 2")
            assert [(t, n, c, k) for t, n, c, k, _, _ in index] == [
                ("lacking", "report", False, None), ("produce", "data", True, "directory"),
                ("produce", "maybe", False, None)]
            assert index[1][4] > 300_000
            keys = await ObjectStore(bucket.as_uri()).keys("artifacts")
            assert keys == [index[1][5]]
        finally:
            await archives_settled(60)  # the tries' log archives outlive the scheduler by design
            await engine.dispose()

    asyncio.run(main())


def test_without_object_storage_a_task_declaring_artifacts_fails_saying_so(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    s = s.replace(log_archive=dataclasses.replace(s.log_archive, url="off"))

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "artifacts", "schedule": None, "tasks": [
                shell("produce", "true", artifacts={"outputs": [{"name": "data", "path": "out", "optional": True}]})]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "artifacts")
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            assert (await _states(engine, run_id))["produce"] == ("failed", NO_STORAGE)
        finally:
            await engine.dispose()

    asyncio.run(main())
