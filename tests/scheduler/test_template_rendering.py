"""Templates rendered by the leader, one tick at a time: one read per step, the same argv after a failover,
and an unresolvable reference failing its try (never the step)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from leoflow.clock import SystemClock
from leoflow.db.stores import tries as try_store
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.executor.kubernetes.pod_render import render_pod
from leoflow.model.run_context import RunContext
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.tries import TryKey
from leoflow.scheduler.queueing import build_launch
from leoflow.scheduler.rendering import Unrendered, render_launch
from leoflow.settings import Settings
from tests.scheduler.harness import apply
from tests.scheduler.stepper import container, insert_version, stepper

PARAMS = {"type": "object", "properties": {"day": {"type": "string"}}}


async def _trigger(engine: Any, dag_id: str, conf: dict[str, Any]) -> str:
    async with engine.begin() as conn:
        return await run_store.trigger_run(conn, dag_id, run_id=None, conf=conf, clock=SystemClock())


def test_a_failover_renders_the_same_launch(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, term=1) as st:
            await apply(st.engine, {"dag_id": "fo", "params": PARAMS, "tasks": [container(
                "a", args=["{{ params.day }}", "{{ run.id }}", "at={{ run.logical_date }}"],
                env={"DAY": "{{ params.day }}"},
                pod_template={"spec": {"containers": [{"name": "side", "image": "busybox",
                                                       "args": ["{{ run.id }}"]}]}})]})
            run_id = await _trigger(st.engine, "fo", {"day": "2026-11-21"})
            await st.tick(periodic=True)
            [first] = st.executor.launched
            engine = st.engine
            async with stepper(settings, term=2, engine=engine) as again:
                assert await again.core.resubmit_queued() == 1
                [second] = again.executor.launched
        assert first.args == ("2026-11-21", run_id, f"at={first.env['LEOFLOW_LOGICAL_DATE']}")
        assert first.env["DAY"] == "2026-11-21"
        assert first.pod is not None and first.pod.pod_template["spec"]["containers"][0]["args"] == [run_id]
        assert (second.command, second.args, second.env, second.pod) == (first.command, first.args, first.env,
                                                                         first.pod)
        assert (first.term, second.term) == (1, 2)

    asyncio.run(main())


def test_one_read_per_step_and_failures_fail_only_their_try(settings: Settings,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[list[tuple[int, str]]] = []
    real = try_store.upstream_outputs

    async def counted(conn: Any, wanted: Any) -> Any:
        reads.append(list(wanted))
        return await real(conn, wanted)

    monkeypatch.setattr(try_store, "upstream_outputs", counted)

    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "one-read", "params": PARAMS, "tasks": [
                container("list", outputs={"n": {"type": "integer", "optional": True}}),
                *[container(f"use{i}", "list", args=["{{ tasks.list.outputs.n }}"]) for i in range(3)],
                container("day", "list", args=["{{ params.day }}"]),
                container("plain", "list"),
            ]})
            run_id = await _trigger(st.engine, "one-read", {"day": "d"})
            await st.tick(periodic=True)
            st.finish("one-read", run_id, "list")  # it succeeds without writing its optional output
            await st.tick()
            assert len(reads) == 1 and sorted(set(reads[0])) == reads[0] and len(reads[0]) == 1
            launched = {x.key.task_id: x for x in st.executor.launched}
            assert set(launched) == {"list", "day", "plain"}  # the use* tries failed instead of launching
            assert launched["day"].args == ("d",)
            await st.settle()
            tasks = await st.tasks(run_id)
            for i in range(3):
                state, reason = tasks[f"use{i}"]
                assert state == "failed"
                assert reason is not None and reason.endswith(
                    f"tasks[{i + 1}].args[0]: {{{{ tasks.list.outputs.n }}}}: task 'list' has no output 'n'")
            assert tasks["day"][0] == "queued" and tasks["plain"][0] == "queued"  # the step carried on

    asyncio.run(main())


def test_a_rendered_launch_makes_the_pod_with_the_rendered_strings() -> None:
    spec = parse_dag_spec({"dag_id": "k8s", "params": PARAMS, "tasks": [container(
        "a", args=["--day", "{{ params.day }}"], env={"RUN": "{{ run.id }}", "PLAIN": "x"},
        pod_template={"spec": {"containers": [{"name": "side", "image": "busybox", "args": ["{{ params.day }}"],
                                               "env": [{"name": "D", "value": "d={{ params.day }}"}]}]}})]})
    task = spec.tasks[0]
    assert task.templates is not None
    key = TryKey("k8s", "manual__1", "a", 1)
    run = RunContext(conf={"day": "2026-11-21"}, logical_date=datetime(2026, 11, 21, tzinfo=UTC))
    launch = render_launch(Unrendered(build_launch(task, key, 7, 1, run), task.templates, 1, run), {})
    pod = render_pod(launch, {"name": "p", "namespace": "n", "labels": {}, "annotations": {}}, service_account=None,
                     image_pull_secrets=(), template={})
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert containers["task"]["args"] == ["--day", "2026-11-21"]
    env = {e["name"]: e.get("value") for e in containers["task"]["env"]}
    assert env["RUN"] == "manual__1" and env["PLAIN"] == "x"
    assert containers["side"]["args"] == ["2026-11-21"]
    assert containers["side"]["env"] == [{"name": "D", "value": "d=2026-11-21"}]
    # The spec keeps its templates: the next try renders from them again.
    assert task.pod.pod_template["spec"]["containers"][0]["args"] == ["{{ params.day }}"]


def test_a_version_an_older_release_stored_runs_its_braces_as_text(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await insert_version(st.engine, "legacy", {"dag_id": "legacy", "tasks": [
                container("a", args=["-f", "{{.Id}}", "{{ run.id }}"])]})
            run_id = await _trigger(st.engine, "legacy", {})
            await st.tick(periodic=True)
            [launch] = st.executor.launched
            assert launch.args == ("-f", "{{.Id}}", "{{ run.id }}")
            assert (await st.run(run_id))[0] == "running"

    asyncio.run(main())
