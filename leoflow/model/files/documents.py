"""DAG files as documents: YAML (several documents per file) or JSON, and where each value is.

People keep DAGs in files and edit them by hand, so a mistake must point at the file, the line
and the column — ``dags/etl.yaml:14:9: tasks[1].depends_on[0]: unknown task 'extrct'`` —
whether it is a YAML syntax error or a validation error found later by
:func:`leoflow.model.spec.dag.parse_dag_spec`. :func:`load_documents` therefore keeps each
document's node tree next to its data, and :meth:`Document.locate` maps a validation path
back to the line and column it came from.

YAML is read by Leoflow's one bounded loader (:mod:`leoflow.model.files.yaml_loader`: depth,
values with aliases expanded, duplicate keys), JSON by the standard library and then held to
the same :data:`~leoflow.model.limits.DOCUMENT` budget. Every failure is a
:class:`DocumentError`; nothing else escapes :func:`load_documents`. Line and column numbers
are 1-based, document indexes 0-based (like ``tasks[0]``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from leoflow.errors import LeoflowError, ValidationFailed
from leoflow.model.bounds import check_document_shape
from leoflow.model.files.yaml_loader import YamlBudget, YamlRejected, load_yaml_documents
from leoflow.model.limits import DOCUMENT

JSON_SUFFIXES = (".json",)


@dataclass(frozen=True)
class Location:
    """A position in a file, 1-based like an editor's."""

    line: int
    column: int


class DocumentError(LeoflowError):
    """A problem with one DAG file: which file, which document, which value, and where."""

    def __init__(self, file: str, problem: str, *, document: int | None = None, path: str = "",
                 location: Location | None = None) -> None:
        self.file = file
        self.problem = problem
        self.document = document
        self.path = path
        self.location = location
        super().__init__(str(self))

    def __str__(self) -> str:
        return describe(self.to_json())

    def to_json(self) -> dict[str, Any]:
        """The error as the API reports it (``details.errors[]`` of a rejected sync)."""
        return {"file": self.file, "document": self.document, "path": self.path, "problem": self.problem,
                "line": self.location.line if self.location else None,
                "column": self.location.column if self.location else None}


def describe(problem: Mapping[str, Any]) -> str:
    """``file:line:column: document N: path: problem`` — the form compilers print and editors jump to.

    ``problem`` is a :meth:`DocumentError.to_json` mapping (what the API reports), so the CLI
    prints the server's findings exactly like its own.
    """
    where = str(problem.get("file") or "")
    if where and problem.get("line"):
        where += f":{problem['line']}:{problem.get('column') or 1}"
    parts = [where] if where else []
    if problem.get("document") is not None:
        parts.append(f"document {problem['document']}")
    if problem.get("path"):
        parts.append(str(problem["path"]))
    return ": ".join([*parts, str(problem.get("problem") or "invalid")])


@dataclass(frozen=True)
class Document:
    """One decoded document of a file, with its node tree for :meth:`locate` (None for JSON)."""

    file: str
    index: int
    data: object
    node: yaml.Node | None = None

    @property
    def start(self) -> Location | None:
        return _location(self.node.start_mark) if self.node is not None else None

    def locate(self, path: str) -> Location | None:
        """Where the value at a validation path (``tasks[1].depends_on[0]``) is, as far as it exists.

        The walk stops at the deepest part of the path present in the file, so a missing field
        points at the mapping that lacks it; a mapping key is located at the key itself.
        """
        if self.node is None:
            return None
        node, rest = self.node, path
        while rest:
            step = _step(node, rest)
            if step is None:
                break
            node, rest = step
        return _location(node.start_mark)

    def error(self, path: str, problem: str, *, several: bool) -> DocumentError:
        """A validation problem of this document, located; ``several``: the file has more documents."""
        return DocumentError(self.file, problem, document=self.index if several else None, path=path,
                             location=self.locate(path))


def _location(mark: yaml.Mark) -> Location:
    return Location(mark.line + 1, mark.column + 1)


def _step(node: yaml.Node, rest: str) -> tuple[yaml.Node, str] | None:
    """One step down ``rest`` from ``node``: the child it names and what is left of the path."""
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0 or not isinstance(node, yaml.SequenceNode) or not rest[1:end].isdigit():
            return None
        index = int(rest[1:end])
        if index >= len(node.value):
            return None
        return node.value[index], rest[end + 1:].removeprefix(".")
    if not isinstance(node, yaml.MappingNode):
        return None
    # Keys may contain dots (``nvidia.com/gpu``): take the longest key the path starts with.
    best: tuple[yaml.Node, yaml.Node, str] | None = None
    for key, value in node.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else None
        if (isinstance(name, str) and rest.startswith(name) and rest[len(name):len(name) + 1] in ("", ".", "[")
                and (best is None or len(name) > len(best[2]))):
            best = (key, value, name)
    if best is None:
        return None
    key, value, name = best
    left = rest[len(name):]
    # The path ends at this key: point at the key (an unknown field, a bad value on its line).
    return (key, "") if not left else (value, left.removeprefix("."))


def load_documents(file: str, text: str, budget: YamlBudget | None = None) -> list[Document]:
    """The documents of one file (JSON when ``file`` ends in ``.json``, else YAML); empty ones skipped.

    Raises :class:`DocumentError` naming the file, the line and the column of the first problem.
    ``budget`` is shared by the files of one request (see :class:`~.yaml_loader.YamlBudget`).
    """
    if file.lower().endswith(JSON_SUFFIXES):
        return _load_json(file, text)
    try:
        loaded = load_yaml_documents(text, budget=budget)
    except YamlRejected as exc:
        where = Location(exc.line, exc.column or 1) if exc.line is not None else None
        raise DocumentError(file, f"invalid YAML: {exc.problem}", location=where) from None
    return [Document(file, d.index, d.data, d.node) for d in loaded]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _load_json(file: str, text: str) -> list[Document]:
    try:
        data = json.loads(text, parse_constant=_reject_constant)
        check_document_shape(data, "", DOCUMENT)
    except json.JSONDecodeError as exc:
        raise DocumentError(file, f"invalid JSON: {exc.msg}", location=Location(exc.lineno, exc.colno)) from None
    except (ValueError, ValidationFailed) as exc:
        raise DocumentError(file, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise DocumentError(file, f"invalid JSON: nested more than {DOCUMENT.max_depth} levels deep") from None
    return [] if data is None else [Document(file, 0, data)]
