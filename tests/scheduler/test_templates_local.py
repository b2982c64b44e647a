"""Templates rendered at launch, end to end: the real local executor, real subprocesses, real PostgreSQL.

What a process receives is exactly the rendered strings, one reference one string, never re-scanned
and never passed through a shell; a reference that cannot be resolved fails that try with its reason.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from leoflow.clock import SystemClock
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.executor.local.executor import LocalExecutor
from leoflow.settings import Settings
from tests.scheduler.harness import apply, eventually, rows, run_state, running_scheduler, task_states
from tests.scheduler.test_service_local import local

#: Writes its argv (after ``-c``) and two variables to the file named by $OUT, as JSON.
_RECORD = ("import json, os, sys; json.dump({'argv': sys.argv[1:], 'A': os.environ.get('A'), "
           "'B': os.environ.get('B')}, open(os.environ['OUT'], 'w'))")
PARAMS = {"type": "object", "properties": {"day": {"type": "string"}, "token": {"type": "string"},
                                           "cfg": {"type": "object"}}}


def recorder(task_id: str, out: Path, *deps: str, **fields: Any) -> dict[str, Any]:
    env = {"OUT": str(out), **fields.pop("env", {})}
    return {"id": task_id, "image": "busybox", "command": ["python3", "-c", _RECORD], "depends_on": list(deps),
            "env": env, **fields}


async def _trigger(engine: Any, dag_id: str, conf: dict[str, Any]) -> str:
    async with engine.begin() as conn:
        return await run_store.trigger_run(conn, dag_id, run_id=None, conf=conf, clock=SystemClock())


def test_params_and_run_id_reach_the_process_argv_exactly(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    out = tmp_path / "argv.json"
    hostile = "{{ params.day }} $(touch /tmp/pwned) `id` ; '\" {{"

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "tpl", "params": PARAMS, "tasks": [recorder(
                "t", out, args=["{{ params.day }}", "{{ run.id }}", "--token={{ params.token }}", "{{ params.cfg }}",
                                '{{ "{{" }} run.id }}', "plain $HOME"],
                env={"A": "{{ run.logical_date }}", "B": "day={{params.day}}"})]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await _trigger(engine, "tpl", {"day": "2026-11-21", "token": hostile,
                                                        "cfg": {"z": [1, None], "a": "x"}})
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            assert await run_state(engine, run_id) == "success"
            [(logical,)] = await rows(engine, "SELECT logical_date FROM dag_runs WHERE run_id = :r", r=run_id)
            seen = json.loads(out.read_text())
            assert seen == {
                "argv": ["2026-11-21", run_id, f"--token={hostile}", '{"a":"x","z":[1,null]}', "{{ run.id }}",
                         "plain $HOME"],
                "A": logical.isoformat(), "B": "day=2026-11-21"}
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_an_unresolvable_reference_fails_that_try_with_its_reason(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "tpl-fail", "params": PARAMS, "tasks": [
                {"id": "list", "image": "busybox", "command": ["sh", "-c", "exit 3"],
                 "outputs": {"n": {"type": "integer"}}},
                recorder("reads-list", tmp_path / "a.json", "list", args=["{{ tasks.list.outputs.n }}"],
                         trigger_rule="all_done"),
                recorder("reads-param", tmp_path / "b.json", args=["{{ params.day }}"]),
                recorder("plain", tmp_path / "c.json", "reads-param", trigger_rule="all_done"),
            ]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await _trigger(engine, "tpl-fail", {})
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            assert await task_states(engine, run_id) == {"list": "failed", "reads-list": "failed",
                                                         "reads-param": "failed", "plain": "success"}
            reasons = dict(await rows(engine, "SELECT task_id, reason FROM task_instances"))
            assert reasons["reads-list"].endswith(
                "tasks[1].args[0]: {{ tasks.list.outputs.n }}: task 'list' failed")
            assert reasons["reads-param"].endswith(
                "tasks[2].args[0]: {{ params.day }}: the run's conf has no parameter 'day'")
            assert not (tmp_path / "a.json").exists() and not (tmp_path / "b.json").exists()
            assert (tmp_path / "c.json").exists()  # the scheduler went on
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_an_upstream_output_reaches_the_downstream_argv(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    out = tmp_path / "argv.json"
    written = {"n": 3, "parts": ["p0", "p 1"], "meta": {"z": None, "a": 1.5}}
    # The task writes a value holding "{{ params.day }}" (built at run time: its own command must not hold one).
    script = (f"import json, os; d = json.loads({json.dumps(json.dumps(written))}); "
              "d['uri'] = 's3://b/' + '{' + '{ params.day }}'; "
              "open(os.environ['LEOFLOW_OUTPUTS'], 'w').write(json.dumps(d))")

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "tpl-out", "params": PARAMS, "tasks": [
                {"id": "list", "image": "busybox", "command": ["python3", "-c", script],
                 "outputs": {"n": {"type": "integer"}, "parts": {"type": "array"}, "uri": {"type": "string"},
                             "meta": {"type": "object"}, "absent": {"type": "string", "optional": True}}},
                {"id": "mid", "kind": "empty", "depends_on": ["list"]},
                recorder("use", out, "mid", args=["{{ tasks.list.outputs.n }}", "{{ tasks.list.outputs.parts }}",
                                                  "{{ tasks.list.outputs.parts[1] }}", "{{ tasks.list.outputs.uri }}",
                                                  "{{ tasks.list.outputs.meta }}"],
                         env={"A": "n={{ tasks.list.outputs.n }}"}),
                recorder("wants-absent", tmp_path / "never.json", "list", args=["{{ tasks.list.outputs.absent }}"]),
            ]})
            async with running_scheduler(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                run_id = await _trigger(engine, "tpl-out", {"day": "d"})
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"), timeout=60)
            assert await task_states(engine, run_id) == {"list": "success", "mid": "success", "use": "success",
                                                         "wants-absent": "failed"}
            assert json.loads(out.read_text()) == {
                "argv": ["3", '["p0","p 1"]', "p 1", "s3://b/{{ params.day }}", '{"a":1.5,"z":null}'],
                "A": "n=3", "B": None}
            reasons = dict(await rows(engine, "SELECT task_id, reason FROM task_instances"))
            assert reasons["wants-absent"].endswith(
                "tasks[3].args[0]: {{ tasks.list.outputs.absent }}: task 'list' has no output 'absent'")
        finally:
            await engine.dispose()

    asyncio.run(main())
