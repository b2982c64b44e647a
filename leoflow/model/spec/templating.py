"""Templates in a task's ``command``, ``args`` and ``env``: a literal grammar, checked at apply,
rendered once at launch, never scanned again.

A task may mention what it cannot know when its DAG is written — a run's parameter, the run's id
and logical date, a value an upstream task published — inside its argv and environment::

    args: ["--day", "{{ params.day }}", "--run", "{{ run.id }}"]
    env: {PARTITIONS: "{{ tasks.list.outputs.partitions }}"}

**The grammar is not a language.** A reference is ``"{{" ws REF ws "}}"`` where REF is one of

- ``params.P`` then any of ``.K`` / ``[I]`` / ``["K"]`` (a parameter of the DAG's ``params``),
- ``run.id``, ``run.logical_date``, ``run.data_interval_start``, ``run.data_interval_end``,
- ``tasks.T.outputs.K`` then any of ``.K`` / ``[I]`` / ``["K"]`` (an upstream's declared output);
  a task id with ``-`` is written as it is (``tasks.load-data.outputs.uri``) or, as in a ``when:``
  condition, ``tasks["load-data"].outputs.uri``,

and ``{{ "{{" }}`` writes a literal ``{{``. In a run of more than two braces a reference opens at
the last two and closes at the first ``}}``, so ``{{{ params.x }}}`` is the value in braces. Names
are letters, digits, ``_`` and ``-``; ``I`` is a list index (0 and up). There are no filters, calls,
arithmetic or conditionals, so there is nothing to evaluate and nothing to sandbox. A ``{{`` that
opens no valid reference is an error, never a literal: a typo is a 422 at apply, not a task that
runs with ``{{ parmas.day }}`` in its argv. In a mapped task (``map_over``,
:mod:`leoflow.model.spec.mapping`) ``{{ item }}`` (then ``.K`` / ``[I]``) is the instance's item and
``{{ map_index }}`` its index; anywhere else they are a 422. ``inputs.X`` belongs to templates
(:mod:`leoflow.model.spec.reuse`, substituted at apply); ``run.state`` is a name reserved for exit
tasks and refused as *not available yet*, so no DAG written today changes meaning when it arrives.

**Checked at apply** (:func:`check_references`, from :mod:`leoflow.model.spec.dag`): each
``params.P`` is declared in the params schema's ``properties``; each ``tasks.T`` is an ancestor
of the task (transitively upstream, so final when the task runs) and ``K`` one of T's declared
outputs; at most :data:`leoflow.model.limits.TEMPLATE_REFS` references per string. Errors name the
string's path (``tasks[2].args[1]``), which DAG files turn into ``line:column``.

**Rendered once, by the leader, at launch** (:func:`leoflow.model.spec.rendering.render_task`): a
pure function of the spec, the run's conf, id and logical date, and the referenced tries' stored outputs, so a failover
renders the same argv. One reference becomes one string — itself if a string, else compact
sorted-key JSON (``null``, ``42``, ``["a","b"]``) — inside one argv element or env value; the
pieces are concatenated and **never parsed again**: an output or a parameter holding
``{{ params.token }}`` reaches the process as those characters (Airflow re-rendered a field's
output and so ran Jinja from a trigger's conf, airflow#71402). Leoflow never adds a shell. What
cannot be resolved — an absent optional output, an upstream that did not succeed, a value that
makes an element or the argv too large — raises :class:`TemplateUnresolved`, which fails that
try with its message, never the scheduler.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, Protocol

from leoflow.errors import LeoflowError, ValidationFailed
from leoflow.model import limits

OPEN = "{{"
#: What ``{{ "{{" }}`` stands for.
_ESCAPE = '"{{"'
_WS = re.compile(r"[ \t]*")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,252}")
_INDEX = re.compile(r"\[(0|[1-9][0-9]{0,8})\]")
_QUOTED = re.compile(r'\["([^"\\\x00-\x1f]{1,253})"\]')
#: ``run.triggering_events``: a dataset-triggered run's events as JSON text (``[]`` for other runs).
#: ``run.state`` / ``run.reason``: what the run's other tasks decided, in exit tasks (on_exit) only.
#: ``run.failed_tasks``: the tasks that failed (a mapped one's instances as ``T[i]``), a JSON list, ditto.
#: ``run.data_interval_start`` / ``run.data_interval_end``: the span of data the run is for, ISO 8601 in UTC.
_RUN_FIELDS = ("id", "logical_date", "triggering_events", "state", "reason", "failed_tasks", "data_interval_start",
               "data_interval_end")
_EXIT_ONLY = ("state", "reason", "failed_tasks")
#: Names the pipeline language reserves for what is not built yet: refused, saying so.
_NOT_YET: dict[str, str] = {}
_RUN_NOT_YET: dict[str, str] = {}
#: How a referenced upstream that did not succeed ended, in a try's failure reason.
_ENDED = {"skipped": "was skipped", "failed": "failed", "upstream_failed": "did not run (upstream_failed)",
          "cancelled": "was cancelled"}
_GRAMMAR = ("a reference is params.NAME, run.id, run.logical_date, tasks.TASK.outputs.NAME or, in a mapped "
            'task, item and map_index (then .KEY or [INDEX]); {{ "{{" }} writes a literal {{')

Segment = str | int


@dataclass(frozen=True, slots=True)
class Reference:
    """One ``{{ … }}`` that names a value."""

    kind: Literal["params", "run", "tasks", "inputs", "item", "map_index"]
    #: The parameter (params), the field (run: ``id``, ``logical_date``) or the output (tasks).
    name: str
    #: Keys and list indexes below ``name``.
    path: tuple[Segment, ...] = ()
    #: The upstream task (tasks only).
    task: str = ""
    #: The reference as written, braces included (for messages).
    text: str = ""


Piece = str | Reference


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed string: literal text and references, in order."""

    pieces: tuple[Piece, ...]

    @property
    def references(self) -> tuple[Reference, ...]:
        return tuple(p for p in self.pieces if isinstance(p, Reference))


Field = Literal["command", "args", "env", "pod_template"]


@dataclass(frozen=True, slots=True)
class Templated:
    """One string of a task that holds ``{{``: where it is and what it says."""

    #: The spec path, for messages (``tasks[2].args[1]``, ``defaults.env.DAY``).
    where: str
    field: Field
    #: Where in ``field``: the element's index (command, args), the variable (env), the
    #: location inside the pod template (``("spec", "containers", 0, "args", 1)``).
    key: tuple[Segment, ...]
    template: Template


@dataclass(frozen=True)
class TaskTemplates:
    """Every templated string of one task (a task without any ``{{`` has none: None).

    ``problems``: the strings that do not parse, reported by :func:`check_references` with the
    rest, so one apply lists a task's syntax errors and its unknown names together.
    """

    strings: tuple[Templated, ...]
    problems: tuple[ValidationFailed, ...] = ()

    def references(self) -> Iterator[tuple[Templated, Reference]]:
        for s in self.strings:
            for ref in s.template.references:
                yield s, ref

    @cached_property
    def reads_failed_tasks(self) -> bool:
        """Does a string read ``run.failed_tasks`` (a launch then reads the run's failed tasks)?"""
        return any(ref.kind == "run" and ref.name == "failed_tasks" for _, ref in self.references())

    @cached_property
    def upstream(self) -> frozenset[str]:
        """The tasks whose outputs a launch reads (asked at every launch: computed once)."""
        return frozenset(ref.task for _, ref in self.references() if ref.kind == "tasks")


#: The canonical form's mark of a DAG whose strings are templates (set when any task has ``{{``).
#: A version stored by a release before templates has none: the scheduler reads its ``{{`` as text,
#: so an old ``docker inspect -f '{{.Id}}'`` keeps running as it did (re-applying it is a 422 until
#: it is written ``{{ "{{" }}.Id}}``). Absent from every spec without ``{{``: existing hashes stay.
SYNTAX_FIELD = "template_syntax"
SYNTAX_VERSION = 1


def check_syntax_field(value: object) -> None:
    """``template_syntax`` as written in a spec: absent, or the one syntax there is."""
    if value is not None and (isinstance(value, bool) or value != SYNTAX_VERSION):
        raise ValidationFailed(SYNTAX_FIELD, f"must be {SYNTAX_VERSION} (the template syntax of this release), "
                               f"or left out")


class TemplateUnresolved(LeoflowError):
    """A reference could not be rendered at launch: the try fails with this message."""


# --------------------------------------------------------------------------- parsing

def parse_template(text: str, where: str) -> Template | None:
    """``text`` as literal pieces and references; None when it holds no ``{{`` (nothing to render).

    Raises ValidationFailed(``where``, …) at the first ``{{`` that opens no valid reference, or
    past :data:`limits.TEMPLATE_REFS` references.
    """
    if OPEN not in text:
        return None
    pieces: list[Piece] = []
    literal: list[str] = []
    pos = count = 0
    while (start := text.find(OPEN, pos)) >= 0:
        while text.startswith("{", start + 2):  # in a run of braces the reference opens at the last two
            start += 1
        literal.append(text[pos:start])
        ref, pos = _reference(text, start, where)
        if ref is None:
            literal.append(OPEN)
            continue
        count += 1
        if count > limits.TEMPLATE_REFS.maximum:
            raise ValidationFailed(where, f"has more than {limits.TEMPLATE_REFS.maximum} references "
                                   f"{{{{ … }}}}; at most {limits.TEMPLATE_REFS.maximum} per string")
        if any(literal):
            pieces.append("".join(literal))
        literal = []
        pieces.append(ref)
    literal.append(text[pos:])
    if any(literal):
        pieces.append("".join(literal))
    return Template(tuple(pieces))


def _shown(text: str, start: int) -> str:
    end = text.find("}}", start + 2)
    snippet = text[start:end + 2] if 0 <= end < start + 80 else text[start:start + 40] + "…"
    return json.dumps(snippet, ensure_ascii=False)


def _reference(text: str, start: int, where: str) -> tuple[Reference | None, int]:
    """The reference opened at ``start``, and where the text continues after its ``}}``."""
    pos = _WS.match(text, start + 2).end()  # type: ignore[union-attr]  # [ \t]* always matches

    def fail(problem: str) -> ValidationFailed:
        return ValidationFailed(where, f"{_shown(text, start)} at character {start + 1}: {problem}")

    if text.startswith(_ESCAPE, pos):
        end = _WS.match(text, pos + len(_ESCAPE)).end()  # type: ignore[union-attr]
        if not text.startswith("}}", end):
            raise fail('expected }} after "{{" (a literal {{ is written {{ "{{" }})')
        return None, end + 2
    root = _NAME.match(text, pos)
    if root is None:
        if pos >= len(text):
            raise fail(f"{{{{ opens no reference and is never closed; {_GRAMMAR}")
        raise fail(f"{{{{ opens no reference; {_GRAMMAR}")
    segments: list[Segment] = []
    pos = root.end()
    while True:
        if text.startswith(".", pos) and (m := _NAME.match(text, pos + 1)):
            segments.append(m.group())
        elif m := _INDEX.match(text, pos):
            segments.append(int(m.group(1)))
        elif m := _QUOTED.match(text, pos):
            segments.append(m.group(1))
        else:
            break
        pos = m.end()
    body = text[root.start():pos]
    end = _WS.match(text, pos).end()  # type: ignore[union-attr]
    if not text.startswith("}}", end):
        if end >= len(text):
            raise fail(f"no closing }}}} after {body}")
        raise fail(f"expected }}}} after {body}, got {text[end]!r}: no filters, calls, operators or "
                   f"expressions; {_GRAMMAR}")
    written = text[start:end + 2]
    return _interpret(root.group(), segments, written, fail), end + 2


def _interpret(root: str, segments: Sequence[Segment], written: str,
               fail: Any) -> Reference:
    if root in _NOT_YET:
        raise fail(f"{root!r} is not available yet: it belongs to {_NOT_YET[root]}, which this version "
                   "does not support")
    if root == "params":
        if not segments or not isinstance(segments[0], str):
            raise fail("name a parameter: params.NAME")
        return Reference("params", segments[0], tuple(segments[1:]), text=written)
    if root == "item":  # a mapped instance's item (checked against map_over in check_references)
        return Reference("item", "item", tuple(segments), text=written)
    if root == "map_index":
        if segments:
            raise fail("map_index is a number: write {{ map_index }}")
        return Reference("map_index", "map_index", text=written)
    if root == "inputs":  # a template's input (leoflow.model.spec.reuse substitutes it at apply)
        if len(segments) != 1 or not isinstance(segments[0], str):
            raise fail("name an input of the template: inputs.NAME")
        return Reference("inputs", segments[0], text=written)
    if root == "run":
        name = segments[0] if segments else None
        if isinstance(name, str) and name in _RUN_NOT_YET:
            raise fail(f"run.{name} is not available yet: it belongs to {_RUN_NOT_YET[name]}, which this "
                       "version does not support")
        if len(segments) != 1 or name not in _RUN_FIELDS:
            raise fail("a run has run.id, run.logical_date, run.data_interval_start, run.data_interval_end, "
                       "run.triggering_events, and in exit tasks run.state, run.reason and run.failed_tasks")
        return Reference("run", str(name), text=written)
    if root == "tasks":
        if (len(segments) < 3 or not isinstance(segments[0], str) or segments[1] != "outputs"
                or not isinstance(segments[2], str)):
            raise fail('name an output: tasks.TASK.outputs.NAME (or tasks["TASK"].outputs.NAME)')
        return Reference("tasks", segments[2], tuple(segments[3:]), task=segments[0], text=written)
    raise fail(f"unknown name {root!r}; {_GRAMMAR}")


# --------------------------------------------------------------------------- a task's strings

def task_templates(path: str, command: Sequence[str], args: Sequence[str], env: Mapping[str, str],
                   pod_template: Mapping[str, Any], *, own: Mapping[str, Any],
                   defaults: Mapping[str, Any]) -> TaskTemplates | None:
    """The templated strings of the task at ``path``; None when none holds ``{{`` (it pays nothing later).

    ``env`` and ``pod_template`` are the resolved ones (the DAG's ``defaults`` applied); ``own``
    and ``defaults`` are the task's and the DAG's canonical pod fields, which say where a string
    was written. Syntax problems are kept in :attr:`TaskTemplates.problems`, not raised.
    """
    found: list[tuple[str, Field, tuple[Segment, ...], str]] = []
    found += [(f"{path}.command[{i}]", "command", (i,), s) for i, s in enumerate(command) if OPEN in s]
    found += [(f"{path}.args[{i}]", "args", (i,), s) for i, s in enumerate(args) if OPEN in s]
    found += [(_env_path(name, path, own, defaults), "env", (name,), s) for name, s in env.items() if OPEN in s]
    if pod_template:
        found += [(_pod_path(key, s, path, own, defaults), "pod_template", key, s)
                  for key, s in _pod_strings(pod_template) if OPEN in s]
    if not found:
        return None
    strings: list[Templated] = []
    problems: list[ValidationFailed] = []
    for where, field, key, text in found:
        try:
            template = parse_template(text, where)
        except ValidationFailed as problem:
            problems.append(problem)
            continue
        if template is not None:
            strings.append(Templated(where, field, key, template))
    return TaskTemplates(tuple(strings), tuple(problems))


def _pod_strings(pod_template: Mapping[str, Any]) -> Iterator[tuple[tuple[Segment, ...], str]]:
    """The pod template's containers' ``args`` elements and plain ``env`` values, with their location."""
    spec = pod_template.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for c, container in enumerate(containers if isinstance(containers, list) else ()):
        if not isinstance(container, dict):
            continue
        for j, arg in enumerate(container.get("args") or ()):
            if isinstance(arg, str):
                yield ("spec", "containers", c, "args", j), arg
        for j, var in enumerate(container.get("env") or ()):
            if isinstance(var, dict) and isinstance(var.get("value"), str):
                yield ("spec", "containers", c, "env", j, "value"), var["value"]


def _env_path(name: str, path: str, own: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    for where, fields in ((path, own), ("defaults", defaults)):
        env = fields.get("env")
        if isinstance(env, dict) and name in env:
            return f"{where}.env.{name}"
        if isinstance(env, list):
            for j, entry in enumerate(env):
                if isinstance(entry, dict) and entry.get("name") == name:
                    return f"{where}.env[{j}].value"
    return f"{path}.env.{name}"


def _pod_path(key: tuple[Segment, ...], text: str, path: str, own: Mapping[str, Any],
              defaults: Mapping[str, Any]) -> str:
    """The spec path of a pod template string: the task's own template if it holds it there, else the DAG's.

    Containers merge by name, so the resolved template's container index may differ from the
    index in the block that wrote it: the container is found by its name.
    """
    _, _, c, field, j, *rest = key
    for where, fields in ((path, own), ("defaults", defaults)):
        template = fields.get("pod_template")
        spec = template.get("spec") if isinstance(template, dict) else None
        containers = spec.get("containers") if isinstance(spec, dict) else None
        for index, container in enumerate(containers if isinstance(containers, list) else ()):
            items = container.get(field) if isinstance(container, dict) else None
            if not isinstance(items, list) or not isinstance(j, int) or j >= len(items):
                continue
            value = items[j].get("value") if rest and isinstance(items[j], dict) else items[j]
            if value == text:
                tail = ".value" if rest else ""
                return f"{where}.pod_template.spec.containers[{index}].{field}[{j}]{tail}"
    tail = ".value" if rest else ""
    return f"{path}.pod_template.spec.containers[{c}].{field}[{j}]{tail}"


# --------------------------------------------------------------------------- checking at apply

class Templating(Protocol):
    """What :func:`check_references` reads of a task (a :class:`~leoflow.model.spec.dag.TaskSpec`)."""

    @property
    def id(self) -> str: ...

    @property
    def depends_on(self) -> tuple[str, ...]: ...

    @property
    def templates(self) -> TaskTemplates | None: ...

    @property
    def mapped(self) -> bool: ...


def check_references(tasks: Sequence[Templating], params: Mapping[str, Any] | None, *,
                     outputs: Mapping[str, Collection[str]], written: object = None, exits: bool = False) -> None:
    """Every reference names something that exists when the task runs; raise ValidationFailed with all.

    ``params``: the DAG's params schema (None: it declares none); ``outputs``: each task's declared
    output names. ``written``: the spec's raw ``tasks`` list: a reference to a task that is there
    but failed to parse is not reported (that task has its own problem).
    """
    templated = [t for t in tasks if t.templates is not None]
    if not templated:
        return
    parsed = {t.id for t in tasks}
    unparsed = {raw.get("id") for raw in written if isinstance(raw, dict)} - parsed \
        if isinstance(written, list) else set()
    declared = params.get("properties") if isinstance(params, Mapping) else None
    ancestors = _Ancestors(tasks) if any(t.templates and t.templates.upstream for t in templated) else None
    problems: list[ValidationFailed] = []
    for task in templated:
        assert task.templates is not None
        problems += task.templates.problems
        for s, ref in task.templates.references():
            if ref.kind == "tasks" and ref.task in unparsed:
                continue
            problem = _reference_problem(task.id, ref, declared, ancestors, outputs, mapped=task.mapped)
            if problem is None and ref.kind == "run" and ref.name in _EXIT_ONLY and not exits:
                problem = (f"run.{ref.name} is only available in exit tasks (on_exit): the other tasks run before "
                           "the run has decided anything")
            if problem is not None:
                problems.append(ValidationFailed(s.where, f"{ref.text}: {problem}"))
    # A string of the DAG's defaults is checked in every task that inherits it: say each problem once.
    problems = list({(p.path, p.problem): p for p in problems}.values())
    if problems:
        raise ValidationFailed(problems[0].path, problems[0].problem, also=tuple(problems[1:]))


def _reference_problem(task_id: str, ref: Reference, declared: object, ancestors: _Ancestors | None,
                       outputs: Mapping[str, Collection[str]], *, mapped: bool = False) -> str | None:
    if ref.kind in ("item", "map_index"):
        if not mapped:
            what = "item" if ref.kind == "item" else "index"
            return f"{ref.kind} is only available in a mapped task (one with map_over): it is an instance's {what}"
        return None
    if ref.kind == "params":
        if not isinstance(declared, Mapping):
            return (f"parameter {ref.name!r} is not declared: the DAG has no params schema with properties "
                    "(declare it under params.properties)")
        if ref.name not in declared:
            return f"parameter {ref.name!r} is not declared in params.properties"
        return None
    if ref.kind == "inputs":  # reuse substitutes every input of a template before a task is checked
        return (f"input {ref.name!r}: inputs.NAME is only available in a template's fields (templates:), "
                "where the task that says uses: gives it")
    if ref.kind == "tasks":
        assert ancestors is not None
        if not ancestors.known(ref.task):
            return f"unknown task {ref.task!r}"
        if ref.task == task_id:
            return f"a task cannot read its own outputs ({ref.task!r})"
        if not ancestors.is_ancestor(ref.task, task_id):
            where = "downstream of" if ancestors.is_ancestor(task_id, ref.task) else "not upstream of"
            return (f"task {ref.task!r} is {where} {task_id!r}: only an upstream task (one it depends on, "
                    "directly or through others) has finished when this one runs")
        if ref.name not in outputs.get(ref.task, ()):
            names = ", ".join(sorted(outputs.get(ref.task, ()))) or "none"
            return f"task {ref.task!r} declares no output {ref.name!r} (its outputs: {names})"
    return None


class _Ancestors:
    """Transitive upstream sets as bitsets, one per task, built in one pass in dependency order.

    A Python int per task: OR-ing the parents' sets costs microseconds even for 10,000 tasks, where
    a walk per referencing task would be quadratic on a long chain.
    """

    def __init__(self, tasks: Sequence[Templating]) -> None:
        self.index = {t.id: i for i, t in enumerate(tasks)}
        deps = {t.id: [d for d in t.depends_on if d in self.index] for t in tasks}
        self.bits: dict[str, int] = {}
        for root in tasks:  # iterative post-order (a 10,000-task chain must not recurse)
            stack = [root.id]
            while stack:
                node = stack[-1]
                if node in self.bits:
                    stack.pop()
                    continue
                todo = [d for d in deps[node] if d not in self.bits]
                if todo:
                    stack.extend(todo)
                    continue
                bits = 0
                for d in deps[node]:
                    bits |= self.bits[d] | (1 << self.index[d])
                self.bits[node] = bits
                stack.pop()

    def known(self, task_id: str) -> bool:
        return task_id in self.index

    def is_ancestor(self, upstream: str, task_id: str) -> bool:
        return bool(self.bits.get(task_id, 0) >> self.index[upstream] & 1)


#: For the other readers of references checked at apply (``map_over``, leoflow.model.spec.mapping).
Ancestors = _Ancestors
reference_problem = _reference_problem
