"""How long a kill may wait on the Kubernetes API before the pod is deleted (issue 21: cancellation).

A kill reads the pod's log tail first (best effort) and then deletes the pod. The scheduler marks
the try ``cancelled`` only once the executor's kill returns, so anything the kill waits for is
time a user sees the try ``cancelling``.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.executor.kubernetes.errors import KubernetesError
from leoflow.executor.naming import try_name
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import one_running_pod, run
from tests.executor.world import log_row
from tests.harness.fake_k8s import FakeKubernetes, Fault


def test_a_kubelet_that_does_not_serve_logs_does_not_hold_a_cancel(settings: Settings,
                                                                   fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)
    kill_log_timeout = 0.5
    # The log read stalls far past the kill's bound: only a kill that waits for the log sees it end.
    stall = 60 * kill_log_timeout

    async def body(engine: AsyncEngine) -> None:
        t, rec, ex = await one_running_pod(s, engine, ["sh", "-c", "echo waiting; sleep 600"],
                                           kill_log_timeout=kill_log_timeout)
        fake_k8s.inject(Fault("log", delay=stall, name_prefix=try_name("default", t.key)))
        # Before the bound, the kill waited for the stalled read (the client's read timeout is 120 s).
        await asyncio.wait_for(ex.cancel(t.key), timeout=stall / 2)
        final = await rec.wait_final(t.key)
        await ex.stop()
        assert (final.state, final.reason) == ("failed", "cancelled")
        assert fake_k8s.pods(NAMESPACE) == []
        [read] = [r for r in fake_k8s.requests if r["verb"] == "log"]
        [delete] = [r for r in fake_k8s.requests if r["verb"] == "delete"]
        assert "done" not in read and delete["code"] == 200  # deleted while the read was still unanswered
        assert await log_row(engine, t.task_try_id) is None  # given up: the shipper notes the pod gone

    run(s, body)


def test_a_cancel_whose_delete_fails_keeps_the_try_cancelling_until_a_retry_deletes_the_pod(
        settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        t, rec, ex = await one_running_pod(s, engine, ["sh", "-c", "echo waiting; sleep 600"])
        fake_k8s.inject(Fault("delete", code=500, name_prefix=try_name("default", t.key)))
        with pytest.raises(KubernetesError):
            await ex.cancel(t.key)
        # Not reported ended (the scheduler keeps the try cancelling): its pod still runs.
        assert rec.final(t.key) is None and len(fake_k8s.pods(NAMESPACE)) == 1
        await ex.cancel(t.key)  # the scheduler's next attempt
        final = await rec.wait_final(t.key)
        await ex.stop()
        assert (final.state, final.reason) == ("failed", "cancelled")
        assert fake_k8s.pods(NAMESPACE) == []
        assert [r["code"] for r in fake_k8s.requests if r["verb"] == "delete"] == [500, 200]
        assert len([r for r in fake_k8s.requests if r["verb"] == "log"]) == 1  # the log is read once
        logs = await log_row(engine, t.task_try_id)
        assert logs is not None and logs["content"] == "waiting\n"

    run(s, body)
