"""``wait_for:`` and ``depends_on_past:`` on a task: conditions the leader checks before it queues it.

A task with waits is held in the state ``waiting`` once its trigger rule says run — no pod, no
pool slot, no worker — until every condition is met (then it is queued like any other), one of
them fails (a rejected approval, a DAG deleted meanwhile) or times out (``timeout_seconds``,
7 days by default as an Airflow sensor's; the task then fails, or is skipped with
``soft_fail: true``). The kinds, one key each:

- ``{dag: ID, states: [success], offset: -1d}`` — the run of DAG ``ID`` whose logical date is
  this run's logical date plus ``offset`` (0 by default) has reached one of ``states``. The date
  must match exactly: Airflow's ``ExternalTaskSensor`` users most often hang on a logical-date
  mismatch between two schedules, so the waiting task shows the exact date it looks for;
- ``{dataset: URI}`` — an event of the dataset recorded after the run started;
- ``{not_before: +2h}`` — the run's logical date plus the offset has passed;
- ``{approval: {message: …}}`` — someone allowed to operate the DAG approved (the task runs) or
  rejected (it fails with the comment) it, through the API, CLI or dashboard.

``depends_on_past: true`` adds one more: the same task of the DAG's previous run (by logical
date) has ended ``success`` or ``skipped`` (a DAG's first run does not wait); it has no timeout,
as in Airflow.

A duration is a signed number and a unit, or several (``-1d``, ``+2h``, ``90m``, ``1d12h``,
``30s``, ``1w``); a bare number is seconds. Absent fields stay out of the canonical form, so every
existing spec hash is unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_count, check_length, check_name, shown, type_name, within
from leoflow.model.fields import as_mapping, no_unknown, plain_number
from leoflow.model.spec.datasets import dataset_uri
from leoflow.model.states import TERMINAL_RUN_STATES

WaitKind = Literal["dag", "dataset", "time", "approval", "past"]
#: Seconds a wait holds a task when its entry names no ``timeout_seconds`` (Airflow's sensor default).
DEFAULT_WAIT_TIMEOUT = 7 * limits.DAY
_KEYS: dict[str, WaitKind] = {"dag": "dag", "dataset": "dataset", "not_before": "time", "approval": "approval"}
_COMMON = {"timeout_seconds", "soft_fail"}
_FIELDS: dict[WaitKind, set[str]] = {"dag": {"dag", "states", "state", "offset", *_COMMON},
                                     "dataset": {"dataset", *_COMMON}, "time": {"not_before", *_COMMON},
                                     "approval": {"approval", *_COMMON}}
_UNITS = {"s": 1, "m": limits.MINUTE, "h": limits.HOUR, "d": limits.DAY, "w": 7 * limits.DAY}
_DURATION = re.compile(r"([+-]?)((?:\d{1,9}[smhdw])+)")
_PART = re.compile(r"(\d{1,9})([smhdw])")


@dataclass(frozen=True)
class Wait:
    """One condition of a task's ``wait_for`` (or its ``depends_on_past``), defaults resolved."""

    kind: WaitKind
    #: The DAG id (``dag``), the URI (``dataset``), the message (``approval``); "" otherwise.
    target: str = ""
    #: Run states that satisfy a ``dag`` wait.
    states: tuple[str, ...] = ("success",)
    #: ``dag``: added to the run's logical date to find the other run; ``time``: the moment.
    offset_seconds: float = 0.0
    #: None: no timeout (``depends_on_past`` only).
    timeout_seconds: float | None = DEFAULT_WAIT_TIMEOUT
    soft_fail: bool = False

    def canonical(self) -> dict[str, Any]:
        out: dict[str, Any]
        if self.kind == "dag":
            out = {"dag": self.target, "states": list(self.states)}
            if self.offset_seconds:
                out["offset"] = _signed(self.offset_seconds)
        elif self.kind == "dataset":
            out = {"dataset": self.target}
        elif self.kind == "time":
            out = {"not_before": _signed(self.offset_seconds)}
        else:
            out = {"approval": {"message": self.target} if self.target else {}}
        if self.timeout_seconds != DEFAULT_WAIT_TIMEOUT and self.timeout_seconds is not None:
            out["timeout_seconds"] = plain_number(self.timeout_seconds)
        if self.soft_fail:
            out["soft_fail"] = True
        return out


#: ``depends_on_past: true`` as a wait.
PAST = Wait("past", timeout_seconds=None)


def _signed(seconds: float) -> str:
    sign = "-" if seconds < 0 else "+"
    rest = int(abs(seconds))
    parts = []
    for unit, size in (("d", limits.DAY), ("h", limits.HOUR), ("m", limits.MINUTE), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return sign + ("".join(parts) or "0s")


def duration(value: object, path: str) -> float:
    """A signed duration (``-1d``, ``+2h``, ``1d12h``; a number is seconds) held to :data:`limits.WAIT_OFFSET`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(within(value, path, limits.WAIT_OFFSET))
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a duration such as '-1d' or '+2h', got {type_name(value)}")
    match = _DURATION.fullmatch(value.strip()) if len(value) <= 40 else None
    if match is None:
        raise ValidationFailed(path, f"must be a duration such as '-1d', '+2h' or '1d12h' (units s, m, h, d, w), "
                                     f"got {shown(value[:60])}")
    seconds = sum(int(n) * _UNITS[u] for n, u in _PART.findall(match.group(2)))
    return float(within(-seconds if match.group(1) == "-" else seconds, path, limits.WAIT_OFFSET))


def parse_wait(raw: object, path: str) -> Wait:
    doc = as_mapping(raw, path)
    kinds = [k for k in _KEYS if k in doc]
    if len(kinds) != 1:
        keys = ", ".join(sorted(map(str, doc)))[:200] or "none"
        found = f"found {', '.join(kinds)}" if kinds else f"found keys {keys}"
        raise ValidationFailed(path, f"must name exactly one of dag, dataset, not_before, approval ({found})")
    kind = _KEYS[kinds[0]]
    no_unknown(doc, _FIELDS[kind], path)
    timeout: float = DEFAULT_WAIT_TIMEOUT
    if doc.get("timeout_seconds") is not None:
        timeout = float(within(doc["timeout_seconds"], f"{path}.timeout_seconds", limits.WAIT_TIMEOUT))
    soft_fail = doc.get("soft_fail", False)
    if not isinstance(soft_fail, bool):
        raise ValidationFailed(f"{path}.soft_fail", f"must be true or false, got {type_name(soft_fail)}")
    if kind == "dag":
        dag_id = check_name(doc["dag"], f"{path}.dag", limits.DAG_ID)
        states = _states(doc, path)
        offset = duration(doc["offset"], f"{path}.offset") if doc.get("offset") is not None else 0.0
        return Wait("dag", dag_id, states, offset, timeout, soft_fail)
    if kind == "dataset":
        return Wait("dataset", dataset_uri(doc["dataset"], f"{path}.dataset"), timeout_seconds=timeout,
                    soft_fail=soft_fail)
    if kind == "time":
        return Wait("time", offset_seconds=duration(doc["not_before"], f"{path}.not_before"),
                    timeout_seconds=timeout, soft_fail=soft_fail)
    approval = {} if doc["approval"] is None else as_mapping(doc["approval"], f"{path}.approval")
    no_unknown(approval, {"message"}, f"{path}.approval")
    message = approval.get("message", "")
    if not isinstance(message, str):
        raise ValidationFailed(f"{path}.approval.message", f"must be a string, got {type_name(message)}")
    check_length(message, f"{path}.approval.message", limits.APPROVAL_MESSAGE)
    if any(ord(c) < 32 and c not in "\n\t" for c in message):
        raise ValidationFailed(f"{path}.approval.message", "must not contain control characters")
    return Wait("approval", message, timeout_seconds=timeout, soft_fail=soft_fail)


def _states(doc: dict[str, Any], path: str) -> tuple[str, ...]:
    if "state" in doc and "states" in doc:
        raise ValidationFailed(f"{path}.state", "give state or states, not both")
    raw = doc.get("states", doc.get("state", ["success"]))
    key = "states" if "states" in doc else "state"
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values:
        raise ValidationFailed(f"{path}.{key}", f"must be a non-empty list of {', '.join(TERMINAL_RUN_STATES)}")
    out: list[str] = []
    for i, state in enumerate(values):
        if not isinstance(state, str) or state not in TERMINAL_RUN_STATES:
            got = shown(state[:40]) if isinstance(state, str) else type_name(state)
            raise ValidationFailed(f"{path}.{key}[{i}]", f"must be one of {', '.join(TERMINAL_RUN_STATES)} (a "
                                                         f"finished run's state), got {got}")
        if state not in out:
            out.append(state)
    return tuple(out)


def parse_wait_for(value: object, path: str) -> tuple[Wait, ...]:
    """``tasks[].wait_for``: a list of conditions (absent or null: none)."""
    if value is None:
        return ()
    if isinstance(value, dict):  # one condition, written without the list
        value = [value]
    if not isinstance(value, list):
        raise ValidationFailed(path, f"must be a list of conditions, got {type_name(value)}")
    check_count(len(value), path, limits.WAIT_FOR)
    waits = tuple(parse_wait(item, f"{path}[{i}]") for i, item in enumerate(value))
    seen: dict[Wait, int] = {}
    for i, wait in enumerate(waits):
        if wait in seen and wait.kind != "approval":
            raise ValidationFailed(f"{path}[{i}]", f"the same condition as {path}[{seen[wait]}]")
        seen.setdefault(wait, i)
    return waits


def parse_depends_on_past(value: object, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValidationFailed(path, f"must be true or false, got {type_name(value)}")
    return value


def waits_of(wait_for: tuple[Wait, ...], depends_on_past: bool) -> tuple[Wait, ...]:
    """Every condition of a task, ``depends_on_past`` last (its position is its index in storage)."""
    return (*wait_for, PAST) if depends_on_past else wait_for


def waited_dags(waits: tuple[Wait, ...]) -> list[str]:
    return [w.target for w in waits if w.kind == "dag"]
