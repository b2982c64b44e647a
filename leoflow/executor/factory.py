"""Builds the configured executor and the services that come with it (``LEOFLOW_EXECUTOR``).

The composition root (:mod:`leoflow.replica`) calls :func:`make_executor` once per leadership
term, starts the scheduler with it plus :func:`executor_leader_services` (leader-only singletons
such as pod garbage collection), and runs :func:`executor_replica_services` (e.g. the pod log
shipper) on every replica for its whole life. Implementations are imported lazily so that a
standalone install never imports ``kubernetes``; :func:`executor_modules` names what a replica
should import ahead of its first term.
"""

from __future__ import annotations

from leoflow.executor.base import Executor, ReplicaService
from leoflow.leadership import LeaderService
from leoflow.model.live_logs import LiveLogs
from leoflow.settings import Settings

#: The modules each executor kind needs at the first term (imported ahead, off the event loop).
_MODULES: dict[str, tuple[str, ...]] = {
    "kubernetes": ("leoflow.executor.kubernetes.executor", "leoflow.executor.kubernetes.gc"),
    "local": ("leoflow.executor.local.executor", "leoflow.executor.local.outcomes"),
    "memory": ("leoflow.executor.memory",),
}


def executor_modules(kind: str) -> tuple[str, ...]:
    return _MODULES.get(kind, ())


def make_executor(settings: Settings) -> Executor:
    """A fresh executor of the configured kind (one per leadership term)."""
    kind = settings.executor.kind
    if kind == "memory":
        from leoflow.executor.memory import MemoryExecutor

        return MemoryExecutor()
    if kind == "local":
        from leoflow.executor.local.executor import LocalExecutor

        return LocalExecutor(settings)
    if kind == "kubernetes":
        from leoflow.executor.kubernetes.executor import KubernetesExecutor

        return KubernetesExecutor(settings)
    raise ValueError(f"unknown executor kind {kind!r}")


def executor_leader_services(settings: Settings, executor: Executor) -> list[LeaderService]:
    """Leader-only singletons that belong to ``executor`` (started and cancelled with leadership)."""
    if settings.executor.kind == "kubernetes":
        from leoflow.executor.kubernetes.executor import KubernetesExecutor
        from leoflow.executor.kubernetes.gc import PodGarbageCollector

        assert isinstance(executor, KubernetesExecutor)
        return [PodGarbageCollector(executor)]
    return []


def executor_replica_services(settings: Settings) -> list[ReplicaService]:
    """Services every replica runs regardless of leadership."""
    if settings.executor.kind == "kubernetes":
        from leoflow.executor.kubernetes.logs import PodLogShipper

        return [PodLogShipper()]
    if settings.executor.kind == "local":
        from leoflow.executor.local.outcomes import LocalOutcomeReporter

        return [LocalOutcomeReporter()]
    return []


def executor_live_logs(settings: Settings) -> LiveLogs | None:
    """What every replica's API reads running tries' output with (None: the stored logs suffice).

    The local executor stores a running try's output as it grows; pods keep theirs in the
    kubelet until the try ends, so the API reads them from the Kubernetes API.
    """
    if settings.executor.kind == "kubernetes":
        from leoflow.executor.kubernetes.live_logs import PodLiveLogs

        return PodLiveLogs(settings)
    return None
