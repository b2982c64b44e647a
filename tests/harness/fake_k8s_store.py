"""The fake Kubernetes API server's object store: pods, resource versions, watch history.

Semantics copied from the real API server (only what Leoflow relies on, but exactly):

- one global, strictly increasing ``resourceVersion``; every write bumps it and stamps the object;
- the server fills ``uid``, ``resourceVersion``, ``creationTimestamp``, ``namespace`` and an
  initial ``status`` (``phase: Pending``) on create; client-sent values of these are ignored;
- creating an existing name fails with 409 ``AlreadyExists``; getting/deleting a missing one
  with 404 ``NotFound``; invalid objects with 422 ``Invalid`` (with ``details.causes``);
- the watch history is bounded: watching from a resourceVersion older than the oldest retained
  event yields a 410 ``Expired`` ("too old resource version") error event, as after an etcd
  compaction (:meth:`PodStore.compact` forces one).
"""

from __future__ import annotations

import bisect
import builtins
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from tests.harness.fake_k8s_errors import ApiError
from tests.harness.fake_k8s_selectors import FieldSelector, LabelSelector

Pod = dict[str, Any]
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Event:
    """One change, serialised once when it happens (watchers share the bytes)."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    namespace: str
    pod: Pod  # a stub for selector matching: name, namespace, labels, phase
    data: bytes

    def payload(self) -> bytes:
        return self.data


J = TypeVar("J")


def _clone(obj: J) -> J:
    """A deep copy of JSON data (several times faster than copy.deepcopy for it)."""
    return cast(J, json.loads(json.dumps(obj)))


def _stub(pod: Pod) -> Pod:
    meta = pod["metadata"]
    return {"metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                         "labels": dict(meta.get("labels") or {})},
            "status": {"phase": (pod.get("status") or {}).get("phase")}}


def _validate(pod: Pod) -> None:
    causes: list[dict[str, str]] = []
    meta = pod.get("metadata") or {}
    name = meta.get("name")
    if not name:
        causes.append({"reason": "FieldValueRequired", "field": "metadata.name", "message": "Required value"})
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        causes.append({"reason": "FieldValueInvalid", "field": "metadata.name",
                       "message": f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of '
                                  "lower case alphanumeric characters, '-' or '.'"})
    for key, value in (meta.get("labels") or {}).items():
        label_name = key.rsplit("/", 1)[-1]
        if len(label_name) > 63 or not _LABEL_NAME.match(label_name):
            causes.append({"reason": "FieldValueInvalid", "field": "metadata.labels",
                           "message": f'Invalid value: "{key}": name part must be a valid label name'})
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append({"reason": "FieldValueInvalid", "field": "metadata.labels",
                           "message": f'Invalid value: "{value}": a valid label must be an empty string or '
                                      "consist of alphanumeric characters, '-', '_' or '.', at most 63"})
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        causes.append({"reason": "FieldValueRequired", "field": "spec.containers", "message": "Required value"})
    for i, c in enumerate(containers):
        if not c.get("name"):
            causes.append({"reason": "FieldValueRequired", "field": f"spec.containers[{i}].name",
                           "message": "Required value"})
        if not c.get("image"):
            causes.append({"reason": "FieldValueRequired", "field": f"spec.containers[{i}].image",
                           "message": "Required value"})
    ads = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    if ads is not None and (not isinstance(ads, int) or ads <= 0):
        causes.append({"reason": "FieldValueInvalid", "field": "spec.activeDeadlineSeconds",
                       "message": "must be greater than 0"})
    if causes:
        summary = "; ".join(f"{c['field']}: {c['message']}" for c in causes)
        raise ApiError(422, "Invalid", f'Pod "{name or ""}" is invalid: {summary}',
                       {"name": name or "", "kind": "Pod", "causes": causes})


class PodStore:
    """Thread-safe pods of all namespaces plus the bounded event history watches read from."""

    def __init__(self, history_limit: int = 100_000) -> None:
        self.cond = threading.Condition()
        self.pods: dict[tuple[str, str], Pod] = {}
        self.rv = 1
        self.history: list[Event] = []
        self.history_rvs: list[int] = []
        self.history_limit = history_limit
        self.compacted_rv = 1  # watching from an rv below this is "too old"
        self.on_create: list[Callable[[Pod], None]] = []
        self.on_delete: list[Callable[[Pod], None]] = []
        #: core/v1 Events by (namespace, name), and their own watch history (same resourceVersions).
        self.events: dict[tuple[str, str], Pod] = {}
        self.event_history: list[Event] = []
        self.event_history_rvs: list[int] = []
        #: (pod uid, reason, message, fieldPath) -> event name: a repeat bumps ``count`` (MODIFIED).
        self._event_keys: dict[tuple[str, str, str, str], str] = {}

    # ----------------------------------------------------------------- writes (hold the lock)

    def _record(self, type_: str, ns: str, pod: Pod) -> None:
        data = json.dumps({"type": type_, "object": pod}, separators=(",", ":")).encode() + b"\n"
        self.history.append(Event(self.rv, type_, ns, _stub(pod), data))
        self.history_rvs.append(self.rv)
        if len(self.history) > self.history_limit * 1.25:  # trim in batches: O(1) amortised
            drop = len(self.history) - self.history_limit
            self.compacted_rv = self.history_rvs[drop - 1]
            del self.history[:drop], self.history_rvs[:drop]
        self.cond.notify_all()

    def _bump(self, pod: Pod) -> None:
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)

    def create(self, ns: str, body: Pod) -> Pod:
        pod = _clone(body)
        pod.setdefault("apiVersion", "v1")
        pod.setdefault("kind", "Pod")
        meta = pod.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        _validate(pod)
        with self.cond:
            key = (ns, meta["name"])
            if key in self.pods:
                raise ApiError(409, "AlreadyExists", f'pods "{meta["name"]}" already exists',
                               {"name": meta["name"], "kind": "pods"})
            meta.update({"namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": now_rfc3339(),
                         "generation": 1})
            for dropped in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(dropped, None)
            spec = pod.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            for c in spec.get("containers", []):
                c.setdefault("imagePullPolicy", "IfNotPresent")
                c.setdefault("terminationMessagePath", "/dev/termination-log")
                c.setdefault("terminationMessagePolicy", "File")
            pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
            self._bump(pod)
            self.pods[key] = pod
            self._record("ADDED", ns, pod)
            result = _clone(pod)
        for hook in self.on_create:
            hook(result)
        return result

    def update(self, ns: str, name: str, uid: str, mutate: Callable[[Pod], bool | None]) -> Pod | None:
        """Apply ``mutate`` to the pod if it still exists with this uid (the kubelet's status writes)."""
        with self.cond:
            pod = self.pods.get((ns, name))
            if pod is None or pod["metadata"]["uid"] != uid:
                return None
            if mutate(pod) is False:
                return _clone(pod)
            self._bump(pod)
            self._record("MODIFIED", ns, pod)
            return _clone(pod)

    def delete(self, ns: str, name: str, grace_seconds: int | None) -> Pod:
        """Graceful delete of a live pod marks it terminating; otherwise (or grace 0) it goes at once."""
        with self.cond:
            pod = self.pods.get((ns, name))
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            grace = grace_seconds if grace_seconds is not None else pod["spec"].get("terminationGracePeriodSeconds", 30)
            live = pod["status"].get("phase") in ("Pending", "Running")
            if live and grace > 0:
                if "deletionTimestamp" not in pod["metadata"]:
                    pod["metadata"]["deletionTimestamp"] = now_rfc3339()
                    pod["metadata"]["deletionGracePeriodSeconds"] = grace
                    self._bump(pod)
                    self._record("MODIFIED", ns, pod)
                result = _clone(pod)
            else:
                result = self._remove(ns, name)
        for hook in self.on_delete:
            hook(result)
        return result

    def finalize_delete(self, ns: str, name: str, uid: str) -> None:
        """The kubelet has stopped a terminating pod: remove the object."""
        with self.cond:
            pod = self.pods.get((ns, name))
            if pod is not None and pod["metadata"]["uid"] == uid:
                self._remove(ns, name)

    def _remove(self, ns: str, name: str) -> Pod:
        pod = self.pods.pop((ns, name))
        self._bump(pod)
        self._record("DELETED", ns, pod)
        return _clone(pod)

    def compact(self) -> None:
        """Forget all history, as an etcd compaction does: older watches now get 410 Gone."""
        with self.cond:
            self.history.clear()
            self.history_rvs.clear()
            self.event_history.clear()
            self.event_history_rvs.clear()
            self.compacted_rv = self.rv

    def record_event(self, pod: Pod, reason: str, message: str, *, type_: str = "Normal",
                     container: str | None = None, component: str = "kubelet") -> Pod:
        """The kubelet's (or scheduler's) EventRecorder: a new Event about ``pod``, or — for the same
        reason, message and object — the existing one with ``count`` + 1 and a new ``lastTimestamp``,
        as the API server's event aggregation does. Events carry no labels of the pod."""
        meta = pod["metadata"]
        ns = meta["namespace"]
        field_path = f"spec.containers{{{container}}}" if container else ""
        key = (meta["uid"], reason, message, field_path)
        with self.cond:
            now = now_rfc3339()
            name = self._event_keys.get(key)
            event = self.events.get((ns, name)) if name else None
            if event is not None:
                event["count"] += 1
                event["lastTimestamp"] = now
                type_of_change = "MODIFIED"
            else:
                name = f"{meta['name']}.{uuid.uuid4().hex[:16]}"
                self._event_keys[key] = name
                involved = {"kind": "Pod", "namespace": ns, "name": meta["name"], "uid": meta["uid"],
                            "apiVersion": "v1", "resourceVersion": meta.get("resourceVersion", "")}
                if field_path:
                    involved["fieldPath"] = field_path
                event = {"apiVersion": "v1", "kind": "Event",
                         "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                                      "creationTimestamp": now},
                         "involvedObject": involved, "reason": reason, "message": message, "type": type_,
                         "count": 1, "firstTimestamp": now, "lastTimestamp": now,
                         "source": {"component": component, "host": "fake-node"},
                         "reportingComponent": component, "reportingInstance": "fake-node"}
                self.events[(ns, name)] = event
                type_of_change = "ADDED"
            self.rv += 1
            event["metadata"]["resourceVersion"] = str(self.rv)
            data = json.dumps({"type": type_of_change, "object": event}, separators=(",", ":")).encode() + b"\n"
            self.event_history.append(Event(self.rv, type_of_change, ns, event, data))
            self.event_history_rvs.append(self.rv)
            if len(self.event_history) > self.history_limit * 1.25:
                drop = len(self.event_history) - self.history_limit
                self.compacted_rv = max(self.compacted_rv, self.event_history_rvs[drop - 1])
                del self.event_history[:drop], self.event_history_rvs[:drop]
            self.cond.notify_all()
            return _clone(event)

    def list_events(self, ns: str | None, fields: FieldSelector) -> tuple[builtins.list[Pod], int]:
        """Matching events (by namespace, name) and the list's resourceVersion."""
        with self.cond:
            items = [_clone(e) for k, e in sorted(self.events.items())
                     if (ns is None or k[0] == ns) and fields.matches(e)]
            return items, self.rv

    def events_events_after(self, rv: int) -> builtins.list[Event]:
        """Watch events of Events newer than ``rv`` (caller holds ``cond``)."""
        return self.event_history[bisect.bisect_right(self.event_history_rvs, rv):]

    # ----------------------------------------------------------------- reads

    def get(self, ns: str, name: str) -> Pod:
        with self.cond:
            pod = self.pods.get((ns, name))
            if pod is None:
                raise ApiError(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
            return _clone(pod)

    def list(self, ns: str | None, labels: LabelSelector, fields: FieldSelector, *, limit: int | None,
             continue_after: str | None) -> tuple[list[Pod], int, str | None]:
        """Matching pods sorted by (namespace, name), one page; returns (items, rv, next continue key)."""
        with self.cond:
            rv = self.rv
            keys = sorted(k for k in self.pods if ns is None or k[0] == ns)
            items: list[Pod] = []
            for key in keys:
                if continue_after is not None and "/".join(key) <= continue_after:
                    continue
                pod = self.pods[key]
                if labels.matches(pod["metadata"].get("labels") or {}) and fields.matches(pod):
                    if limit and len(items) == limit:
                        return items, rv, "/".join(_key(items[-1]))
                    items.append(_clone(pod))
            return items, rv, None

    # Below the store's own ``list`` method, a bare ``list`` in an annotation names that method.
    def events_after(self, rv: int) -> builtins.list[Event]:
        """Events newer than ``rv`` (caller holds ``cond``)."""
        return self.history[bisect.bisect_right(self.history_rvs, rv):]

    def snapshot(self) -> builtins.list[Pod]:
        with self.cond:
            return [_clone(p) for p in self.pods.values()]


def _key(pod: Pod) -> tuple[str, str]:
    return (pod["metadata"]["namespace"], pod["metadata"]["name"])
