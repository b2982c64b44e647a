"""Clearing a running task on Kubernetes: the next try's pod waits for the old pod to be gone.

The scheduler, the Kubernetes executor and the fake API server, whose kubelet lets a container
that ignores SIGTERM (``trap '' TERM``) run until its grace period ends, as a real one does.
Pods are deleted with a grace of 30 s and the kill grace (``LEOFLOW_KILL_GRACE``) is 1 s. Before:
the clear queued try 2 in the same step and its pod was created while try 1's pod was still
terminating (for 30 s by default). Now the task waits in ``cancelling`` until try 1's pod is gone
from the API server — deleted with ``gracePeriodSeconds: 0`` once the kill grace is over — and
try 2's pod is created only then.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import commands
from leoflow.executor.kubernetes import pods
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.harness.fake_k8s import FakeKubernetes
from tests.scheduler.harness import apply, eventually, fast, rows, running_scheduler, task_states, trigger

#: The graceful delete's grace: what try 1's pod would get without the kill grace.
DELETE_GRACE = 30


def _tries_of(fake: FakeKubernetes) -> list[int]:
    keys = [pods.pod_try_key(p) for p in fake.pods(NAMESPACE)]
    return sorted(k.try_number for k in keys if k is not None)


def test_the_next_pod_of_a_cleared_task_is_created_only_once_the_old_pod_is_gone(
        settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(fast(settings))
    at_create: list[tuple[int, list[int]]] = []  # (try created, tries whose pods existed then)

    def created(pod: dict[str, Any]) -> None:
        key = pods.pod_try_key(pod)
        if key is not None:
            at_create.append((key.try_number, [t for t in _tries_of(fake_k8s) if t != key.try_number]))

    fake_k8s.store.on_create.append(created)

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            script = "trap '' TERM; echo tick; sleep infinity"
            await apply(engine, {"dag_id": "stubborn", "tasks": [
                {"id": "loop", "image": "busybox", "command": ["sh", "-c", script]}]})
            executor = KubernetesExecutor(s, resync_interval=5.0, delete_grace=DELETE_GRACE, kill_grace=1.0)
            async with running_scheduler(s, executor, engine=engine):
                run_id = await trigger(engine, "stubborn")
                await eventually(lambda: task_states(engine, run_id), lambda t: t.get("loop") == "running", timeout=30)
                [(run_pk,)] = await rows(engine, "SELECT id FROM dag_runs WHERE run_id = :r", r=run_id)
                async with engine.begin() as conn:  # as the API records it
                    await commands.create_command(conn, run_pk=run_pk, dag_id="stubborn", kind="clear",
                                                       body={"tasks": ["loop"]}, requested_by="ops")
                cleared = time.monotonic()
                await eventually(lambda: task_states(engine, run_id), lambda t: t.get("loop") != "running", timeout=30)
                looked = 0
                while 1 in _tries_of(fake_k8s):  # try 1's pod is still on the API server
                    states = await task_states(engine, run_id)
                    if 1 not in _tries_of(fake_k8s):
                        break
                    assert states["loop"] == "cancelling", states
                    assert 2 not in _tries_of(fake_k8s)
                    looked += 1
                    await asyncio.sleep(0.1)
                assert looked >= 3  # it outlived its SIGTERM, and the task was looked at meanwhile
                await eventually(lambda: asyncio.sleep(0, _tries_of(fake_k8s)), lambda t: t == [2], timeout=30)
                assert time.monotonic() - cleared < DELETE_GRACE  # forced after the kill grace, not waited out
                await eventually(lambda: task_states(engine, run_id), lambda t: t.get("loop") == "running", timeout=30)
            assert at_create == [(1, []), (2, [])]
            deletes = [r.get("grace") for r in fake_k8s.requests if r["verb"] == "delete"]
            assert deletes[0] == DELETE_GRACE and 0 in deletes
            tries = await rows(engine, "SELECT try_number, state FROM task_tries ORDER BY try_number")
            assert tries == [(1, "cancelled"), (2, "running")]
        finally:
            await engine.dispose()

    asyncio.run(main())
