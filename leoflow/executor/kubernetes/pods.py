"""Task pods as data: the spec Leoflow creates, the labels it selects by, what a pod's status means.

Pure functions over plain dicts (the JSON the API server speaks); nothing here talks to the
cluster. Names come from :mod:`leoflow.executor.naming` (a pure function of cluster, DAG, run,
task and try — see ``docs/adr/0004-idempotent-pod-names.md``).

Labels (selectable, each value a valid label value, hashed when it would not be):
``app.kubernetes.io/managed-by=leoflow``, ``leoflow.io/cluster``, ``leoflow.io/dag``,
``leoflow.io/run``, ``leoflow.io/task``, ``leoflow.io/try`` and the fencing term
``leoflow.io/term``. Annotations carry the exact, unhashed ids, so a new leader can map any pod
back to its task try.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leoflow.executor.naming import label_value, try_name
from leoflow.model.tries import TaskLaunch, TryKey, TryState

MANAGED_BY = "app.kubernetes.io/managed-by"
CLUSTER, DAG, RUN, TASK, TRY, TERM = (f"leoflow.io/{k}" for k in ("cluster", "dag", "run", "task", "try", "term"))
A_DAG, A_RUN, A_TASK, A_TRY, A_TRY_ID = (f"leoflow.io/{k}" for k in ("dag-id", "run-id", "task-id", "try-number",
                                                                        "task-try-id"))
CONTAINER = "task"
#: Waiting reasons that mean "this pod will not start by itself"; failed after the pending timeout.
STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "InvalidImageName",
                           "CreateContainerError"})

Pod = dict[str, Any]


def cluster_selector(cluster: str) -> str:
    """The label selector of every pod of one Leoflow cluster (and no other's)."""
    return f"{MANAGED_BY}=leoflow,{CLUSTER}={label_value(cluster)}"


def try_labels(cluster: str, key: TryKey, term: int) -> dict[str, str]:
    return {MANAGED_BY: "leoflow", CLUSTER: label_value(cluster), DAG: label_value(key.dag_id),
            RUN: label_value(key.run_id), TASK: label_value(key.task_id), TRY: str(key.try_number),
            TERM: str(term)}


def pod_spec(cluster: str, namespace: str, launch: TaskLaunch, *, service_account: str | None,
             image_pull_secrets: tuple[str, ...]) -> Pod:
    """The pod of one try. ``launch.image`` must be set (checked by the caller)."""
    key = launch.key
    container: dict[str, Any] = {"name": CONTAINER, "image": launch.image, "command": list(launch.command)}
    if launch.args:
        container["args"] = list(launch.args)
    if launch.env:
        container["env"] = [{"name": k, "value": str(v)} for k, v in sorted(launch.env.items())]
    if launch.resources:
        container["resources"] = _resources(launch.resources)
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if launch.timeout_seconds:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(launch.timeout_seconds))
    if service_account:
        spec["serviceAccountName"] = service_account
    if image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": try_name(cluster, key), "namespace": namespace,
            "labels": try_labels(cluster, key, launch.term),
            "annotations": {A_DAG: key.dag_id, A_RUN: key.run_id, A_TASK: key.task_id,
                            A_TRY: str(key.try_number), A_TRY_ID: str(launch.task_try_id)},
        },
        "spec": spec,
    }


def _resources(resources: Mapping[str, Any]) -> dict[str, Any]:
    if "requests" in resources or "limits" in resources:
        return {k: dict(v) for k, v in resources.items() if k in ("requests", "limits")}
    flat = {k: str(v) for k, v in resources.items()}
    return {"requests": flat, "limits": dict(flat)}


def pod_try_key(pod: Pod) -> TryKey | None:
    """The try a pod belongs to, from its annotations; None for a pod that is not a task pod."""
    ann = pod.get("metadata", {}).get("annotations") or {}
    try:
        return TryKey(ann[A_DAG], ann[A_RUN], ann[A_TASK], int(ann[A_TRY]))
    except (KeyError, ValueError):
        return None


def is_same_try(pod: Pod, cluster: str, key: TryKey) -> bool:
    """Does this pod (found under the try's name) really belong to this try of this cluster?"""
    labels = pod.get("metadata", {}).get("labels") or {}
    expected = try_labels(cluster, key, 0)
    expected.pop(TERM)
    return all(labels.get(k) == v for k, v in expected.items()) and pod_try_key(pod) in (key, None)


def pod_term(pod: Pod) -> int | None:
    value = (pod.get("metadata", {}).get("labels") or {}).get(TERM)
    return int(value) if value and value.isdigit() else None


def is_live(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Pending", "Running", None)


@dataclass(frozen=True)
class PodOutcome:
    """What a pod's status says about its try (``stuck``: waiting in an image/config error)."""

    state: TryState | None  # None: still pending, nothing to report yet
    exit_code: int | None = None
    reason: str | None = None
    stuck: str | None = None


def pod_outcome(pod: Pod) -> PodOutcome:
    status = pod.get("status") or {}
    phase = status.get("phase")
    container = _container_status(status)
    state = (container or {}).get("state") or {}
    if phase == "Succeeded":
        return PodOutcome("success", 0, None)
    if phase == "Failed":
        terminated = state.get("terminated") or {}
        code = terminated.get("exitCode")
        if status.get("reason") == "DeadlineExceeded":
            deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
            return PodOutcome("failed", code, f"timed out after {deadline}s (activeDeadlineSeconds)")
        if status.get("reason"):
            return PodOutcome("failed", code, f"{status['reason']}: {status.get('message', '')}".rstrip(": "))
        detail = terminated.get("message") or terminated.get("reason") or "Error"
        return PodOutcome("failed", code, f"{detail} (exit code {code})" if code is not None else detail)
    if phase == "Running":
        return PodOutcome("running")
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in STUCK_REASONS:
        message = waiting.get("message")
        return PodOutcome(None, stuck=f"{waiting['reason']}: {message}" if message else waiting["reason"])
    return PodOutcome(None)


def _container_status(status: Mapping[str, Any]) -> dict[str, Any] | None:
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            return dict(cs)
    statuses = status.get("containerStatuses") or []
    return dict(statuses[0]) if statuses else None
