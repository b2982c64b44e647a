"""Conditions: a task's ``when:``, a boolean CEL expression, compiled once and bounded (ADR 0014, decision 4).

CEL (the Common Expression Language Kubernetes validation rules are written in) has no loops,
no I/O and no ``eval``; the library (``common-expression-language``, ``import cel``, the Rust
``cel`` crate) has no cost limit either, so the bounds are static and checked here, once, when
the spec is parsed:

- at most :data:`~leoflow.model.limits.WHEN` characters (2,000 parentheses never reach the
  parser, whose own nesting limit is 96);
- only the linear macros ``all``, ``exists`` and ``exists_one``, at most
  :data:`~leoflow.model.limits.WHEN_MACROS` of them and none inside another: ``map`` and
  ``filter`` are quadratic in this library (10,000 items: 12 s), nesting multiplies. This is a
  lexical scan outside string literals, so ``"x.map(y, y)"`` inside quotes is text;
- the names read are ``params``, ``run`` and ``tasks`` (plus the variables the macros bind),
  from the library's own reference listing; ``params.P`` must be declared in the params
  schema; ``run.id``, ``run.logical_date`` and ``run.data_interval_start/end`` exist;
  ``tasks.T`` (or ``tasks["T"]`` for ids with ``-``) must be an ancestor of the task and be
  followed by ``.outputs``, and a named output must be declared by T.

At run time (:func:`evaluate_when`) a condition reads what :func:`activation` builds: ``params``
(the run's conf with the schema's defaults), ``run`` (``id``; ``logical_date``,
``data_interval_start`` and ``data_interval_end`` as CEL timestamps) and ``tasks.T.outputs`` of
the tasks it names (``{}`` for one that did not succeed).
Every failure there — a missing key, a type error, a result that is not a boolean, an
activation over :data:`~leoflow.model.limits.WHEN_ACTIVATION` — raises :class:`WhenFailed`
with one line the scheduler stores as the task's reason; it is deterministic, so it is never
retried.

A :class:`Condition` holds the compiled program; it lives on its :class:`TaskSpec`, which the
scheduler's graph cache keeps per DAG version, so a program is compiled once per (version, task).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.outputs import OutputDecl

#: The names a condition may read.
ROOTS = ("params", "run", "tasks")
#: What ``run`` holds.
RUN_FIELDS = ("id", "logical_date", "data_interval_start", "data_interval_end")
#: Comprehension macros that visit each item once.
LINEAR_MACROS = frozenset({"all", "exists", "exists_one"})
#: Comprehension macros refused, with the reason.
REFUSED_MACROS = {
    "map": "map() is quadratic in this CEL library (2,000 items take 0.5 s); use exists() or all()",
    "filter": "filter() is quadratic in this CEL library; use exists(), exists_one() or all()",
}
#: Named functions of the CEL standard library the engine implements (operators are spelled
#: ``_+_``, ``@in`` ...); an unknown name is refused at apply instead of failing every run.
FUNCTIONS = frozenset({
    "size", "contains", "startsWith", "endsWith", "matches", "int", "uint", "double", "string", "bytes",
    "timestamp", "duration", "type", "dyn", "has", "max", "min", "getFullYear", "getMonth", "getDayOfYear",
    "getDayOfMonth", "getDate", "getDayOfWeek", "getHours", "getMinutes", "getSeconds", "getMilliseconds",
})
#: How much of an error message of the library a reason repeats (its parse errors quote the source).
_MESSAGE = 300

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>[rRbB]{0,2}(?:'''|\"\"\"|'|\"))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>[0-9][0-9A-Za-z_.]*)
  | (?P<punct>.)
""", re.VERBOSE | re.DOTALL)
_SYNTAX = re.compile(r"<input>:(\d+):(\d+): (.*)")


class WhenFailed(Exception):
    """A condition could not be evaluated to a boolean; ``str()`` is one line, the task's reason."""


@dataclass(frozen=True)
class Condition:
    """A compiled ``when:``: its source (what the canonical spec stores) and what it reads."""

    source: str
    #: Ancestors whose outputs it reads (their stored outputs are fetched only for these).
    tasks: frozenset[str] = frozenset()
    program: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Bounded:
    """A CEL expression that passed the static bounds (:func:`compile_bounded`)."""

    source: str
    program: Any = field(compare=False, repr=False)
    #: The variables its macros bind (``x`` of ``list.all(x, …)``).
    bound: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    at: int


# --------------------------------------------------------------------------- compiling



def cel_compile(source: str) -> Any:
    """``cel.compile``, importing the library on first use: a DAG without a condition or a retry
    expression never loads it (12 MB of a replica's memory and ~0.25 s of import)."""
    import cel

    return cel.compile(source)

def compile_when(value: object, path: str, *, params: Mapping[str, Any] | None,
                 ancestors: Mapping[str, Mapping[str, OutputDecl]]) -> Condition:
    """``when:`` as a :class:`Condition`, or ValidationFailed naming ``path`` (and, for a syntax
    error, the line and column).

    ``params``: the DAG's params schema (None: it declares none, so no ``params.P`` is known);
    ``ancestors``: the task's ancestors with their declared outputs.
    """
    bounded = compile_bounded(value, path, roots=ROOTS, reads="a condition reads params, run and tasks")
    tasks = _check_paths(_tokens(bounded.source), path, bounded.bound, params, ancestors)
    _dry_run(bounded.program, path, params, {t: ancestors[t] for t in tasks})
    return Condition(source=bounded.source, tasks=frozenset(tasks), program=bounded.program)


def compile_bounded(value: object, path: str, *, roots: Collection[str], reads: str) -> Bounded:
    """Any CEL expression of a spec held to the bounds of ``when:`` (``retry_policy.when`` too): a
    string of at most :data:`limits.WHEN` characters that parses (ValidationFailed with the line and
    column otherwise), only linear macros, at most :data:`limits.WHEN_MACROS` and none nested, and no
    name but ``roots`` and the macros' variables (``reads`` says which, in the problem) nor function
    but :data:`FUNCTIONS`. What the names may hold is the caller's to check."""
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a CEL expression (a string), got {_type(value)}")
    source = value
    if not source.strip():
        raise ValidationFailed(path, "must not be empty")
    if len(source) > limits.WHEN.maximum:
        raise ValidationFailed(path, f"must be at most {limits.WHEN.maximum:,} characters, got {len(source):,}")
    try:
        program = cel_compile(source)
    except Exception as exc:  # boundary: the library reports syntax errors as ValueError, quoting the source
        raise ValidationFailed(path, _syntax_problem(exc)) from None
    except BaseException as exc:
        raise ValidationFailed(path, f"is not a valid CEL expression: {panicked(exc)}") from None
    bound = _check_macros(_tokens(source), path)
    if bound & set(roots):
        raise ValidationFailed(path, f"a macro may not bind the name {sorted(bound & set(roots))[0]!r}")
    references = program.references()
    for name in references.get("variables", ()):
        if name not in roots and name not in bound:
            raise ValidationFailed(path, f"unknown name {name!r}: {reads}")
    for name in references.get("functions", ()):
        if name[:1] not in ("_", "@", "!", "-") and name not in FUNCTIONS:
            raise ValidationFailed(path, f"unknown function {name!r}")
    return Bounded(source, program, frozenset(bound))


#: Values of a declared JSON type a dry run gives a param or output without a default. ``number``
#: and ``any`` get none: a JSON number arrives as a CEL int or double depending on its digits, and
#: CEL does not mix them in arithmetic, so no single sample stands for it.
_SAMPLES: dict[str, Any] = {"string": "", "integer": 0, "boolean": False, "array": [], "object": {}}


def _dry_run(program: Any, path: str, params: Mapping[str, Any] | None,
             read: Mapping[str, Mapping[str, OutputDecl]]) -> None:
    """Evaluate once over sample values of the declared types: a type error or a result that is not
    a boolean on the branch taken is a 422 (a check, not a type system: a branch not taken, or a
    value without a usable sample, is not judged; missing keys and bad indexes are not errors here,
    since the samples are empty)."""
    properties = params.get("properties") if params else None
    sample_params = {}
    for name, schema in (properties.items() if isinstance(properties, dict) else ()):
        if isinstance(schema, dict) and "default" in schema:
            sample_params[name] = schema["default"]
        elif isinstance(schema, dict) and isinstance(schema.get("type"), str) and schema["type"] in _SAMPLES:
            sample_params[name] = _SAMPLES[schema["type"]]
    tasks = {task: {"outputs": {k: _SAMPLES[d.type] for k, d in decls.items() if d.type in _SAMPLES}}
             for task, decls in read.items()}
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    variables = {"params": sample_params, "run": {"id": "", "logical_date": moment, "data_interval_start": moment,
                                                  "data_interval_end": moment}, "tasks": tasks}
    try:
        result = program.execute(variables)
    except TypeError as exc:
        raise ValidationFailed(path, f"type error with values of the declared types: {_one_line(str(exc))}") from None
    except Exception:  # boundary: a missing key, an empty list's index, a division by zero: not judged
        return
    except BaseException as exc:
        raise ValidationFailed(path, f"cannot be evaluated: {panicked(exc)}") from None
    if not isinstance(result, bool):
        raise ValidationFailed(path, f"must be a boolean expression, got {_cel_type(result)}")


def compile_conditions(written: object, depends_on: Mapping[str, Sequence[str]],
                       outputs: Mapping[str, Mapping[str, OutputDecl]],
                       params: Mapping[str, Any] | None, where: str = "tasks") -> dict[str, Condition]:
    """The ``when:`` of every task of the spec's ``tasks`` list (``written``, as decoded) that has
    one, by task id; ValidationFailed for the first that does not compile.

    ``depends_on`` and ``outputs`` hold the tasks that parsed (a task that did not has its own
    problem), their graph already checked (no cycle).
    """
    if not isinstance(written, list):
        return {}
    out: dict[str, Condition] = {}
    for i, raw in enumerate(written):
        task_id = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(task_id, str) or raw.get("when") is None or task_id not in depends_on:
            continue  # a task whose id did not parse has its own problem already
        ancestors = {a: outputs.get(a, {}) for a in _ancestors(task_id, depends_on)}
        out[task_id] = compile_when(raw["when"], f"{where}[{i}].when", params=params, ancestors=ancestors)
    return out


def _ancestors(task_id: str, depends_on: Mapping[str, Sequence[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(depends_on.get(task_id, ()))
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(depends_on.get(node, ()))
    return seen


def _syntax_problem(exc: Exception) -> str:
    found = _SYNTAX.search(str(exc))
    if found is None:
        return f"is not a valid CEL expression: {_one_line(str(exc))}"
    line, column, what = found.groups()
    what = what.removeprefix("Syntax error: ")
    return f"syntax error at line {line}, column {column}: {_one_line(what)}"


def _tokens(source: str) -> list[_Token]:
    """The tokens outside string literals (a literal is one ``string`` token holding its text)."""
    out: list[_Token] = []
    at = 0
    while at < len(source):
        m = _TOKEN.match(source, at)
        assert m is not None  # the last alternative matches any character
        kind = m.lastgroup or "punct"
        if kind == "string":
            end = _string_end(source, m.end(), m.group(kind))
            out.append(_Token("string", source[at:end], at))
            at = end
            continue
        if kind != "space":
            out.append(_Token(kind, m.group(kind), at))
        at = m.end()
    return out


def _string_end(source: str, start: int, opening: str) -> int:
    """Where the literal opened by ``opening`` (prefix and quote) ends (the source's end if never)."""
    quote = opening.lstrip("rRbB")
    raw = "r" in opening[: -len(quote)].lower()
    at = start
    while at < len(source):
        if not raw and source[at] == "\\":
            at += 2
            continue
        if source.startswith(quote, at):
            return at + len(quote)
        at += 1
    return len(source)


def _check_macros(tokens: list[_Token], path: str) -> set[str]:
    """The macro bounds; returns the variables the macros bind."""
    bound: set[str] = set()
    depth = 0
    open_at: list[int] = []  # the depth inside each open macro's parentheses
    macros = 0
    for i, tok in enumerate(tokens):
        if tok.kind == "punct" and tok.text in "([{":
            depth += 1
        elif tok.kind == "punct" and tok.text in ")]}":
            if open_at and open_at[-1] == depth:
                open_at.pop()
            depth -= 1
        if not (tok.kind == "ident" and i > 0 and tokens[i - 1].text == "." and _next(tokens, i) == "("):
            continue
        if tok.text in REFUSED_MACROS:
            raise ValidationFailed(path, REFUSED_MACROS[tok.text])
        if tok.text not in LINEAR_MACROS:
            continue
        if open_at:
            raise ValidationFailed(path, f"{tok.text}() inside another macro: nested macros multiply their "
                                   "lists' lengths; compute the inner one in the upstream task")
        macros += 1
        if macros > limits.WHEN_MACROS.maximum:
            raise ValidationFailed(path, f"has more than {limits.WHEN_MACROS.maximum} macros "
                                   "(all, exists, exists_one)")
        open_at.append(depth + 1)
        if i + 3 < len(tokens) and tokens[i + 2].kind == "ident" and tokens[i + 3].text == ",":
            name = tokens[i + 2].text
            if name in ROOTS:
                raise ValidationFailed(path, f"{tok.text}() may not bind the name {name!r}")
            bound.add(name)
    return bound


def _next(tokens: list[_Token], i: int) -> str | None:
    return tokens[i + 1].text if i + 1 < len(tokens) else None


def _selectors(tokens: list[_Token], i: int) -> Iterator[str | None]:
    """The field names selected after ``tokens[i]`` (``.x`` or ``["x"]``); None for a dynamic one."""
    while i + 1 < len(tokens):
        if tokens[i + 1].text == "." and i + 2 < len(tokens) and tokens[i + 2].kind == "ident":
            if i + 3 < len(tokens) and tokens[i + 3].text == "(":
                return  # a method call, not a field
            yield tokens[i + 2].text
            i += 2
        elif tokens[i + 1].text == "[":
            literal = tokens[i + 2] if i + 2 < len(tokens) else None
            closed = i + 3 < len(tokens) and tokens[i + 3].text == "]"
            if literal is not None and literal.kind == "string" and closed:
                yield _plain_literal(literal.text)
                i += 3
            else:
                yield None
                return
        else:
            return


def _plain_literal(text: str) -> str | None:
    """The value of a quoted literal without prefix or escapes; None otherwise (not checked statically)."""
    if text[:1] not in "'\"" or "\\" in text or text.startswith(("'''", '"""')) or len(text) < 2:
        return None
    return text[1:-1]


def _check_paths(tokens: list[_Token], path: str, bound: Collection[str], params: Mapping[str, Any] | None,
                 ancestors: Mapping[str, Mapping[str, OutputDecl]]) -> set[str]:
    """Check every ``params.P``, ``run.F`` and ``tasks.T.outputs.K``; returns the tasks read."""
    declared = _declared_params(params)
    read: set[str] = set()
    for i, tok in enumerate(tokens):
        if tok.kind != "ident" or tok.text not in ROOTS or tok.text in bound:
            continue
        if i > 0 and tokens[i - 1].text == ".":
            continue  # a field of something else
        selected = list(_selectors(tokens, i))
        if tok.text == "params" and selected:
            name = selected[0]
            if name is not None and name not in declared:
                where = "the DAG declares no params" if params is None else "not in params.properties"
                raise ValidationFailed(path, f"unknown param {name!r} ({where})")
        elif tok.text == "run" and selected:
            if selected[0] not in RUN_FIELDS:
                raise ValidationFailed(path, f"run has {', '.join(RUN_FIELDS)}, not {selected[0]!r}")
        elif tok.text == "tasks":
            read.add(_check_task_path(selected, path, ancestors))
    return read


def _check_task_path(selected: list[str | None], path: str, ancestors: Mapping[str, Mapping[str, OutputDecl]]) -> str:
    if not selected or selected[0] is None:
        raise ValidationFailed(path, 'tasks must be followed by a task id: tasks.T or tasks["T"]')
    task = selected[0]
    if task not in ancestors:
        raise ValidationFailed(path, f"task {task!r} is not upstream of this task: a condition reads the "
                               "outputs of its ancestors")
    if len(selected) < 2 or selected[1] != "outputs":
        raise ValidationFailed(path, f"only the outputs of task {task!r} can be read (tasks.{task}.outputs)")
    declared = ancestors[task]
    if not declared:
        raise ValidationFailed(path, f"task {task!r} declares no outputs")
    if len(selected) > 2 and selected[2] is not None and selected[2] not in declared:
        raise ValidationFailed(path, f"task {task!r} declares no output {selected[2]!r} "
                               f"(it declares {', '.join(sorted(declared))})")
    return task


def _declared_params(schema: Mapping[str, Any] | None) -> frozenset[str]:
    properties = schema.get("properties") if schema else None
    return frozenset(properties) if isinstance(properties, dict) else frozenset()


# --------------------------------------------------------------------------- evaluating


def activation(params: Mapping[str, Any], run_id: str, logical_date: datetime | None,
               outputs: Mapping[str, Mapping[str, Any]], *, data_interval_start: datetime | None = None,
               data_interval_end: datetime | None = None) -> dict[str, Any]:
    """The variables a condition reads: ``outputs`` by task id (only the tasks it names).

    The data interval is the run's (a scheduled run: the previous slot to its logical date; a manual
    or dataset-triggered one: its logical date at both ends); a run stored before runs had one reads
    its logical date at both ends, as a manual run would, rather than failing on a missing key."""
    return {"params": dict(params),
            "run": {"id": run_id, "logical_date": logical_date,
                    "data_interval_start": data_interval_start or logical_date,
                    "data_interval_end": data_interval_end or logical_date},
            "tasks": {task: {"outputs": dict(values)} for task, values in outputs.items()}}


def check_activation_size(size: int) -> None:
    """Raise :class:`WhenFailed` if ``size`` bytes of JSON are over :data:`limits.WHEN_ACTIVATION`."""
    if size > limits.WHEN_ACTIVATION.maximum:
        raise WhenFailed(f"when was not evaluated: the values it reads are {size:,} bytes, over the "
                         f"{limits.WHEN_ACTIVATION.maximum:,}-byte limit")


def evaluate_when(condition: Condition, variables: Mapping[str, Any]) -> bool:
    """The condition's value over ``variables`` (:func:`activation`); :class:`WhenFailed` otherwise."""
    program = condition.program if condition.program is not None else cel_compile(condition.source)
    try:
        result = program.execute(dict(variables))
    except KeyError as exc:
        raise WhenFailed(f"when failed: no such key: {_one_line(str(exc))}") from None
    except Exception as exc:  # boundary: the library raises TypeError, ValueError, RuntimeError, ...
        raise WhenFailed(f"when failed: {_one_line(str(exc)) or type(exc).__name__}") from None
    except BaseException as exc:
        raise WhenFailed(f"when failed: {panicked(exc)}") from None
    if not isinstance(result, bool):
        raise WhenFailed(f"when must be a boolean, got {_cel_type(result)}")
    return result


def panicked(exc: BaseException) -> str:
    """The message of a panic of the native library, re-raising anything else.

    PyO3 turns a Rust panic into ``PanicException``, a ``BaseException`` (so that ``except
    Exception`` does not swallow it). None of our expression shapes is known to panic, but one
    would otherwise escape every boundary of the scheduler: it fails the task instead, like any
    other evaluation error.
    """
    if type(exc).__name__ != "PanicException":
        raise exc
    return f"the CEL library panicked: {_one_line(str(exc)) or 'no message'}"


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return first if len(first) <= _MESSAGE else first[:_MESSAGE] + "…"


def _cel_type(value: object) -> str:
    names = {str: "a string", int: "an int", float: "a double", type(None): "null", list: "a list",
             dict: "a map", bytes: "bytes", datetime: "a timestamp"}
    return names.get(type(value), type(value).__name__)


def _type(value: object) -> str:
    return {dict: "a mapping", list: "a list", bool: "a boolean", int: "an integer", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)
