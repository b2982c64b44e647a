"""Builds the configured executor and the services that come with it (``LEOFLOW_EXECUTOR``).

The replica runtime calls :func:`make_executor` once per leadership term, starts the scheduler
with it plus :func:`leader_services` (leader-only singletons such as pod garbage collection), and
runs :func:`replica_services` (e.g. the pod log shipper) on every replica for its whole life.
Implementations are imported lazily so that a standalone install never imports ``kubernetes``.
"""

from __future__ import annotations

from leoflow.executor.base import Executor, ReplicaService
from leoflow.leadership import LeaderService
from leoflow.settings import Settings


def make_executor(settings: Settings) -> Executor:
    """A fresh executor of the configured kind (one per leadership term)."""
    kind = settings.executor.kind
    if kind == "memory":
        from leoflow.executor.memory import MemoryExecutor

        return MemoryExecutor()
    if kind == "local":
        from leoflow.executor.local import LocalExecutor

        return LocalExecutor(settings)
    if kind == "kubernetes":
        from leoflow.executor.kubernetes import KubernetesExecutor

        return KubernetesExecutor(settings)
    raise ValueError(f"unknown executor kind {kind!r}")


def leader_services(settings: Settings, executor: Executor) -> list[LeaderService]:
    """Leader-only singletons that belong to ``executor`` (started and cancelled with leadership)."""
    if settings.executor.kind == "kubernetes":
        from leoflow.executor.kubernetes import KubernetesExecutor
        from leoflow.executor.kubernetes_gc import PodGarbageCollector

        assert isinstance(executor, KubernetesExecutor)
        return [PodGarbageCollector(executor)]
    return []


def replica_services(settings: Settings) -> list[ReplicaService]:
    """Services every replica runs regardless of leadership."""
    if settings.executor.kind == "kubernetes":
        from leoflow.executor.kubernetes_logs import PodLogShipper

        return [PodLogShipper()]
    return []
