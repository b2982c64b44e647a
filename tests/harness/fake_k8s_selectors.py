"""Label and field selectors as the Kubernetes API server parses them.

Label selectors: comma-separated requirements, all of which must hold — ``k=v``, ``k==v``,
``k!=v`` (also true when the label is absent), ``k in (a,b)``, ``k notin (a,b)`` (true when
absent), ``k`` (exists), ``!k`` (does not exist). Field selectors: ``metadata.name``,
``metadata.namespace`` and ``status.phase`` with ``=``, ``==`` and ``!=``. A malformed selector
is a 400 ``BadRequest``, as on a real server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.harness.fake_k8s_errors import bad_request

Requirement = Callable[[Mapping[str, str]], bool]
_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( ... )``."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Requirement:
    if m := _SET_RE.match(text):
        key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
        if op == "in":
            return lambda labels: key in labels and labels[key] in values
        return lambda labels: key not in labels or labels[key] not in values
    if m := _CMP_RE.match(text):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _EXISTS_RE.match(text):
        negate, key = m.group(1) == "!", m.group(2)
        return (lambda labels: key not in labels) if negate else (lambda labels: key in labels)
    raise bad_request(f"unable to parse requirement: {text.strip()!r}")


class LabelSelector:
    def __init__(self, text: str | None) -> None:
        self.text = text or ""
        self.requirements = [_requirement(part) for part in _split_top_level(self.text)]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(req(labels) for req in self.requirements)


_FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda pod: pod["metadata"]["name"],
    "metadata.namespace": lambda pod: pod["metadata"]["namespace"],
    "status.phase": lambda pod: (pod.get("status") or {}).get("phase", ""),
}


#: The field selectors the API server supports on core/v1 Events (``fields.Set`` of the event strategy).
EVENT_FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda e: e["metadata"]["name"],
    "metadata.namespace": lambda e: e["metadata"]["namespace"],
    **{f"involvedObject.{f}": (lambda e, f=f: str((e.get("involvedObject") or {}).get(f, "")))  # type: ignore[misc]
       for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": lambda e: e.get("reason", ""),
    "reportingComponent": lambda e: e.get("reportingComponent", ""),
    "source": lambda e: (e.get("source") or {}).get("component", ""),
    "type": lambda e: e.get("type", ""),
}


class FieldSelector:
    def __init__(self, text: str | None, fields: dict[str, Callable[[dict[str, Any]], str]] | None = None) -> None:
        self.checks: list[Callable[[dict[str, Any]], bool]] = []
        known = _FIELDS if fields is None else fields
        for part in _split_top_level(text or ""):
            m = _CMP_RE.match(part)
            if not m or m.group(1) not in known:
                raise bad_request(f'"{part.strip()}" is not a known field selector: only '
                                  + ", ".join(f'"{k}"' for k in known))
            getter, op, value = known[m.group(1)], m.group(2), m.group(3)
            if op == "!=":
                self.checks.append(lambda pod, g=getter, v=value: g(pod) != v)  # type: ignore[misc]
            else:
                self.checks.append(lambda pod, g=getter, v=value: g(pod) == v)  # type: ignore[misc]

    def matches(self, pod: dict[str, Any]) -> bool:
        return all(check(pod) for check in self.checks)
