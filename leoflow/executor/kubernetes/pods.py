"""Task pods as data: the spec Leoflow creates, the labels it selects by, what a pod's status means.

Pure functions over plain dicts (the JSON the API server speaks); nothing here talks to the
cluster. Names come from :mod:`leoflow.executor.naming` (a pure function of cluster, DAG, run,
task and try — see ``docs/adr/0004-idempotent-pod-names.md``); the pod body from
:mod:`.pod_render` (spec fields, templates, restricted defaults).

**When a try is over** (:func:`pod_outcome`): when the ``task`` container has terminated — its
exit code decides — even while other containers (sidecars such as a log agent or a service
mesh proxy) keep the pod running; the executor then deletes the pod (``sidecars_running``).
Native sidecars (``initContainers`` with ``restartPolicy: Always``) are stopped by the kubelet
itself and need nothing. A pod that cannot start — a container waiting in an image or config
error, or ``PodScheduled=False`` with reason ``Unschedulable`` — is ``stuck`` with the
kubelet's or scheduler's message, and fails after ``LEOFLOW_K8S_PENDING_TIMEOUT``.

Labels (selectable, each value a valid label value, hashed when it would not be):
``app.kubernetes.io/managed-by=leoflow``, ``leoflow.io/cluster``, ``leoflow.io/dag``,
``leoflow.io/run``, ``leoflow.io/task``, ``leoflow.io/try`` and the fencing term
``leoflow.io/term``. Annotations carry the exact, unhashed ids, so a new leader can map any pod
back to its task try.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leoflow.executor.kubernetes.pod_render import CONTAINER, render_pod
from leoflow.executor.naming import label_value, try_name
from leoflow.model.env_names import OUTPUTS_ENV
from leoflow.model.outputs import cut_by_the_pod_budget
from leoflow.model.tries import TaskLaunch, TryKey, TryState

MANAGED_BY = "app.kubernetes.io/managed-by"
CLUSTER, DAG, RUN, TASK, TRY, TERM = (f"leoflow.io/{k}" for k in ("cluster", "dag", "run", "task", "try", "term"))
A_DAG, A_RUN, A_TASK, A_TRY, A_TRY_ID = (f"leoflow.io/{k}" for k in ("dag-id", "run-id", "task-id", "try-number",
                                                                        "task-try-id"))
#: A mapped instance's index (label and annotation) and task-instance id (annotation); unmapped pods
#: carry neither, so their labels and annotations are what they always were.
MAP_INDEX, A_TASK_INSTANCE = "leoflow.io/map-index", "leoflow.io/task-instance-id"
#: Waiting reasons that mean "this pod will not start by itself"; failed after the pending timeout.
STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "InvalidImageName",
                           "CreateContainerError"})

Pod = dict[str, Any]


def cluster_selector(cluster: str) -> str:
    """The label selector of every pod of one Leoflow cluster (and no other's)."""
    return f"{MANAGED_BY}=leoflow,{CLUSTER}={label_value(cluster)}"


def try_labels(cluster: str, key: TryKey, term: int) -> dict[str, str]:
    labels = {MANAGED_BY: "leoflow", CLUSTER: label_value(cluster), DAG: label_value(key.dag_id),
              RUN: label_value(key.run_id), TASK: label_value(key.task_id), TRY: str(key.try_number),
              TERM: str(term)}
    if key.map_index >= 0:
        labels[MAP_INDEX] = str(key.map_index)
    return labels


def pod_spec(cluster: str, namespace: str, launch: TaskLaunch, *, service_account: str | None,
             image_pull_secrets: tuple[str, ...], template: Mapping[str, Any] | None = None) -> Pod:
    """The pod of one try. ``launch.image`` must be set (checked by the caller).

    Raises :class:`~leoflow.errors.ValidationFailed` when the merged pod is invalid.
    """
    key = launch.key
    annotations = {A_DAG: key.dag_id, A_RUN: key.run_id, A_TASK: key.task_id,
                   A_TRY: str(key.try_number), A_TRY_ID: str(launch.task_try_id)}
    if key.map_index >= 0:
        annotations[MAP_INDEX] = str(key.map_index)
        annotations[A_TASK_INSTANCE] = str(key.instance)
    metadata = {
        "name": try_name(cluster, key), "namespace": namespace,
        "labels": try_labels(cluster, key, launch.term), "annotations": annotations,
    }
    return render_pod(launch, metadata, service_account=service_account, image_pull_secrets=image_pull_secrets,
                      template=template or {})


def pod_try_key(pod: Pod) -> TryKey | None:
    """The try a pod belongs to, from its annotations; None for a pod that is not a task pod."""
    ann = pod.get("metadata", {}).get("annotations") or {}
    try:
        if MAP_INDEX in ann:
            return TryKey(ann[A_DAG], ann[A_RUN], ann[A_TASK], int(ann[A_TRY]), int(ann[MAP_INDEX]),
                          int(ann[A_TASK_INSTANCE]))
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
    """What a pod's status says about its try.

    ``stuck``: the pod cannot start (image/config error, unschedulable) and says why;
    ``sidecars_running``: the try is over but other regular containers still run.
    """

    state: TryState | None  # None: still pending, nothing to report yet
    exit_code: int | None = None
    reason: str | None = None
    stuck: str | None = None
    sidecars_running: bool = False
    #: A success of a try whose task declares outputs: the ``task`` container's termination message
    #: (what it wrote to ``LEOFLOW_OUTPUTS``), raw; ``b""`` when empty. None otherwise.
    outputs: bytes | None = None


def pod_outcome(pod: Pod) -> PodOutcome:
    status = pod.get("status") or {}
    phase = status.get("phase")
    task = _container_status(status)
    terminated = ((task or {}).get("state") or {}).get("terminated")
    if status.get("reason") == "DeadlineExceeded" and phase == "Failed":
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        code = (terminated or {}).get("exitCode")
        return PodOutcome("failed", code, f"timed out after {deadline}s (activeDeadlineSeconds)")
    if terminated is not None and (task or {}).get("name") == CONTAINER:
        # The task container decides, whatever the pod's other containers are doing.
        code = terminated.get("exitCode")
        sidecars = phase in ("Running", "Pending") and _regular_containers_running(status)
        if code == 0:
            outputs = _outputs(pod, terminated)
            containers = len(status.get("containerStatuses") or [])
            cut = cut_by_the_pod_budget(len(outputs), containers) if outputs else None
            if cut is not None:
                return PodOutcome("failed", 0, cut, sidecars_running=sidecars)
            return PodOutcome("success", 0, None, sidecars_running=sidecars, outputs=outputs)
        if phase == "Failed" and status.get("reason"):
            return PodOutcome("failed", code, f"{status['reason']}: {status.get('message', '')}".rstrip(": "))
        detail = terminated.get("message") or terminated.get("reason") or "Error"
        reason = f"{detail} (exit code {code})" if code is not None else detail
        return PodOutcome("failed", code, reason, sidecars_running=sidecars)
    if phase == "Succeeded":
        return PodOutcome("success", 0, None)
    if phase == "Failed":
        code = (terminated or {}).get("exitCode")
        if status.get("reason"):
            return PodOutcome("failed", code, f"{status['reason']}: {status.get('message', '')}".rstrip(": "))
        if terminated is None and (init := _failed_init_container(status)) is not None:
            return PodOutcome("failed", None, init)
        detail = (terminated or {}).get("message") or (terminated or {}).get("reason") or "Error"
        return PodOutcome("failed", code, f"{detail} (exit code {code})" if code is not None else detail)
    if phase == "Running":
        return PodOutcome("running")
    return PodOutcome(None, stuck=_stuck(status))


def _stuck(status: Mapping[str, Any]) -> str | None:
    """Why a pending pod cannot start on its own, or None while it may still start."""
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    statuses.sort(key=lambda cs: cs.get("name") != CONTAINER)  # the task container's reason first
    for cs in statuses:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_REASONS:
            reason = waiting["reason"]
            if cs.get("name") not in (CONTAINER, None):
                reason = f"{reason} (container {cs['name']})"
            message = waiting.get("message")
            return f"{reason}: {message}" if message else reason
    for condition in status.get("conditions") or []:
        if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"):
            message = condition.get("message")
            return f"Unschedulable: {message}" if message else "Unschedulable"
    return None


def _failed_init_container(status: Mapping[str, Any]) -> str | None:
    """"init container NAME failed: REASON (exit code N)" for the one that stopped the pod, if any."""
    for cs in status.get("initContainerStatuses") or []:
        ended = (cs.get("state") or {}).get("terminated") or {}
        if ended.get("exitCode") not in (None, 0):
            detail = ended.get("message") or ended.get("reason") or "Error"
            return f"init container {cs.get('name')} failed: {detail} (exit code {ended['exitCode']})"
    return None


def _regular_containers_running(status: Mapping[str, Any]) -> bool:
    """Does a container other than ``task`` still run (not counting native sidecars, in init)?"""
    return any(cs.get("name") != CONTAINER and "terminated" not in (cs.get("state") or {})
               for cs in status.get("containerStatuses") or [])


def _outputs(pod: Pod, terminated: Mapping[str, Any]) -> bytes | None:
    """The termination message of a ``task`` container that was given ``LEOFLOW_OUTPUTS`` (its pod
    says so: a new leader adopting the pod needs no launch), as the bytes the kubelet copied.

    ``surrogatepass``: a lone surrogate the API server let through becomes bytes that are not
    UTF-8, which the check refuses as such, instead of an error here.
    """
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == CONTAINER:
            if any(e.get("name") == OUTPUTS_ENV for e in container.get("env") or []):
                message = terminated.get("message")
                return message.encode("utf-8", "surrogatepass") if isinstance(message, str) else b""
            return None
    return None


def _container_status(status: Mapping[str, Any]) -> dict[str, Any] | None:
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            return dict(cs)
    statuses = status.get("containerStatuses") or []
    return dict(statuses[0]) if statuses else None
