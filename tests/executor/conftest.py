"""Fixtures for executor tests: a fake Kubernetes API server reached through a kubeconfig."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from leoflow.settings import Settings
from tests.harness.fake_k8s import FakeKubernetes

NAMESPACE = "leoflow-tasks"


@pytest.fixture
def fake_k8s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKubernetes]:
    """A fake API server on loopback; ``KUBECONFIG`` points the official client at it."""
    with FakeKubernetes(startup_delay=0.01, bookmark_interval=0.5) as fake:
        monkeypatch.setenv("KUBECONFIG", str(fake.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE)))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield fake


def k8s_settings(settings: Settings, *, cluster: str = "default", pending_timeout: float = 300.0,
                 pod_retention: float = 3600.0) -> Settings:
    executor = dataclasses.replace(
        settings.executor, kind="kubernetes",
        kubernetes=dataclasses.replace(settings.executor.kubernetes, pending_timeout=pending_timeout,
                                       pod_retention=pod_retention))
    return settings.replace(executor=executor, cluster=dataclasses.replace(settings.cluster, name=cluster))
