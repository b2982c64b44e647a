"""Clear and mark: what an operator asks of a run's task instances, validated, and what it selects.

The API holds no fencing term, so it never changes task instances itself: it records a
*command* (``run_commands``) that the leader applies under its term, in one fenced transaction
with every consequence (:mod:`leoflow.scheduler.commands`). This module is the pure part both
sides share: parsing a request body into a :class:`ClearRequest` / :class:`MarkRequest` (a
:class:`~leoflow.errors.ValidationFailed` naming the field otherwise) and choosing which task
instances a clear resets (:func:`tasks_to_clear`).

Semantics (Airflow's ``tasks clear`` and ``mark success|failed``):

- **clear** resets the selected task instances — ``tasks`` by id, or with ``failed_only`` those
  that did not succeed (``failed``, ``upstream_failed``, ``cancelled``), or both (the
  intersection); with ``downstream`` every task downstream of them too — to ``pending``, to be
  scheduled again as a new try: try numbers keep counting (pod names stay unique, every try's
  history is kept) and each cleared instance gets a fresh retry budget. A cleared try that is
  still running is killed first. A finished run goes back to ``running`` (with a fresh run
  deadline, counted from the clear).
- **mark** sets one task instance to ``success`` or ``failed`` as if it had ended so (a
  running try is killed); the tasks downstream of it that a trigger rule had ended without
  running (``upstream_failed``, ``skipped``) are decided again, so downstream scheduling
  follows the new state. A finished run is re-decided (and reopened if work remains).
- **mark a run** (Airflow's mark run success / failed): ``success`` makes every task instance
  that did not succeed ``success``; ``failed`` makes its queued and running ones ``failed`` and
  its other unfinished ones ``skipped``; live tries are killed and the run takes the state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from leoflow.errors import ValidationFailed
from leoflow.model.bounds import type_name
from leoflow.model.limits import CLEAR_TASKS, MAP_ITEMS
from leoflow.model.spec.graph import DagGraph

CommandKind = Literal["clear", "mark", "mark_run"]
MarkState = Literal["success", "failed"]
MARK_STATES: tuple[MarkState, ...] = ("success", "failed")
#: Task states ``failed_only`` selects: the task did not succeed and was not skipped by a rule.
UNSUCCESSFUL = ("failed", "upstream_failed", "cancelled")
#: Task states that a trigger rule decided without running the task (re-decided after a mark).
DECIDED_UNRUN = ("upstream_failed", "skipped")


@dataclass(frozen=True)
class ClearRequest:
    tasks: tuple[str, ...] | None = None
    failed_only: bool = False
    downstream: bool = False
    #: One instance of the one mapped task named in ``tasks``: it runs again, the task does not
    #: expand again (None: the tasks whole; a mapped one expands again from its source).
    map_index: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tasks": None if self.tasks is None else list(self.tasks),
                               "failed_only": self.failed_only, "downstream": self.downstream}
        if self.map_index is not None:
            out["map_index"] = self.map_index
        return out


@dataclass(frozen=True)
class MarkRequest:
    task_id: str
    state: MarkState
    #: One instance of a mapped task (``?map_index=``); None: the task (every instance of a mapped one).
    map_index: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"task_id": self.task_id, "state": self.state}
        if self.map_index is not None:
            out["map_index"] = self.map_index
        return out


def _flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ValidationFailed(name, f"must be true or false, got {type_name(value)}")
    return value


def parse_clear(body: Mapping[str, Any]) -> ClearRequest:
    """``{tasks?: [ids], failed_only?: bool, downstream?: bool, map_index?: N}``; at least one of tasks /
    failed_only; ``map_index`` with exactly one task (an instance of a mapped task)."""
    unknown = sorted(set(body) - {"tasks", "failed_only", "downstream", "map_index"})
    if unknown:
        raise ValidationFailed(unknown[0], "unknown field (expected tasks, failed_only, downstream, map_index)")
    failed_only = _flag(body, "failed_only")
    downstream = _flag(body, "downstream")
    raw = body.get("tasks")
    tasks: tuple[str, ...] | None = None
    if raw is not None:
        if not isinstance(raw, list):
            raise ValidationFailed("tasks", f"must be a list of task ids, got {type_name(raw)}")
        if not raw:
            raise ValidationFailed("tasks", "must name at least one task (or leave it out and set failed_only)")
        if len(raw) > CLEAR_TASKS.maximum:
            raise ValidationFailed("tasks", f"names {len(raw):,} tasks; at most {CLEAR_TASKS.maximum:,} are allowed")
        for i, task_id in enumerate(raw):
            if not isinstance(task_id, str):
                raise ValidationFailed(f"tasks[{i}]", f"must be a task id string, got {type_name(task_id)}")
        tasks = tuple(dict.fromkeys(raw))
    if tasks is None and not failed_only:
        raise ValidationFailed("tasks", "name the tasks to clear, or set failed_only: true")
    map_index = body.get("map_index")
    if map_index is not None:
        if isinstance(map_index, bool) or not isinstance(map_index, int) or not 0 <= map_index < MAP_ITEMS.maximum:
            raise ValidationFailed("map_index", f"must be an instance index, 0 to {MAP_ITEMS.maximum - 1:,}")
        if tasks is None or len(tasks) != 1:
            raise ValidationFailed("map_index", "clears one instance of one mapped task: name exactly one task")
    return ClearRequest(tasks=tasks, failed_only=failed_only, downstream=downstream, map_index=map_index)


def parse_mark(task_id: str, body: Mapping[str, Any]) -> MarkRequest:
    """``{state: success | failed}`` for the task in the path."""
    unknown = sorted(set(body) - {"state"})
    if unknown:
        raise ValidationFailed(unknown[0], "unknown field (expected state)")
    state = body.get("state")
    if state not in MARK_STATES or not isinstance(state, str):
        got = repr(state[:40]) if isinstance(state, str) else type_name(state)
        raise ValidationFailed("state", f"must be 'success' or 'failed', got {got}")
    return MarkRequest(task_id=task_id, state="success" if state == "success" else "failed")


def parse_mark_run(body: Mapping[str, Any]) -> MarkState:
    """``{state: success | failed}`` for the run in the path."""
    return parse_mark("", body).state


def unknown_tasks(request: ClearRequest, known: Iterable[str]) -> list[tuple[int, str]]:
    """(index, id) of the requested task ids the run's DAG version does not have."""
    names = set(known)
    return [(i, t) for i, t in enumerate(request.tasks or ()) if t not in names]


def tasks_to_clear(request: ClearRequest, states: Mapping[str, str], graph: DagGraph) -> list[str]:
    """The task ids a clear resets, given the run's task states (sorted; unknown ids ignored)."""
    chosen = [t for t in (request.tasks if request.tasks is not None else states) if t in states]
    if request.failed_only:
        chosen = [t for t in chosen if states[t] in UNSUCCESSFUL]
    selected = set(chosen)
    if request.downstream:  # one pass from all of them (a pass per task was quadratic, issue 44)
        selected.update(d for d in graph.descendants_of(chosen) if d in states)
    return sorted(selected)


def decided_downstream(task_id: str, states: Mapping[str, str], graph: DagGraph) -> list[str]:
    """Descendants of a marked task that a trigger rule ended unrun: they are decided again."""
    return sorted(d for d in graph.descendants_of((task_id,)) if states.get(d) in DECIDED_UNRUN)
