"""The cluster's pod policy: what a DAG author may ask of a task pod beyond running a container.

A DAG author is not a cluster administrator, yet ``pod_template`` and the first-class pod fields
(:mod:`leoflow.model.k8s.pod`) can ask for anything a Pod can: a ``hostPath`` of ``/``, a privileged
container, the node's network or process namespace, extra kernel capabilities, another service
account's token, or the release's own Secrets (the database URL, the admin token) mounted by
name. Unless the operator allows it, each of those is refused:

- ``hostPath`` volumes (allowance ``host-path``);
- ``privileged: true`` (``privileged``) and ``allowPrivilegeEscalation: true``
  (``privilege-escalation``) in any container's ``securityContext``;
- ``hostNetwork`` / ``hostPID`` / ``hostIPC`` (``host-network``, ``host-pid``, ``host-ipc``);
- ``securityContext.capabilities.add`` (``capabilities``);
- a service account (``service_account``, ``serviceAccountName``) other than the cluster's
  own (``LEOFLOW_K8S_SERVICE_ACCOUNT``) or one in ``LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS``
  (``*``: any);
- a Secret named in ``LEOFLOW_K8S_PROTECTED_SECRETS`` (the chart lists the release's database
  and admin-token Secrets) in a volume, a projected volume, ``env`` or ``env_from`` — no
  allowance lifts this: an operator who means it removes the name from the list.

``LEOFLOW_K8S_POD_POLICY`` is a comma-separated list of the allowances above (``all`` allows
every one). Containers means every container of the pod: ``containers``, ``initContainers``
(sidecars are init containers) and ``ephemeralContainers``.

The policy is checked where a DAG enters (apply and sync: a 422 naming the field, e.g.
``tasks[0].pod_template.spec.volumes[1].hostPath``) and again on the leader before a pod is
created, so a DAG stored before the policy was tightened fails that try with the same reason,
never the scheduler. The operator's own ``LEOFLOW_K8S_POD_TEMPLATE`` is trusted and not checked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leoflow.errors import ValidationFailed

if TYPE_CHECKING:
    from leoflow.model.k8s.pod import PodFields
    from leoflow.model.spec.dag import DagSpec

#: The allowances ``LEOFLOW_K8S_POD_POLICY`` may name.
ALLOWANCES = ("host-path", "privileged", "privilege-escalation", "host-network", "host-pid", "host-ipc",
              "capabilities")
#: Host namespaces of a pod spec and the allowance each needs.
_HOST_NAMESPACES = {"hostNetwork": "host-network", "hostPID": "host-pid", "hostIPC": "host-ipc"}
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


@dataclass(frozen=True)
class PodPolicy:
    """What task pods may ask for; the default refuses everything this module lists."""

    allowances: frozenset[str] = frozenset()
    #: Service accounts a DAG may name besides ``default_service_account``; ``*`` in it: any.
    allowed_service_accounts: frozenset[str] = frozenset()
    default_service_account: str | None = None
    #: Secrets no DAG may reference (the release's own).
    protected_secrets: frozenset[str] = frozenset()

    def allows(self, allowance: str) -> bool:
        return allowance in self.allowances

    def service_account_allowed(self, name: str) -> bool:
        return ("*" in self.allowed_service_accounts or name in self.allowed_service_accounts
                or name == self.default_service_account)


def parse_allowances(value: str) -> frozenset[str]:
    """``LEOFLOW_K8S_POD_POLICY``: comma-separated allowances, ``all``, or empty (refuse all)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if len(items) > len(ALLOWANCES) + 1:
        raise ValueError(f"names {len(items)} allowances; there are only {len(ALLOWANCES)}")
    if "all" in items:
        return frozenset(ALLOWANCES)
    unknown = [item for item in items if item not in ALLOWANCES]
    if unknown:
        raise ValueError(f"unknown allowance {unknown[0][:40]!r} (known: all, {', '.join(ALLOWANCES)})")
    return frozenset(items)


# --------------------------------------------------------------------------- checking

def check_dag_pods(spec: DagSpec, policy: PodPolicy) -> None:
    """Raise :class:`ValidationFailed` naming the first field of ``spec``'s pods that ``policy`` refuses."""
    check_spec_pods(spec.defaults, [(f"tasks[{i}]", task.pod_own) for i, task in enumerate(spec.tasks)]
                    + [(f"on_exit[{i}]", task.pod_own) for i, task in enumerate(spec.on_exit)], policy)


def check_spec_pods(defaults: Mapping[str, Any], tasks: list[tuple[str, Mapping[str, Any]]],
                    policy: PodPolicy) -> None:
    """Raise :class:`ValidationFailed` for the first field of the DAG that ``policy`` refuses.

    ``defaults`` is the DAG's ``defaults:`` block and ``tasks`` each task's path
    (``tasks[3]``) with its own pod fields, all in canonical form (what the stored spec holds).
    """
    for path, reason in _violations(defaults, "defaults", policy):
        raise ValidationFailed(path, reason)
    for task_path, own in tasks:
        for path, reason in _violations(own, task_path, policy):
            raise ValidationFailed(path, reason)


def _violations(own: Mapping[str, Any], path: str, policy: PodPolicy) -> Iterator[tuple[str, str]]:
    yield from _volumes(own.get("volumes"), f"{path}.volumes", policy)
    container = (own.get("security_context") or {}).get("container")
    yield from _security_context(container, f"{path}.security_context.container", policy)
    account = own.get("service_account")
    if isinstance(account, str):
        yield from _service_account(account, f"{path}.service_account", policy)
    yield from _env(own.get("env"), f"{path}.env", policy, first_class=True)
    for i, source in enumerate(own.get("env_from") or []):
        if isinstance(source, Mapping) and source.get("secret") in policy.protected_secrets:
            yield f"{path}.env_from[{i}].secret", _protected(source["secret"])
    template = own.get("pod_template")
    if isinstance(template, Mapping) and isinstance(template.get("spec"), Mapping):
        yield from _pod_spec(template["spec"], f"{path}.pod_template.spec", policy)


def _pod_spec(spec: Mapping[str, Any], path: str, policy: PodPolicy) -> Iterator[tuple[str, str]]:
    for field, allowance in _HOST_NAMESPACES.items():
        if spec.get(field) is True and not policy.allows(allowance):
            yield f"{path}.{field}", _refused(f"{field}: true", allowance)
    for field in ("serviceAccountName", "serviceAccount"):
        if isinstance(spec.get(field), str):
            yield from _service_account(spec[field], f"{path}.{field}", policy)
    yield from _volumes(spec.get("volumes"), f"{path}.volumes", policy)
    for group in _CONTAINER_LISTS:
        for i, container in enumerate(spec.get(group) or []):
            if not isinstance(container, Mapping):
                continue
            where = f"{path}.{group}[{i}]"
            yield from _security_context(container.get("securityContext"), f"{where}.securityContext", policy)
            yield from _env(container.get("env"), f"{where}.env", policy, first_class=False)
            for j, source in enumerate(container.get("envFrom") or []):
                ref = source.get("secretRef") if isinstance(source, Mapping) else None
                if isinstance(ref, Mapping) and ref.get("name") in policy.protected_secrets:
                    yield f"{where}.envFrom[{j}].secretRef.name", _protected(ref["name"])


def _volumes(volumes: object, path: str, policy: PodPolicy) -> Iterator[tuple[str, str]]:
    for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
        if not isinstance(volume, Mapping):
            continue
        where = f"{path}[{i}]"
        if volume.get("hostPath") is not None and not policy.allows("host-path"):
            yield f"{where}.hostPath", _refused("a hostPath volume (the node's own files)", "host-path")
        secret = volume.get("secret")
        if isinstance(secret, Mapping) and secret.get("secretName") in policy.protected_secrets:
            yield f"{where}.secret.secretName", _protected(secret["secretName"])
        projected = volume.get("projected")
        sources = projected.get("sources") if isinstance(projected, Mapping) else None
        for j, source in enumerate(sources if isinstance(sources, list) else []):
            ref = source.get("secret") if isinstance(source, Mapping) else None
            if isinstance(ref, Mapping) and ref.get("name") in policy.protected_secrets:
                yield f"{where}.projected.sources[{j}].secret.name", _protected(ref["name"])


def _security_context(context: object, path: str, policy: PodPolicy) -> Iterator[tuple[str, str]]:
    if not isinstance(context, Mapping):
        return
    if context.get("privileged") is True and not policy.allows("privileged"):
        yield f"{path}.privileged", _refused("a privileged container", "privileged")
    if context.get("allowPrivilegeEscalation") is True and not policy.allows("privilege-escalation"):
        yield f"{path}.allowPrivilegeEscalation", _refused("allowPrivilegeEscalation: true", "privilege-escalation")
    capabilities = context.get("capabilities")
    if isinstance(capabilities, Mapping) and capabilities.get("add") and not policy.allows("capabilities"):
        yield f"{path}.capabilities.add", _refused("added capabilities", "capabilities")


def _env(env: object, path: str, policy: PodPolicy, *, first_class: bool) -> Iterator[tuple[str, str]]:
    for i, entry in enumerate(env if isinstance(env, list) else []):
        if not isinstance(entry, Mapping):
            continue
        if first_class:
            ref, where = entry.get("secret"), f"{path}[{i}].secret.name"
        else:
            value_from = entry.get("valueFrom")
            ref = value_from.get("secretKeyRef") if isinstance(value_from, Mapping) else None
            where = f"{path}[{i}].valueFrom.secretKeyRef.name"
        if isinstance(ref, Mapping) and ref.get("name") in policy.protected_secrets:
            yield where, _protected(ref["name"])


def _service_account(name: str, path: str, policy: PodPolicy) -> Iterator[tuple[str, str]]:
    if not policy.service_account_allowed(name):
        yield path, (f"service account {name[:80]!r} is not allowed by the cluster's pod policy; the operator "
                     "lists those DAGs may use in LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS")


def _refused(what: str, allowance: str) -> str:
    return (f"{what} is refused by the cluster's pod policy; the operator may allow it with "
            f"LEOFLOW_K8S_POD_POLICY={allowance}")


def _protected(name: object) -> str:
    return (f"Secret {str(name)[:80]!r} is one of the cluster's own (LEOFLOW_K8S_PROTECTED_SECRETS): "
            "task pods may not read it")


def check_task_pod(pod: PodFields | None, policy: PodPolicy) -> None:
    """The leader's check before it creates a try's pod: ``pod`` (defaults and task merged) against ``policy``.

    A DAG stored before the operator tightened the policy fails that try with this reason; its
    paths start at ``pod`` (the merged fields) rather than at the stored spec's ``tasks[i]``.
    """
    if pod is None:
        return
    own: dict[str, Any] = {
        "volumes": list(pod.volumes),
        "security_context": {"container": pod.container_security_context},
        "service_account": pod.service_account,
        "env": [{"name": e.name, "secret": {"name": e.secret.name}} for e in pod.env if e.secret],
        "env_from": [{"secret": s.name} for s in pod.env_from if s.kind == "secret"],
        "pod_template": pod.pod_template,
    }
    for path, reason in _violations(own, "pod", policy):
        raise ValidationFailed(path, reason)
