"""A Kubernetes kill ends when the pod is gone, forced after the kill grace (issue 44, item 6).

Against the fake API server, whose kubelet keeps a container that ignores SIGTERM running until
its grace period is over (as a real one does). Pods are deleted with a grace of 30 s; the kill
grace (``LEOFLOW_KILL_GRACE``) is 1 s. Before: ``cancel`` returned, and the try was reported
cancelled, as soon as the API server accepted the graceful delete — with the pod still running
for 30 s. Now both wait until a GET finds the pod gone, and a pod still there after the kill grace
is deleted with ``gracePeriodSeconds: 0``.
"""

from __future__ import annotations

import time

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import one_running_pod, run
from tests.harness.fake_k8s import FakeKubernetes

#: The graceful delete's grace: what a SIGTERM-ignoring pod would get without the kill grace.
DELETE_GRACE = 30


def _deletes(fake: FakeKubernetes) -> list[object]:
    return [r.get("grace") for r in fake.requests if r["verb"] == "delete"]


def test_cancel_returns_once_a_pod_ignoring_sigterm_is_gone_forced_after_the_kill_grace(
        settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        script = "trap '' TERM; echo tick; sleep infinity"
        t, rec, ex = await one_running_pod(s, engine, ["sh", "-c", script], delete_grace=DELETE_GRACE,
                                           kill_grace=1.0)
        try:
            started = time.monotonic()
            await ex.cancel(t.key)
            assert fake_k8s.pods(NAMESPACE) == []  # gone when cancel returns, not terminating
            assert time.monotonic() - started < DELETE_GRACE  # forced, not waited out
            assert rec.final(t.key) is not None  # reported (cancelled) by then, and not before
            assert (rec.final(t.key).state, rec.final(t.key).reason) == ("failed", "cancelled")  # type: ignore[union-attr]
            assert _deletes(fake_k8s) == [DELETE_GRACE, 0]
        finally:
            await ex.stop()

    run(s, body)


def test_a_pod_that_stops_on_sigterm_is_not_forced(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        t, rec, ex = await one_running_pod(s, engine, ["sh", "-c", "echo tick; sleep infinity"],
                                           delete_grace=DELETE_GRACE, kill_grace=5.0)
        try:
            await ex.cancel(t.key)
            assert fake_k8s.pods(NAMESPACE) == []
            assert _deletes(fake_k8s) == [DELETE_GRACE]  # its graceful delete was enough
            final = rec.final(t.key)
            assert final is not None and (final.state, final.reason) == ("failed", "cancelled")
        finally:
            await ex.stop()

    run(s, body)
