"""Reusable templates end to end: the real local executor, real subprocesses, real PostgreSQL.

A task that ``uses:`` a template runs the inlined shape with its inputs substituted, exactly as
written (a ``{{`` in an input stays text; a reference in an input renders at launch); a DAG that
uses a cluster template runs the version it was applied with, whatever was stored after it, until
it is applied again.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from leoflow.clock import SystemClock
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores import task_templates
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.executor.local.executor import LocalExecutor
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.reuse import cluster_template_hash, cluster_uses
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, run_state, running_scheduler
from tests.scheduler.test_service_local import local

#: Writes its argv (after ``-c``) and $MODE to the file named by $OUT, as JSON.
_RECORD = ("import json, os, sys; json.dump({'argv': sys.argv[1:], 'MODE': os.environ.get('MODE')}, "
           "open(os.environ['OUT'], 'w'))")
PARAMS = {"type": "object", "properties": {"day": {"type": "string"}}}


def recorder_template(out: Path, *extra: str) -> dict[str, Any]:
    return {"inputs": {"part": {"type": "string"}, "n": {"type": "integer", "default": 1}},
            "image": "busybox", "command": ["python3", "-c", _RECORD],
            "args": ["--part={{ inputs.part }}", "{{ inputs.n }}", *extra],
            "env": {"OUT": str(out), "MODE": "m-{{ inputs.part }}"}}


async def _trigger(engine: Any, dag_id: str, conf: dict[str, Any]) -> str:
    async with engine.begin() as conn:
        return await run_store.trigger_run(conn, dag_id, run_id=None, conf=conf, clock=SystemClock())


async def _run(engine: Any, s: Settings, dag_id: str, conf: dict[str, Any]) -> str:
    async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
        run_id = await _trigger(engine, dag_id, conf)
        await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
    return run_id


def test_a_templated_task_runs_with_its_inputs_substituted(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    a, b = tmp_path / "a.json", tmp_path / "b.json"

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "reuse", "params": PARAMS,
                                 "templates": [{"name": "rec", **recorder_template(a)}],
                                 "tasks": [
                                     {"id": "a", "uses": "rec", "inputs": {"part": "{{ params.day }}/x", "n": 7}},
                                     {"id": "b", "uses": "rec", "depends_on": ["a"], "env": {"OUT": str(b)},
                                      "inputs": {"part": '{{ "{{" }} params.day }} $(id)'}}]})
            run_id = await _run(engine, s, "reuse", {"day": "2026-11-21"})
            assert await run_state(engine, run_id) == "success"
            assert json.loads(a.read_text()) == {"argv": ["--part=2026-11-21/x", "7"], "MODE": "m-2026-11-21/x"}
            # A literal {{ in an input reaches the process as text, never rendered, never a shell.
            assert json.loads(b.read_text()) == {"argv": ["--part={{ params.day }} $(id)", "1"],
                                                 "MODE": "m-{{ params.day }} $(id)"}
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_a_dag_runs_the_cluster_template_version_it_was_applied_with(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    out = tmp_path / "out.json"
    doc = {"dag_id": "pinned", "tasks": [{"id": "t", "uses": "cluster/rec", "inputs": {"part": "p0"}}]}

    async def put(spec: dict[str, Any]) -> int:
        async with engine.begin() as conn:
            version, _ = await task_templates.put_template(conn, "rec", spec, cluster_template_hash(spec),
                                                           created_by="test", now=SystemClock().now())
        return version

    async def apply_with_templates() -> int:
        async with engine.begin() as conn:
            catalog = await task_templates.find_templates(conn, cluster_uses(doc))
            result = await dag_store.apply_dag(conn, parse_dag_spec(doc, cluster_templates=catalog),
                                               clock=SystemClock())
        return result.version

    engine = make_async_engine(s.database, pool_size=4)

    async def main() -> None:
        try:
            assert await put(recorder_template(out, "v1")) == 1
            assert await apply_with_templates() == 1
            assert await put(recorder_template(out, "v2")) == 2  # stored after the DAG was applied
            run_id = await _run(engine, s, "pinned", {})
            assert await run_state(engine, run_id) == "success"
            assert json.loads(out.read_text())["argv"] == ["--part=p0", "1", "v1"]  # still the version applied
            assert await apply_with_templates() == 2  # a re-apply picks the newest up: a new DAG version
            out.unlink()
            run_id = await _run(engine, s, "pinned", {})
            assert await run_state(engine, run_id) == "success"
            assert json.loads(out.read_text())["argv"] == ["--part=p0", "1", "v2"]
        finally:
            await engine.dispose()

    asyncio.run(main())
