"""The fake cluster's one node and its scheduler: does a pod fit, and if not, what would kube-scheduler say?

Checked, in kube-scheduler's words: PersistentVolumeClaims the pod uses must exist; the node
must match ``nodeSelector`` and the required node affinity (``In``, ``NotIn``, ``Exists``,
``DoesNotExist``, ``Gt``, ``Lt``); every ``NoSchedule``/``NoExecute`` taint of the node must be
tolerated. A pod that does not fit stays ``Pending`` with ``PodScheduled=False``, reason
``Unschedulable`` and the scheduler's message, e.g. ``0/1 nodes are available: 1 node(s) didn't
match Pod's node affinity/selector. preemption: ...``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_PREEMPTION = "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."


@dataclass
class FakeNode:
    name: str = "fake-node"
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", **self.labels}


def unschedulable(spec: dict[str, Any], node: FakeNode, pvcs: set[str] | None) -> str | None:
    """The scheduler's message when ``spec`` cannot run on ``node``; None when it fits."""
    reason = _why_not(spec, node, pvcs)
    return f"0/1 nodes are available: {reason}. {_PREEMPTION}" if reason else None


def _why_not(spec: dict[str, Any], node: FakeNode, pvcs: set[str] | None) -> str | None:
    for volume in spec.get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim and pvcs is not None and claim not in pvcs:
            return f'persistentvolumeclaim "{claim}" not found'
    selector = spec.get("nodeSelector") or {}
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    if any(node.labels.get(k) != v for k, v in selector.items()) or (
            terms and not any(_term_matches(t, node.labels) for t in terms)):
        return "1 node(s) didn't match Pod's node affinity/selector"
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                _tolerates(t, taint) for t in spec.get("tolerations") or []):
            return f"1 node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
    return None


def _term_matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    for req in term.get("matchExpressions") or []:
        key, op, values = req["key"], req["operator"], req.get("values") or []
        value = labels.get(key)
        ok = {"In": value in values, "NotIn": value not in values, "Exists": value is not None,
              "DoesNotExist": value is None,
              "Gt": value is not None and value.isdigit() and bool(values) and int(value) > int(values[0]),
              "Lt": value is not None and value.isdigit() and bool(values) and int(value) < int(values[0])}.get(op)
        if not ok:
            return False
    return True


def _tolerates(toleration: dict[str, Any], taint: dict[str, str]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and (toleration.get("value") or "") == taint.get("value", "")
