"""Trigger rules and run deadlines with real executors: the shipped cleanup-and-alert example with
a failing `load`, and a run whose deadline passes while its task sleeps, on the local executor
(real subprocesses) and on the Kubernetes executor (the fake API server through the official
client). Both runs share one leader per executor, so each executor costs one scheduler start."""

from __future__ import annotations

import asyncio
import dataclasses
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from leoflow.db.stores import commands
from leoflow.executor.base import Executor
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.executor.local.executor import LocalExecutor
from leoflow.model.spec.notify import DEADLINE_REASON
from leoflow.settings import Settings
from tests.day2.harness import leader, wait_for
from tests.executor.conftest import fake_k8s, k8s_settings
from tests.harness.fake_k8s import FakeKubernetes
from tests.scheduler.harness import apply, fast, rows, trigger

__all__ = ["fake_k8s"]


def example_with_failing_load() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(files("leoflow").joinpath("examples/cleanup_and_alert.yaml").read_text())
    for task in doc["tasks"]:
        if task["id"] == "load":
            task["command"] = ["sh", "-c", "exit 3"]  # the fake kubelet understands `exit N` too
    return doc


#: A run that cannot finish within its deadline: the task sleeps far longer than 2 s.
BOUNDED = {"dag_id": "bounded", "run_timeout_seconds": 2,
           "tasks": [{"id": "sleeper", "image": "busybox", "command": ["sh", "-c", "sleep 120"]},
                     {"id": "after", "image": "busybox", "command": ["sh", "-c", "exit 0"],
                      "depends_on": ["sleeper"]}]}


def _run(settings: Settings, make_executor: Any) -> None:
    async def main() -> None:
        from leoflow.db.connection.engine import make_async_engine

        engine = make_async_engine(settings.database, pool_size=4)
        try:
            await apply(engine, example_with_failing_load())
            await apply(engine, BOUNDED)
            executor: Executor = make_executor()
            async with leader(settings, executor, engine=engine, services=(), interval=0.1):
                rules_run = await trigger(engine, "cleanup-and-alert")
                bounded_run = await trigger(engine, "bounded")

                async def ended() -> bool:
                    found = await rows(engine, "SELECT count(*) FROM dag_runs WHERE ended_at IS NOT NULL")
                    return bool(found[0][0] == 2)

                await wait_for(ended, timeout=90)

                async def killed() -> bool:
                    found = await rows(engine, "SELECT tt.state FROM task_tries tt JOIN task_instances ti "
                                       "ON ti.id = tt.task_instance_id WHERE ti.task_id = 'sleeper'")
                    # Killed: cancelled when the kill is recorded first, failed when the executor
                    # reported the killed process/pod first; either way no longer live.
                    return found in ([("cancelled",)], [("failed",)])

                await wait_for(killed, timeout=120)
            runs = dict(await rows(engine, "SELECT run_id, state || ': ' || coalesce(reason, '') FROM dag_runs"))
            assert runs[rules_run].startswith("failed: task 'load' failed:") and "code 3" in runs[rules_run]
            assert runs[bounded_run] == f"failed: {DEADLINE_REASON}"
            tasks = dict(await rows(engine, "SELECT ti.task_id, ti.state FROM task_instances ti "
                                    "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=rules_run))
            assert tasks == {"extract": "success", "load": "failed", "publish": "upstream_failed",
                             "cleanup": "success", "alert": "success"}
            await _clear_then_mark(settings, engine, make_executor, rules_run)
            [(elapsed,)] = await rows(engine, "SELECT extract(epoch FROM ended_at - started_at) FROM dag_runs "
                                      "WHERE run_id = :r", r=bounded_run)
            assert float(elapsed) >= 1.5  # never before its deadline (start and end on different clocks: slack)
            bounded = dict(await rows(engine, "SELECT ti.task_id, ti.state FROM task_instances ti "
                                      "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r", r=bounded_run))
            assert bounded == {"sleeper": "cancelled", "after": "cancelled"}
        finally:
            await engine.dispose()

    asyncio.run(main())


async def _clear_then_mark(settings: Settings, engine: Any, make_executor: Any, run_id: str) -> None:
    """Clear the failed `load` with its downstream (it fails again as try 2, cleanup and alert run
    again), then mark it success: publish, decided upstream_failed before, now runs; the run succeeds."""
    [(run_pk,)] = await rows(engine, "SELECT id FROM dag_runs WHERE run_id = :r", r=run_id)

    async def record(kind: str, body: dict[str, Any]) -> None:
        async with engine.begin() as conn:
            await commands.create_command(conn, run_pk=run_pk, dag_id="cleanup-and-alert", kind=kind,
                                               body=body, requested_by="test")

    async def tries_of(task_id: str) -> list[tuple[int, str]]:
        return [(n, s) for n, s in await rows(engine, "SELECT tt.try_number, tt.state FROM task_tries tt JOIN "
                                              "task_instances ti ON ti.id = tt.task_instance_id WHERE ti.run_pk = :p "
                                              "AND ti.task_id = :t ORDER BY 1", p=run_pk, t=task_id)]

    async def run_is(state: str) -> bool:
        return bool(await rows(engine, "SELECT 1 FROM dag_runs WHERE id = :p AND state = :s", p=run_pk, s=state))

    async with leader(settings, make_executor(), engine=engine, services=(), interval=0.1):
        await record("clear", {"tasks": ["load"], "failed_only": False, "downstream": True})
        await wait_for(lambda: _all(tries_of("load"), [(1, "failed"), (2, "failed")]), timeout=120)
        await wait_for(lambda: run_is("failed"), timeout=120)
        assert await tries_of("cleanup") == [(1, "success"), (2, "success")]
        await record("mark", {"task_id": "load", "state": "success"})
        await wait_for(lambda: run_is("success"), timeout=120)
    tasks = dict(await rows(engine, "SELECT task_id, state FROM task_instances WHERE run_pk = :p", p=run_pk))
    assert tasks == {"extract": "success", "load": "success", "publish": "success", "cleanup": "success",
                     "alert": "success"}
    assert await tries_of("publish") == [(1, "success")] and await tries_of("extract") == [(1, "success")]


async def _all(found: Any, expected: Any) -> bool:
    return bool(await found == expected)


def test_rules_and_deadline_with_the_local_executor(settings: Settings, tmp_path: Path) -> None:
    base = fast(settings)
    s = base.replace(home=tmp_path / "home", executor=dataclasses.replace(base.executor, kind="local",
                                                                          local_parallelism=4))
    _run(s, lambda: LocalExecutor(s, kill_grace=2.0))


def test_rules_and_deadline_with_the_kubernetes_executor(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(fast(settings))
    _run(s, lambda: KubernetesExecutor(s, resync_interval=0.5, create_deadline=20.0, delete_grace=0))
    # extract, load, cleanup, alert, sleeper; after the clear load, cleanup, alert as try 2; then publish
    assert len(fake_k8s.creates(code=201)) == 9
    deleted = [r["name"] for r in fake_k8s.requests if r["verb"] == "delete"]
    assert any("sleeper" in (name or "") for name in deleted), deleted  # the deadline killed its pod
