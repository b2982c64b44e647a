"""``@container_task``: a small Python function becomes a task that runs it with ``python -c`` in an image.

    @container_task(image="python:3.12-slim", outputs={"count": "integer"})
    def count_lines(uri: str, limit: int = 10) -> dict:
        import urllib.request                     # imports go inside: only the function is shipped
        ...
        return {"count": n}                       # written to $LEOFLOW_OUTPUTS when outputs are declared

    with DAG("x"):
        count_lines(uri=dag.params.uri)           # a Task with id "count-lines"
        count_lines.task("count-eu", retries=2)(uri="s3://eu/…")

The function's **source is data**: it is copied into the task's ``command`` (``python -c
SCRIPT``) and runs only in the task's container; the server stores it as text and never
evaluates it. Arguments travel as JSON in ``args``: literal values in one JSON document, each
reference (``dag.params.x``, ``other.outputs["k"]``, ``item``) as its own argv element that the
server renders once at launch (ADR 0014, decision 2). A parameter annotated ``str`` takes a
reference's text as it is; any other is decoded as JSON (an output of type ``array`` arrives as
a list), and an unannotated one is decoded when it is JSON and kept as text otherwise.

What Hera users ran into, avoided here: source found by text matching broke on some signatures
(argo-workflows hera#572) — the function is located with ``ast``; a decorated ``staticmethod``
was shipped with its indentation (hera#768) — the source is dedented and decorators dropped; a
module-level name used in the body failed only in the pod (hera#511) — a global the body reads
is refused when the task is made, naming it. Calling the function outside a DAG runs it as plain
Python (for unit tests).
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import symtable
import textwrap
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar

from leoflow.errors import ValidationFailed
from leoflow.sdk.conf_schema import check_json, json_text
from leoflow.sdk.dag import Task, _active
from leoflow.sdk.located import DagError, caller
from leoflow.sdk.refs import Ref

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: What runs around the function in the container: read the arguments, call, write the outputs.
_PRELUDE = '''\
import json as _json, os as _os, sys as _sys


def _leoflow_arguments():
    spec = _json.loads(_sys.argv[1])
    values = dict(spec["values"])
    for name, mode, text in zip(spec["refs"], spec["modes"], _sys.argv[2:]):
        if mode == "text":
            values[name] = text
            continue
        try:
            values[name] = _json.loads(text)
        except ValueError:
            if mode == "json":
                raise SystemExit(f"argument {name!r}: expected JSON, got {text[:80]!r}")
            values[name] = text
    return values

'''
_CALL = '''

_result = {name}(**_leoflow_arguments())
if _result is not None and _os.environ.get("LEOFLOW_OUTPUTS"):
    with open(_os.environ["LEOFLOW_OUTPUTS"], "w") as _out:
        _json.dump(_result, _out, separators=(",", ":"))
'''


def function_source(fn: Callable[..., Any]) -> str:
    """The function's definition alone: dedented, decorators dropped (found by ``ast``, not by text)."""
    text = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == fn.__name__:
            start = node.lineno if not node.decorator_list else node.decorator_list[-1].end_lineno or node.lineno
            lines = text.splitlines()
            # The def line itself: skip decorator lines (they run here, not in the container).
            first = next(i for i in range(start - 1, len(lines))
                         if lines[i].lstrip().startswith(("def ", "async def ")))
            return "\n".join(lines[first:node.end_lineno]) + "\n"
    raise ValueError(f"cannot find the source of {fn.__name__!r}")


def script_for(fn: Callable[..., Any]) -> str:
    """The whole ``python -c`` program; ``{{`` escaped so the server reads it as text (ADR 0014, decision 2)."""
    body = _PRELUDE + function_source(fn) + _CALL.format(name=fn.__name__)
    return body.replace("{{", '{{ "{{" }}')


def _globals_used(fn: Callable[..., Any]) -> list[str]:
    """Names the body reads from outside itself (not builtins): they will not exist in the container.

    Read from the symbol table of the shipped source, so a module imported *inside* the function
    counts as its own local, whatever the decorated module imports at its top.
    """
    table = symtable.symtable(function_source(fn), "<container_task>", "exec")
    found: set[str] = set()
    pending = list(table.get_children())
    while pending:
        scope = pending.pop()
        pending.extend(scope.get_children())
        for symbol in scope.get_symbols():
            if (symbol.is_global() or symbol.is_free()) and symbol.is_referenced():
                found.add(symbol.get_name())
    found -= set(dir(builtins)) | {fn.__name__}
    return sorted(found)


class ContainerTask(Generic[_P, _R]):
    """A function that makes a :class:`Task` when called inside a DAG (see the module docstring)."""

    def __init__(self, fn: Callable[_P, _R], image: str, python: str, task_fields: Mapping[str, Any]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.image = image
        self.python = python
        self.task_fields = dict(task_fields)
        self.signature = inspect.signature(fn)
        self.where = caller()
        used = _globals_used(fn)
        if used:
            raise DagError("", f"@container_task {fn.__name__!r} reads {', '.join(map(repr, used))} from outside the "
                           "function; only the function is shipped to the container: import or define them inside "
                           "it", self.where)
        self.hints = typing.get_type_hints(fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inside a DAG a :class:`Task` (arguments may be references); outside, the function's own result.

        Typed ``Any`` on purpose: the same call returns either, and its arguments may be references
        where the function takes values.
        """
        if not _active.get():
            return self.fn(*args, **kwargs)  # outside a DAG: plain Python
        # Task ids take '-', not '_' (the spec's name rule): count_lines runs as task count-lines.
        return self._task(self.fn.__name__.replace("_", "-"), {}, args, kwargs)

    def task(self, id: str, **task_fields: Any) -> Callable[..., Task]:
        """The same function as a task named ``id``, with these Task arguments over the decorator's."""
        def make(*args: Any, **kwargs: Any) -> Task:
            return self._task(id, task_fields, args, kwargs)
        return make

    def _task(self, task_id: str, fields: Mapping[str, Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Task:
        where = caller()
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise DagError("args", f"@container_task {self.fn.__name__!r}: {exc}", where) from None
        values: dict[str, Any] = {}
        refs: list[tuple[str, Ref]] = []
        for name, value in bound.arguments.items():
            if isinstance(value, Ref):
                refs.append((name, value))
                continue
            try:
                check_json(value, f"args.{name}")
            except ValidationFailed as problem:
                raise DagError(problem.path, problem.problem, where) from None
            values[name] = value
        modes = [self._mode(name) for name, _ in refs]
        arguments: list[str | Ref] = [json_text({"values": values, "refs": [n for n, _ in refs], "modes": modes}),
                                      *(ref for _, ref in refs)]
        merged = {**self.task_fields, **fields}
        return Task(task_id, image=merged.pop("image", self.image), command=[self.python, "-c", script_for(self.fn)],
                    args=arguments, **merged)

    def _mode(self, name: str) -> str:
        hint = self.hints.get(name)
        if hint is None:
            return "auto"
        return "text" if hint is str else "json"


def container_task(*, image: str, python: str = "python", **task_fields: Any) -> Callable[[Callable[_P, _R]],
                                                                                          ContainerTask[_P, _R]]:
    """Decorate a function to run as a task in ``image`` (which must have ``python``); ``task_fields``
    are :class:`Task` arguments every such task gets (``outputs``, ``retries``, ``pod``, …)."""
    def wrap(fn: Callable[_P, _R]) -> ContainerTask[_P, _R]:
        return ContainerTask(fn, image, python, task_fields)
    return wrap
