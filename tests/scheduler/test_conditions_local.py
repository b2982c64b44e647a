"""The packaged conditional example (``leoflow/examples/conditional.yaml``, the migration guide's
worked branch), end to end: the real local executor, real subprocesses, real PostgreSQL. A task's
output chooses the branch (``when`` over ``tasks.choose.outputs.branch``), the other branch is
skipped, a ``skip_on_exit_code`` exit skips too, and the join runs after whichever ran.
"""

from __future__ import annotations

import asyncio
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml

from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.local.executor import LocalExecutor
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, rows, run_state, running_scheduler, trigger
from tests.scheduler.test_service_local import local


def branching(quick_exit: int) -> dict[str, Any]:
    """The example as shipped, its ``quick`` task made to exit ``quick_exit``."""
    doc: dict[str, Any] = yaml.safe_load(files("leoflow").joinpath("examples/conditional.yaml").read_text())
    [quick] = [t for t in doc["tasks"] if t["id"] == "quick"]
    quick["command"] = ["sh", "-c", f"exit {quick_exit}"]
    return doc


@pytest.mark.parametrize(("quick_exit", "quick", "report"), [(0, "success", "success"), (99, "skipped", "skipped")])
def test_an_output_chooses_the_branch_and_the_join_follows(settings: Settings, tmp_path: Path, quick_exit: int,
                                                           quick: str, report: str) -> None:
    s = local(settings, tmp_path / "home")

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, branching(quick_exit))
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await trigger(engine, "conditional")
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            found = await rows(engine, "SELECT ti.task_id, ti.state, ti.reason FROM task_instances ti "
                               "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=run_id)
            tasks = {t: (state, reason) for t, state, reason in found}
            assert tasks["choose"][0] == "success"
            assert tasks["full"] == ("skipped", "when was false")
            assert tasks["quick"][0] == quick and tasks["report"][0] == report
            assert await run_state(engine, run_id) == "success"
        finally:
            await engine.dispose()

    asyncio.run(main())
