"""Cancelling a run of 400 running pods neither stalls the scheduler nor floods the API server.

The leader runs with the database connections it has in production (the background share of a
pool of 10: three), the Kubernetes executor against the fake API server, and every pod's log
read takes 250 ms (a busy kubelet). A 400-task run is cancelled while all its pods run; right
after, a second run is triggered. Each kill saves the pod's log tail and deletes the pod.

Before: every kill held one of the three connections (a fenced transaction) while it streamed
the log, hundreds at once, so the scheduler's ticks waited for a connection, failed, and stopped
making progress — a leader would be stepped down as stalled. Now: at most 8 kills read logs at
once and none holds a transaction while it does; the scheduler keeps ticking and the second run
completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import time
from typing import Any

from leoflow.aiotasks import cancel_and_wait, start_guarded
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.leadership import LeaderContext
from leoflow.scheduler.service import SchedulerService
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.harness.fake_k8s import FakeKubernetes, Fault
from tests.scheduler.harness import apply, eventually, fast, rows, run_state, set_term, trigger

PODS = 400


def dag(dag_id: str, tasks: int, script: str) -> dict[str, Any]:
    return {"dag_id": dag_id, "max_active_runs": 10,
            "tasks": [{"id": f"t{i:03d}", "image": "busybox", "command": ["sh", "-c", script]} for i in range(tasks)]}


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    best = current = 0
    for _, step in edges:
        current += step
        best = max(best, current)
    return best


def test_cancelling_400_running_pods_keeps_the_scheduler_going(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = fast(k8s_settings(settings), parallelism=1000)
    s = s.replace(election=dataclasses.replace(s.election, leader_lease=10.0))

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=3, application_name="leoflow-test-leader")
        probe = make_async_engine(s.database, pool_size=2, application_name="leoflow-test-probe")  # the test's own
        progress: list[float] = []
        failures: list[str] = []
        ctx = LeaderContext(1, s, Database(engine), progress=lambda: progress.append(time.monotonic()),
                            fail=failures.append)
        executor = KubernetesExecutor(s, resync_interval=5.0, delete_grace=0)
        service = SchedulerService(executor)
        try:
            await set_term(probe, s.cluster.name, 1)
            await apply(probe, dag("big", PODS, "echo working; sleep 600"))
            await apply(probe, dag("small", 10, "echo quick; sleep 0.2"))
            task = start_guarded(service.run(ctx), "test-scheduler", may_return=True)
            try:
                big = await trigger(probe, "big")
                await eventually(lambda: rows(probe, "SELECT count(*) FROM task_instances WHERE state = 'running'"),
                                 lambda r: r[0][0] == PODS, timeout=120, every=0.2)
                fake_k8s.inject(Fault("log", delay=0.25, times=10 * PODS))
                async with probe.begin() as conn:
                    await run_store.cancel_run(conn, "big", big)
                cancelled_at = time.monotonic()
                small = await trigger(probe, "small")
                await eventually(lambda: run_state(probe, small), lambda state: state == "success", timeout=90,
                                 every=0.1)
                small_done = time.monotonic()
                await eventually(lambda: rows(probe, "SELECT count(*) FROM task_tries WHERE state = 'cancelling'"),
                                 lambda r: r[0][0] == 0, timeout=180, every=0.2)
                killed_at = time.monotonic()
            finally:
                await cancel_and_wait([task])
                with contextlib.suppress(Exception):
                    await executor.stop()
            gaps = [b - a for a, b in itertools.pairwise(progress) if b >= cancelled_at]
            reads = [(r["time"], r["done"]) for r in fake_k8s.requests if r["verb"] == "log" and "done" in r]
            summary = (f"small run done {small_done - cancelled_at:.1f}s after the cancel, kills done after "
                       f"{killed_at - cancelled_at:.1f}s; longest tick gap {max(gaps, default=0):.2f}s; "
                       f"{len(reads)} log reads, at most {max_overlap(reads)} at once; fail calls {failures}")
            print(summary)
            assert failures == [], summary
            assert max(gaps, default=0.0) < 8.0, summary  # stall timeout in production: 60 s
            assert len({r["name"] for r in fake_k8s.requests if r["verb"] == "log"}) == PODS, summary
            assert max_overlap(reads) <= 8, summary
            assert await run_state(probe, big) == "cancelled"
            tries = dict(await rows(probe, "SELECT state, count(*) FROM task_tries GROUP BY state"))
            assert tries == {"cancelled": PODS, "success": 10}, tries
            assert [p for p in fake_k8s.pods(NAMESPACE) if p["metadata"]["labels"]["leoflow.io/dag"] == "big"] == []
        finally:
            await engine.dispose()
            await probe.dispose()

    asyncio.run(main())
