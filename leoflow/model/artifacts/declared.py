"""``artifacts:`` of a task: what it leaves behind and what it takes from upstream tasks.

::

    artifacts:
      outputs: [{name: report, path: out/report, optional: false}]
      inputs:  [{name: data, from: "{{ tasks.extract.artifacts.report }}", path: in/data}]

Paths are relative to the task's artifacts directory (``$LEOFLOW_ARTIFACTS``: a per-try directory
locally, an ``emptyDir`` on Kubernetes), never absolute: Argo reads an output at any absolute
path of the main container, which needs a way into that container's filesystem (its docker, pns
and emissary executors, and the bugs its users filed against each); a shared directory needs
none, and a path that cannot start with ``/`` or hold ``..`` cannot leave it.

Outcome policy (Argo's): a declared output that is missing when the task succeeded fails the try
unless it says ``optional: true``; an input whose upstream artifact is missing fails the try
before it starts, unless the input says ``optional: true`` (then the path is simply absent).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_name, shown, type_name
from leoflow.model.fields import as_mapping, bool_field, no_unknown, required

#: A relative path: segments of safe characters, none starting with '.' (so neither '.' nor '..').
_PATH = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*")
#: ``{{ tasks.T.artifacts.N }}``, the whole of ``from:`` (spaces inside the braces optional).
_FROM = re.compile(r"\{\{\s*tasks\.([A-Za-z0-9_.-]+?)\.artifacts\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_OUTPUT_FIELDS = {"name", "path", "optional"}
_INPUT_FIELDS = {"name", "path", "from", "optional"}


@dataclass(frozen=True)
class OutputArtifact:
    """A file or directory the task leaves at ``path``, uploaded when its process or container ends."""

    name: str
    path: str
    optional: bool = False

    def to_canonical(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "optional": self.optional}


@dataclass(frozen=True)
class InputArtifact:
    """An upstream task's output artifact, unpacked at ``path`` before the task starts."""

    name: str
    task: str
    artifact: str
    path: str
    optional: bool = False

    @property
    def source(self) -> str:
        return f"{{{{ tasks.{self.task}.artifacts.{self.artifact} }}}}"

    def to_canonical(self) -> dict[str, Any]:
        return {"name": self.name, "from": self.source, "path": self.path, "optional": self.optional}


@dataclass(frozen=True)
class TaskArtifacts:
    outputs: tuple[OutputArtifact, ...] = ()
    inputs: tuple[InputArtifact, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.outputs or self.inputs)

    def to_canonical(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.outputs:
            out["outputs"] = [o.to_canonical() for o in self.outputs]
        if self.inputs:
            out["inputs"] = [i.to_canonical() for i in self.inputs]
        return out


NO_ARTIFACTS = TaskArtifacts()


def artifact_path(value: object, path: str) -> str:
    """A relative path below the artifacts directory; ValidationFailed naming the problem."""
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a string, got {type_name(value)}")
    if len(value) > limits.ARTIFACT_PATH.maximum:
        raise ValidationFailed(path, f"must be at most {limits.ARTIFACT_PATH.maximum} characters, got {len(value):,}")
    if value.startswith("/"):
        raise ValidationFailed(path, f"{shown(value)} is absolute: a path is relative to $LEOFLOW_ARTIFACTS")
    if not _PATH.fullmatch(value):
        raise ValidationFailed(path, f"{shown(value)} is not a safe relative path: segments of letters, digits, "
                               "'.', '_' and '-', none empty or starting with '.' (no '..')")
    return value


def parse_artifacts(value: object, path: str) -> TaskArtifacts:
    """The task field ``artifacts:``; ``from:`` is parsed here and checked against the DAG later
    (:func:`check_artifact_sources`)."""
    if value is None:
        return NO_ARTIFACTS
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a mapping with outputs and/or inputs, got {type_name(value)}")
    doc = as_mapping(value, path)
    no_unknown(doc, {"outputs", "inputs"}, path)
    outputs = tuple(_output(raw, f"{path}.outputs[{i}]") for i, raw in enumerate(_items(doc, "outputs", path)))
    inputs = tuple(_input(raw, f"{path}.inputs[{i}]") for i, raw in enumerate(_items(doc, "inputs", path)))
    for kind, entries in (("outputs", outputs), ("inputs", inputs)):
        _distinct(entries, f"{path}.{kind}")
    return TaskArtifacts(outputs, inputs)


def _items(doc: Mapping[str, Any], key: str, path: str) -> list[Any]:
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationFailed(f"{path}.{key}", f"must be a list, got {type_name(value)}")
    if len(value) > limits.ARTIFACT_DECLS.maximum:
        raise ValidationFailed(f"{path}.{key}", f"has {len(value):,} artifacts; at most "
                               f"{limits.ARTIFACT_DECLS.maximum} are allowed")
    return value


def _output(raw: object, path: str) -> OutputArtifact:
    doc = _entry(raw, path, _OUTPUT_FIELDS)
    return OutputArtifact(name=check_name(required(doc, "name", path), f"{path}.name", limits.ARTIFACT_NAME),
                          path=artifact_path(required(doc, "path", path), f"{path}.path"),
                          optional=bool_field(doc.get("optional", False), f"{path}.optional"))


def _input(raw: object, path: str) -> InputArtifact:
    doc = _entry(raw, path, _INPUT_FIELDS)
    name = check_name(required(doc, "name", path), f"{path}.name", limits.ARTIFACT_NAME)
    source = required(doc, "from", path)
    if not isinstance(source, str):
        raise ValidationFailed(f"{path}.from", f"must be a string, got {type_name(source)}")
    match = _FROM.fullmatch(source.strip())
    if match is None:
        raise ValidationFailed(f"{path}.from", f"{shown(source)} must be one reference "
                               "'{{ tasks.TASK.artifacts.NAME }}'")
    return InputArtifact(name=name, task=match[1], artifact=match[2],
                         path=artifact_path(required(doc, "path", path), f"{path}.path"),
                         optional=bool_field(doc.get("optional", False), f"{path}.optional"))


def _entry(raw: object, path: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValidationFailed(path, f"an artifact must be a mapping, got {type_name(raw)}")
    doc = as_mapping(raw, path)
    no_unknown(doc, allowed, path)
    return doc


def _distinct(entries: Sequence[OutputArtifact | InputArtifact], path: str) -> None:
    """Names are unique, and no path is another's or inside another's (one would pack or overwrite the other)."""
    names: dict[str, int] = {}
    paths: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry.name in names:
            raise ValidationFailed(f"{path}[{i}].name", f"duplicate artifact name {entry.name!r} "
                                   f"(also {path}[{names[entry.name]}])")
        names[entry.name] = i
        for other, j in paths.items():
            if entry.path == other or entry.path.startswith(other + "/") or other.startswith(entry.path + "/"):
                raise ValidationFailed(f"{path}[{i}].path", f"{shown(entry.path)} overlaps {shown(other)} "
                                       f"({path}[{j}].path)")
        paths[entry.path] = i


def check_artifact_sources(tasks: Sequence[Any], written: object = None) -> None:
    """Every ``from:`` names an output artifact declared by an upstream (ancestor) task.

    ``tasks``: objects with ``id``, ``depends_on``, ``artifacts`` and ``mapped``; ``written``: the
    raw ``tasks`` list, to find where each was written. Raises one ValidationFailed for the first
    problem, the others in ``also``. A mapped task's artifacts cannot be an input yet (which
    instance's?): refused with that reason rather than silently picking one.
    """
    by_id = {t.id: t for t in tasks}
    places = _places(written)
    problems: list[ValidationFailed] = []
    ancestors: dict[str, set[str]] = {}
    for task in tasks:
        for i, item in enumerate(task.artifacts.inputs):
            where = f"tasks[{places.get(task.id, '?')}].artifacts.inputs[{i}].from"
            problem = _source_problem(task, item, by_id, ancestors)
            if problem is not None:
                problems.append(ValidationFailed(where, f"{item.source}: {problem}"))
    if problems:
        raise ValidationFailed(problems[0].path, problems[0].problem, also=tuple(problems[1:]))


def _source_problem(task: Any, item: InputArtifact, by_id: Mapping[str, Any],
                    ancestors: dict[str, set[str]]) -> str | None:
    source = by_id.get(item.task)
    if source is None:
        return f"unknown task {item.task!r}"
    if item.task == task.id:
        return "a task cannot read its own artifacts"
    if item.task not in _ancestors(task.id, by_id, ancestors):
        return (f"task {item.task!r} is not upstream of {task.id!r}: add it to depends_on (directly or "
                "through other tasks) so its artifacts exist when this task starts")
    declared = {o.name for o in source.artifacts.outputs}
    if item.artifact not in declared:
        names = ", ".join(sorted(declared)) or "none"
        return f"task {item.task!r} declares no output artifact {item.artifact!r} (it declares: {names})"
    if getattr(source, "mapped", False):
        return f"task {item.task!r} is mapped (map_over): one instance's artifact cannot be chosen as an input"
    return None


def _ancestors(task_id: str, by_id: Mapping[str, Any], memo: dict[str, set[str]]) -> set[str]:
    """Every task ``task_id`` depends on, directly or not (iterative: a long chain must not recurse)."""
    if task_id in memo:
        return memo[task_id]
    seen: set[str] = set()
    stack = list(by_id[task_id].depends_on) if task_id in by_id else []
    while stack:
        dep = stack.pop()
        if dep in seen or dep not in by_id:
            continue
        seen.add(dep)
        stack.extend(by_id[dep].depends_on)
    memo[task_id] = seen
    return seen


def _places(written: object) -> dict[str, int]:
    if not isinstance(written, list):
        return {}
    return {raw["id"]: i for i, raw in enumerate(written) if isinstance(raw, dict) and isinstance(raw.get("id"), str)}
