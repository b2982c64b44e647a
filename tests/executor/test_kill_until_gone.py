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

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import one_running_pod, run, started
from tests.executor.world import Recorder, set_term
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


def test_a_new_leader_waits_for_and_forces_a_pod_its_predecessor_was_killing(
        settings: Settings, fake_k8s: FakeKubernetes) -> None:
    """Term 1 flagged the try ``cancelling`` and sent the graceful delete, then lost leadership; the
    pod ignores SIGTERM. Term 2's executor finds it at its first reconcile and kills it again, and
    the scheduler's cancel returns only once the pod is gone — forced after the kill grace."""
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        script = "trap '' TERM; echo tick; sleep infinity"
        t, _, old = await one_running_pod(s, engine, ["sh", "-c", script], delete_grace=DELETE_GRACE)
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE task_tries SET state = 'cancelling' WHERE id = :id"),
                               {"id": t.task_try_id})
        [pod] = fake_k8s.pods(NAMESPACE)
        fake_k8s.store.delete(NAMESPACE, pod["metadata"]["name"], DELETE_GRACE)  # term 1's graceful delete
        await old.stop()
        await set_term(engine, "default", 2)
        rec = Recorder(engine)
        rec.track([t])
        new = await started(s, engine, 2, rec, delete_grace=DELETE_GRACE, kill_grace=1.0)
        try:
            assert fake_k8s.pods(NAMESPACE) != []  # still terminating: SIGTERM changed nothing
            started_at = time.monotonic()
            await new.cancel(t.key)  # what the new leader's scheduler does with a `cancelling` try
            assert fake_k8s.pods(NAMESPACE) == []
            assert time.monotonic() - started_at < DELETE_GRACE
            assert 0 in _deletes(fake_k8s)
            final = rec.final(t.key)
            assert final is not None and final.state == "failed"
        finally:
            await new.stop()

    run(s, body)
