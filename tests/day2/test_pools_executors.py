"""Pools, priority and max_active_tasks with real executors: the local executor (subprocesses
that sleep, so tries overlap for real) and the Kubernetes executor (the fake API server through
the official client). A pool of 2 never has 3 tries at once, a DAG limited to 1 task never 2, and
every run succeeds."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.base import Executor
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.executor.local.executor import LocalExecutor
from leoflow.settings import Settings
from tests.day2.harness import leader, wait_for
from tests.executor.conftest import fake_k8s, k8s_settings
from tests.harness.fake_k8s import FakeKubernetes
from tests.scheduler.harness import apply, fast, rows, trigger

__all__ = ["fake_k8s"]


def _task(task_id: str, **extra: Any) -> dict[str, Any]:
    # The local executor runs the command; the fake kubelet reads `exit N` from it.
    return {"id": task_id, "image": "busybox", "command": ["sh", "-c", "sleep 0.3; exit 0"], **extra}


SPECS = [
    {"dag_id": "pooled", "tasks": [_task(f"p{i}", pool="pair", priority=i) for i in range(5)]},
    {"dag_id": "single", "max_active_tasks": 1, "tasks": [_task(f"s{i}") for i in range(3)]},
]


async def most_at_once(engine: Any, where: str) -> int:
    """The most tries overlapping in time, from the database's queued/ended moments of each try."""
    spans = await rows(engine, f"""
        SELECT tt.queued_at, tt.ended_at FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id
        JOIN dag_runs r ON r.id = ti.run_pk WHERE {where}""")
    events = sorted([(q, 1) for q, _ in spans] + [(e, -1) for _, e in spans])  # an end sorts before a start
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _run(settings: Settings, make_executor: Any) -> None:
    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        try:
            async with engine.begin() as conn:
                await conn.exec_driver_sql("INSERT INTO pools (name, slots) VALUES ('pair', 2)")
            for spec in SPECS:
                await apply(engine, spec)
            executor: Executor = make_executor()
            async with leader(settings, executor, engine=engine, services=(), interval=0.1):
                for dag_id in ("pooled", "single"):
                    await trigger(engine, dag_id)

                async def done() -> bool:
                    states = await rows(engine, "SELECT state FROM dag_runs")
                    return all(s in ("success", "failed") for (s,) in states)
                await wait_for(done, timeout=90)
            assert sorted(await rows(engine, "SELECT dag_id, state FROM dag_runs")) == [
                ("pooled", "success"), ("single", "success")]
            assert await most_at_once(engine, "r.dag_id = 'pooled'") <= 2
            assert await most_at_once(engine, "r.dag_id = 'single'") == 1
            order = [t for (t,) in await rows(engine, """
                SELECT ti.task_id FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id
                JOIN dag_runs r ON r.id = ti.run_pk WHERE r.dag_id = 'pooled' ORDER BY tt.queued_at, tt.id""")]
            assert set(order[:2]) == {"p4", "p3"}, order  # the highest priorities first
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_pools_and_limits_with_the_local_executor(settings: Settings, tmp_path: Path) -> None:
    base = fast(settings)
    s = base.replace(home=tmp_path / "home", executor=dataclasses.replace(base.executor, kind="local",
                                                                          local_parallelism=8))
    _run(s, lambda: LocalExecutor(s, kill_grace=2.0))


def test_pools_and_limits_with_the_kubernetes_executor(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(fast(settings))
    _run(s, lambda: KubernetesExecutor(s, resync_interval=0.5, create_deadline=20.0, delete_grace=0))
    assert len(fake_k8s.creates(code=201)) == 8  # one pod per task, none twice
