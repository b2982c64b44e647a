"""The containers that move a try's artifacts on Kubernetes, added to its rendered pod (additive).

For a task that declares ``artifacts:`` (leoflow.model.artifacts), the pod gets:

- an ``emptyDir`` volume, ``leoflow-artifacts``, mounted at ``/leoflow/artifacts`` in the task
  container (``LEOFLOW_ARTIFACTS`` names it) and in the two containers below;
- for inputs, an init container ``leoflow-fetch`` running ``leoflow artifacts fetch`` in Leoflow's
  own image: it unpacks every input before the task starts, and a required input that is not
  there fails it (and so the pod) with one line naming the artifact — the task never runs;
- for outputs, a native sidecar ``leoflow-upload`` (an init container with ``restartPolicy:
  Always``, Kubernetes 1.29+) running ``leoflow artifacts upload --on-signal``: it idles until the
  kubelet stops it, which it does once the task container has exited, then packs and uploads the
  outputs and writes the try's manifest. The pod's ``terminationGracePeriodSeconds`` is raised to
  :data:`UPLOAD_GRACE` (never lowered) so the upload has time before SIGKILL.

So the task's image needs nothing (no shell, no client), unlike Argo's copying of its ``argoexec``
binary into the main container; and no container watches another through the Kubernetes API
(Argo's ``wait`` container needs RBAC on pods for that). Credentials come from the pod's service
account (IRSA, workload identity), as for the replicas; a ``file://`` archive is a directory of
the replica and cannot be reached from a pod, so Kubernetes artifacts need a bucket URL.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from leoflow import __version__
from leoflow.errors import ValidationFailed
from leoflow.executor.artifacts import ARTIFACTS_ENV, POD_ARTIFACTS_DIR
from leoflow.model.artifacts.declared import TaskArtifacts, parse_artifacts
from leoflow.model.tries import TaskLaunch

VOLUME = "leoflow-artifacts"
FETCH = "leoflow-fetch"
UPLOAD = "leoflow-upload"
#: Leoflow's own image (the chart's ``image.repository``), at the replica's version.
IMAGE = f"leoflow/leoflow:{__version__}"
#: Seconds between the kubelet's SIGTERM to the upload sidecar and its SIGKILL: 5 GiB at a modest
#: 20 MB/s, the largest artifact a try may leave (leoflow.model.limits.ARTIFACT_BYTES), takes ~4 min.
UPLOAD_GRACE = 600
#: What the artifact containers may use: packing is one core at most; memory stays bounded
#: (leoflow.storage.artifacts streams through a temporary file).
_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}


def with_artifacts(pod: dict[str, Any], launch: TaskLaunch, *, cluster: str, archive_url: str | None,
                   inputs: Sequence[Mapping[str, Any]], image: str = IMAGE) -> dict[str, Any]:
    """``pod`` with the artifacts volume, mounts and containers (a copy; ``pod`` unchanged)."""
    artifacts = launch.artifacts
    if artifacts is None or not artifacts:
        return pod
    out = copy.deepcopy(pod)
    spec = out["spec"]
    spec.setdefault("volumes", []).append({"name": VOLUME, "emptyDir": {}})
    mount = {"name": VOLUME, "mountPath": POD_ARTIFACTS_DIR}
    for container in spec["containers"]:
        if container.get("name") == "task":
            container.setdefault("volumeMounts", []).append(dict(mount))
            container.setdefault("env", []).append({"name": ARTIFACTS_ENV, "value": POD_ARTIFACTS_DIR})
    env = [{"name": "LEOFLOW_LOG_ARCHIVE_URL", "value": archive_url or "off"},
           {"name": "LEOFLOW_LOG_FORMAT", "value": "json"}]
    init = spec.setdefault("initContainers", [])
    if artifacts.inputs:
        init.append(_container(FETCH, image, ["fetch", "--root", POD_ARTIFACTS_DIR, "--inputs",
                                              json.dumps(list(inputs), separators=(",", ":"))], env, mount))
    if artifacts.outputs:
        outputs = [o.to_canonical() for o in artifacts.outputs]
        sidecar = _container(UPLOAD, image, ["upload", "--root", POD_ARTIFACTS_DIR, "--cluster", cluster,
                                             "--try-id", str(launch.task_try_id), "--on-signal",
                                             "--outputs", json.dumps(outputs, separators=(",", ":"))], env, mount)
        sidecar["restartPolicy"] = "Always"
        init.append(sidecar)
        spec["terminationGracePeriodSeconds"] = max(UPLOAD_GRACE, int(spec.get("terminationGracePeriodSeconds") or 0))
    return out


def declared_outputs(pod: Mapping[str, Any]) -> TaskArtifacts | None:
    """The outputs a pod's upload sidecar was told to store (None: it has none, or its arguments are
    not ours). A leader that adopts a running try has no launch; the pod itself says what its end
    must wait for, so the try is judged the same whichever leader sees it end."""
    for container in (pod.get("spec") or {}).get("initContainers") or []:
        if container.get("name") != UPLOAD:
            continue
        args = container.get("args") or []
        try:
            raw = json.loads(args[args.index("--outputs") + 1])
            declared = parse_artifacts({"outputs": raw}, "outputs")
        except (ValueError, IndexError, TypeError, ValidationFailed):
            return None
        return declared if declared.outputs else None
    return None


def _container(name: str, image: str, args: list[str], env: list[dict[str, str]],
               mount: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["leoflow", "artifacts"], "args": args, "env": copy.deepcopy(env),
            "volumeMounts": [dict(mount)], "resources": copy.deepcopy(_RESOURCES),
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "runAsNonRoot": True, "readOnlyRootFilesystem": False}}
