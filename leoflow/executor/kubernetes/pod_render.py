"""A try's pod, rendered: Leoflow's fields over the templates, restricted defaults, checked before sending.

Precedence, lowest first (each layer strategic-merged over the previous,
:mod:`leoflow.model.k8s.strategic_merge`):

1. the cluster's default template (``LEOFLOW_K8S_POD_TEMPLATE``, the chart's ``tasks.podTemplate``);
2. the DAG's ``defaults.pod_template``, then the task's ``pod_template`` (already merged into
   ``launch.pod.pod_template`` by :func:`leoflow.model.k8s.pod.resolve`);
3. the pod Leoflow builds from the spec's first-class fields (``env``, ``volumes``,
   ``node_selector``, ``security_context``, ...): first-class fields beat templates;
4. Pod Security ``restricted`` defaults, filled in only where no layer set the key
   (:func:`restricted_defaults`);
5. Leoflow's own fields, which nothing overrides: name, namespace, the ``leoflow.io/*`` and
   ``app.kubernetes.io/managed-by`` labels and annotations, ``restartPolicy: Never``, and the
   ``task`` container's image and command (a task without one gets none, whatever a template
   says: the image's entrypoint runs with ``args``) — and, for a task that declares outputs, its
   ``terminationMessagePath: /dev/termination-log`` and ``terminationMessagePolicy: File`` (ADR
   0014: ``FallbackToLogsOnError`` would make a log tail "outputs"), with ``LEOFLOW_OUTPUTS``
   naming that file.

The result is checked (:func:`check_rendered`) — the Pod schema, container names, every volume
mount naming a volume — and a pod that fails is never sent: the try fails with the path and the
problem (:class:`~leoflow.errors.ValidationFailed`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model.env_names import OUTPUTS_ENV
from leoflow.model.k8s.names import RESERVED_KEY_PREFIXES, RESERVED_KEYS, label_value
from leoflow.model.k8s.objects import check_object
from leoflow.model.k8s.pod import EnvVar, KeyRef, PodFields
from leoflow.model.k8s.strategic_merge import merge_pods
from leoflow.model.tries import TaskLaunch

CONTAINER = "task"
#: Where a task that declares outputs writes them: the kubelet copies this file into the task
#: container's ``state.terminated.message`` (at most 4,096 bytes, the last ones).
TERMINATION_LOG = "/dev/termination-log"
#: kubectl logs/exec pick this container of a multi-container pod without ``-c``.
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"
_NO_PRIVILEGE_ESCALATION_WITH = ("SYS_ADMIN", "CAP_SYS_ADMIN")

Pod = dict[str, Any]


def render_pod(launch: TaskLaunch, metadata: Mapping[str, Any], *, service_account: str | None,
               image_pull_secrets: tuple[str, ...], template: Mapping[str, Any]) -> Pod:
    """The pod of one try; ``metadata`` holds Leoflow's name, namespace, labels and annotations."""
    fields = launch.pod or PodFields()
    built = _built(launch, fields, metadata, service_account, image_pull_secrets)
    pod = merge_pods(merge_pods(template, fields.pod_template), built)
    if pod["spec"].get("automountServiceAccountToken") is None:
        pod["spec"]["automountServiceAccountToken"] = False
    restricted_defaults(pod["spec"])
    _leoflow_wins(pod, built)
    check_rendered(pod)
    return pod


def _built(launch: TaskLaunch, fields: PodFields, metadata: Mapping[str, Any], service_account: str | None,
           image_pull_secrets: tuple[str, ...]) -> Pod:
    container: dict[str, Any] = {"name": CONTAINER, "image": launch.image}
    if launch.command:  # none: the image's entrypoint runs with the args (ADR 0014, decision 8)
        container["command"] = list(launch.command)
    if launch.args:
        container["args"] = list(launch.args)
    env = _env({**launch.env, OUTPUTS_ENV: TERMINATION_LOG} if launch.outputs_declared else launch.env, fields.env)
    if launch.outputs_declared:
        container.update(terminationMessagePath=TERMINATION_LOG, terminationMessagePolicy="File")
    if env:
        container["env"] = env
    if fields.env_from:
        container["envFrom"] = [_env_source(s.kind, s.name, s.prefix, s.optional) for s in fields.env_from]
    if launch.resources:
        container["resources"] = _resources(launch.resources)
    if fields.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in fields.volume_mounts]
    if fields.image_pull_policy:
        container["imagePullPolicy"] = fields.image_pull_policy
    if fields.working_dir:
        container["workingDir"] = fields.working_dir
    if fields.container_security_context:
        container["securityContext"] = copy.deepcopy(dict(fields.container_security_context))
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if launch.timeout_seconds:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(launch.timeout_seconds))
    account = fields.service_account or service_account
    if account:
        spec["serviceAccountName"] = account
    if fields.automount_service_account_token is not None:
        spec["automountServiceAccountToken"] = fields.automount_service_account_token
    if image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    optional: dict[str, Any] = {
        "volumes": [copy.deepcopy(dict(v)) for v in fields.volumes], "nodeSelector": dict(fields.node_selector),
        "tolerations": [copy.deepcopy(dict(t)) for t in fields.tolerations],
        "affinity": copy.deepcopy(dict(fields.affinity or {})), "priorityClassName": fields.priority_class_name,
        "securityContext": copy.deepcopy(dict(fields.pod_security_context)),
    }
    spec.update({k: v for k, v in optional.items() if v})
    meta = copy.deepcopy(dict(metadata))
    meta["labels"] = {**fields.labels, **meta.get("labels", {})}
    meta["annotations"] = {**fields.annotations, **meta.get("annotations", {}), DEFAULT_CONTAINER: CONTAINER}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _env(values: Mapping[str, str], entries: tuple[EnvVar, ...]) -> list[dict[str, Any]]:
    """The spec's entries in order (references included), then the rest (run context) by name."""
    out: list[dict[str, Any]] = []
    for entry in entries:
        if entry.secret is not None:
            out.append({"name": entry.name, "valueFrom": {"secretKeyRef": _key_ref(entry.secret)}})
        elif entry.config_map is not None:
            out.append({"name": entry.name, "valueFrom": {"configMapKeyRef": _key_ref(entry.config_map)}})
        else:
            out.append({"name": entry.name, "value": values.get(entry.name, entry.value or "")})
    named = {e.name for e in entries}
    out.extend({"name": k, "value": str(v)} for k, v in sorted(values.items()) if k not in named)
    return out


def _key_ref(ref: KeyRef) -> dict[str, Any]:
    out: dict[str, Any] = {"name": ref.name, "key": ref.key}
    if ref.optional:
        out["optional"] = True
    return out


def _env_source(kind: str, name: str, prefix: str | None, optional: bool) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name}
    if optional:
        ref["optional"] = True
    out: dict[str, Any] = {"secretRef" if kind == "secret" else "configMapRef": ref}
    if prefix:
        out["prefix"] = prefix
    return out


def _resources(resources: Mapping[str, Any]) -> dict[str, Any]:
    if "requests" in resources or "limits" in resources:
        return {k: dict(v) for k, v in resources.items() if k in ("requests", "limits")}
    flat = {k: str(v) for k, v in resources.items()}
    return {"requests": flat, "limits": dict(flat)}


def restricted_defaults(spec: dict[str, Any]) -> None:
    """Fill in what the ``restricted`` Pod Security profile needs, wherever nobody said otherwise.

    Pod: ``runAsNonRoot: true`` (unless some layer runs as user 0) and a ``RuntimeDefault``
    seccomp profile. Every container and init container: ``allowPrivilegeEscalation: false``
    (unless privileged or given SYS_ADMIN, which Kubernetes refuses together with it) and
    ``capabilities.drop: [ALL]``. Windows pods get none of these (the profile exempts them).
    """
    if (spec.get("os") or {}).get("name") == "windows":
        return
    containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
    pod_sc = spec.setdefault("securityContext", {})
    root = pod_sc.get("runAsUser") == 0 or any((c.get("securityContext") or {}).get("runAsUser") == 0
                                                for c in containers)
    if pod_sc.get("runAsNonRoot") is None and not root:
        pod_sc["runAsNonRoot"] = True
    if pod_sc.get("seccompProfile") is None:
        pod_sc["seccompProfile"] = {"type": "RuntimeDefault"}
    for container in containers:
        sc = container.get("securityContext")
        if sc is None:
            sc = container["securityContext"] = {}
        added = (sc.get("capabilities") or {}).get("add") or []
        if (sc.get("allowPrivilegeEscalation") is None and sc.get("privileged") is not True
                and not set(added) & set(_NO_PRIVILEGE_ESCALATION_WITH)):
            sc["allowPrivilegeEscalation"] = False
        capabilities = sc.get("capabilities")
        if capabilities is None:
            capabilities = sc["capabilities"] = {}
        if capabilities.get("drop") is None:
            capabilities["drop"] = ["ALL"]


def _leoflow_wins(pod: Pod, built: Pod) -> None:
    """Re-assert Leoflow's own fields (a template cannot have removed or changed them)."""
    meta, own = pod.setdefault("metadata", {}), built["metadata"]
    meta["name"], meta["namespace"] = own["name"], own["namespace"]
    for group in ("labels", "annotations"):
        current = {k: v for k, v in (meta.get(group) or {}).items()
                   if not (k.lower().startswith(RESERVED_KEY_PREFIXES) or k.lower() in RESERVED_KEYS)}
        reserved = {k: v for k, v in own[group].items()
                    if k.lower().startswith(RESERVED_KEY_PREFIXES) or k.lower() in RESERVED_KEYS}
        meta[group] = {**current, **reserved}
    for key in ("apiVersion", "kind", "metadata", "spec"):  # the usual order, for people reading pods
        pod[key] = pod.pop(key, built[key])
    spec = pod["spec"]
    spec["restartPolicy"] = "Never"
    mine = built["spec"]["containers"][0]
    for container in spec["containers"]:
        if container.get("name") == CONTAINER:
            container["image"] = mine["image"]
            if "command" in mine:
                container["command"] = mine["command"]
            else:
                container.pop("command", None)
            for key in ("terminationMessagePath", "terminationMessagePolicy"):
                if key in mine:
                    container[key] = mine[key]


def check_rendered(pod: Pod) -> None:
    """What the API server would refuse, found before sending (ValidationFailed names the path)."""
    spec = pod["spec"]
    check_object(spec, "PodSpec", "spec", partial=False)
    for group in ("labels", "annotations"):
        check_object({group: pod["metadata"].get(group) or {}}, "ObjectMeta", "metadata", partial=False)
    for key, value in (pod["metadata"].get("labels") or {}).items():
        label_value(value, f"metadata.labels.{key}")
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    seen: dict[str, str] = {}
    for group in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(group) or []):
            path = f"spec.{group}[{i}]"
            name = container.get("name")
            if name in seen:
                raise ValidationFailed(f"{path}.name", f"duplicate container name {name!r} (also {seen[name]})")
            seen[name] = path
            if not container.get("image"):
                raise ValidationFailed(f"{path}.image", "is required")
            for j, mount in enumerate(container.get("volumeMounts") or []):
                if mount.get("name") not in volumes:
                    raise ValidationFailed(f"{path}.volumeMounts[{j}].name",
                                           f"no volume named {mount.get('name')!r} (declare it in volumes, or in a "
                                           "pod_template's spec.volumes)")
    if CONTAINER not in seen:  # pragma: no cover - the built pod always has it
        raise ValidationFailed("spec.containers", f"has no {CONTAINER!r} container")
