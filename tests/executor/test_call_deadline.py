"""A create or delete past its deadline: the client gives up, says so, and the server may still act.

The window a create is made in (``leoflow.executor.kubernetes.windows``) lasts until the call is
answered *or given up on*; the API server may carry a given-up call out later, even after a newer
term began. That is harmless (the pod's name is the try's, so a later create gets 409 and adopts
it), but it must be visible: the replica logs the call it gave up on, and tests that audit terms
(``tests/executor/test_rolling_deploy.py``) tell such a pod from a fencing bug by that line.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from leoflow.executor.kubernetes.errors import ApiUnreachable
from leoflow.executor.kubernetes.kube_client import KubernetesApi
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.harness.fake_k8s import FakeKubernetes, Fault

GAVE_UP = "gave up waiting for the API server's answer"


def pod(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": "task", "image": "busybox", "command": ["true"]}]}}


def gave_up(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.call, r.pod) for r in caplog.records if r.getMessage().startswith(GAVE_UP)]  # type: ignore[attr-defined]


def test_a_call_past_its_deadline_is_logged_and_may_still_be_carried_out(
        settings: Settings, fake_k8s: FakeKubernetes, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="leoflow.executor.kubernetes.kube_client")

    async def body() -> None:
        api = KubernetesApi(k8s_settings(settings), call_deadline=0.5)
        await api.create_pod(pod("answered"))  # in time: nothing to say
        assert gave_up(caplog) == []
        fake_k8s.inject(Fault("create", delay=1.5))
        fake_k8s.inject(Fault("delete", delay=1.5))
        with pytest.raises(ApiUnreachable):  # no answer (an answer, even an error, is not this)
            await api.create_pod(pod("late"))
        with pytest.raises(ApiUnreachable):
            await api.delete_pod("answered", grace_seconds=0)
        assert gave_up(caplog) == [("create", "late"), ("delete", "answered")]

    asyncio.run(body())
    # The server carried both out after the client had given up: what a newer term may find.
    deadline = time.monotonic() + 30
    while {p["metadata"]["name"] for p in fake_k8s.pods(NAMESPACE)} != {"late"}:
        assert time.monotonic() < deadline, [p["metadata"]["name"] for p in fake_k8s.pods(NAMESPACE)]
        time.sleep(0.05)
