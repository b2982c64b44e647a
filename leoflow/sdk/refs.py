"""References a task's strings may hold: ``{{ params.P }}``, ``{{ tasks.T.outputs.K }}``, ``{{ item }}``.

A :class:`Ref` renders to the very text a YAML author writes (``str(ref)``, an f-string, or the
object itself in ``args``/``env``/``map_over``), so the SDK adds no template syntax of its own:
what the server checks and renders is the pipeline language of ADR 0014, decision 2. A ``Ref``
kept as an object (not formatted into a longer string) also remembers *whose* output it is, so
:meth:`leoflow.sdk.dag.DAG.to_spec` can refuse a task of another DAG and add the edge the
language requires (an output is only readable downstream of its task).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from leoflow.sdk.located import DagError, caller
from leoflow.sdk.pod import Output

#: A key readable as ``.K`` in a reference (others are written ``["K"]``, as in CEL).
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _step(key: str | int) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"[{key}]"
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f".{key}"
    if isinstance(key, str) and '"' not in key and "\\" not in key:
        return f'["{key}"]'
    raise TypeError(f"a reference step must be a name or a list index, got {key!r}")


class Ref:
    """One ``{{ … }}`` reference; index it to reach inside (``ref["k"]``, ``ref[0]``, ``ref.k``)."""

    __slots__ = ("expression", "task")

    def __init__(self, expression: str, task: Any = None) -> None:
        self.expression = expression
        #: The :class:`leoflow.sdk.dag.Task` whose output this reads (None: params, item, map_index);
        #: typed loosely so that this leaf module needs nothing of ``dag``, which builds on it.
        self.task = task

    def __getitem__(self, key: str | int) -> Ref:
        return Ref(self.expression + _step(key), self.task)

    def __getattr__(self, name: str) -> Ref:
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name]

    def __str__(self) -> str:
        return "{{ " + self.expression + " }}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"Ref({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and (other.expression, other.task) == (self.expression, self.task)

    def __hash__(self) -> int:
        return hash(self.expression)


#: The item of a mapped task's instance (``{{ item }}``; ``item["k"]`` for a list of objects).
item = Ref("item")
#: The index of a mapped task's instance (``{{ map_index }}``).
map_index = Ref("map_index")


class RunRefs:
    """``run.id``, ``run.logical_date``; exit tasks also ``run.state``, ``run.reason``, ``run.failed_tasks``."""

    def __getattr__(self, name: str) -> Ref:
        if name.startswith("__"):
            raise AttributeError(name)
        return Ref(f"run.{name}")


run = RunRefs()


def task_expression(task_id: str) -> str:
    """How a reference names a task: ``tasks.extract``, or ``tasks["load-data"]`` for an id with ``-``."""
    return f"tasks.{task_id}" if _PLAIN_KEY.fullmatch(task_id) else f'tasks["{task_id}"]'


#: Task ids a string reads outputs of, written either way (``tasks.T.outputs`` / ``tasks["T"].outputs``),
#: in a ``{{ }}`` reference or a ``when:`` expression alike.
_TASK_READ = re.compile(r'\btasks\s*(?:\.\s*([A-Za-z0-9_]+)|\[\s*"([^"\\]+)"\s*\]|\[\s*\'([^\'\\]+)\'\s*\])'
                        r'\s*\.\s*outputs\b')


def tasks_read(text: str) -> list[str]:
    """The task ids whose outputs ``text`` reads (in order, once each)."""
    found: dict[str, None] = {}
    for match in _TASK_READ.finditer(text):
        found[next(g for g in match.groups() if g is not None)] = None
    return list(found)


def plain(value: Any) -> Any:
    """``value`` with every :class:`Ref` rendered to its text, recursively through lists and mappings."""
    if isinstance(value, Ref):
        return str(value)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def refs_in(value: Any) -> list[Ref]:
    """Every :class:`Ref` object inside ``value`` (lists and mappings walked)."""
    if isinstance(value, Ref):
        return [value]
    if isinstance(value, list | tuple):
        return [r for v in value for r in refs_in(v)]
    if isinstance(value, dict):
        return [r for v in value.values() for r in refs_in(v)]
    return []


def strings_in(value: Any) -> list[str]:
    """Every string inside ``value`` (lists and mappings walked; a Ref counts as its text)."""
    if isinstance(value, str | Ref):
        return [str(value)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings_in(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings_in(v)]
    return []


class ParamRefs:
    """``dag.params.P``: a reference to a declared run parameter."""

    def __init__(self, schema: Mapping[str, Any] | None) -> None:
        self._schema = schema

    def __getitem__(self, name: str) -> Ref:
        declared = (self._schema or {}).get("properties") or {}
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise DagError("params", f"{name!r} is not a declared parameter (declared: {known})", caller())
        return Ref("params" + Ref("")[name].expression)

    def __getattr__(self, name: str) -> Ref:
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name]


class Outputs:
    """A task's declared outputs, readable as references: ``extract.outputs["files"]`` or ``extract.outputs.files``."""

    def __init__(self, task: Any, declared: Mapping[str, str | Output | Mapping[str, Any]]) -> None:
        self._task = task
        self.declared = dict(declared)

    def __getitem__(self, name: str) -> Ref:
        if name not in self.declared:
            known = ", ".join(self.declared) or "none"
            raise DagError("outputs", f"task {self._task.id!r} declares no output {name!r} (declared: {known})",
                           caller())
        return Ref(task_expression(self._task.id) + ".outputs", self._task)[name]

    def __getattr__(self, name: str) -> Ref:
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def to_spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, decl in self.declared.items():
            if isinstance(decl, str):
                out[name] = {"type": decl}
            elif isinstance(decl, Output):
                out[name] = decl.to_spec()
            else:
                out[name] = dict(decl)
        return out
