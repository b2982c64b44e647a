"""DAG files as documents: YAML (several documents per file) or JSON, and where each value is.

People keep DAGs in files and edit them by hand, so a mistake must point at the file, the line
and the column — ``dags/etl.yaml:14:9: tasks[1].depends_on[0]: unknown task 'extrct'`` —
whether it is a YAML syntax error or a validation error found later by
:func:`leoflow.model.spec.parse_dag_spec`. :func:`load_documents` therefore keeps each
document's node tree next to its data, and :meth:`Document.locate` maps a validation path
back to the line and column it came from.

Parsing must not be a way to exhaust a server (files arrive through the API and from mounted
directories), so the loader is bounded while it composes, before anything is built:

- nesting deeper than :data:`MAX_DEPTH` is refused (PyYAML composes recursively, and its C
  extension crashes the process on deep nesting, so only the pure-Python loader is used);
- at most :data:`MAX_NODES` values per file, counting every alias as the values it stands
  for, so an alias bomb (a few hundred bytes that expand to gigabytes) fails at the budget;
- duplicate keys in one mapping are an error (YAML would silently keep the last one).

Every failure is a :class:`DocumentError`; nothing else escapes :func:`load_documents`.
Line and column numbers are 1-based, document indexes 0-based (like ``tasks[0]``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from leoflow.errors import LeoflowError

#: Deepest nesting of lists and mappings accepted in a DAG file (a spec needs four levels).
MAX_DEPTH = 64
#: Most values one file may hold, aliases counted as what they expand to: a 10,000-task DAG,
#: the spec's maximum, needs about 200,000.
MAX_NODES = 500_000
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


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a depth limit, a value budget and duplicate-key detection."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        #: Values each anchored node stands for (by id), to charge an alias what it expands to.
        self._sizes: dict[int, int] = {}

    def _charge(self, count: int, mark: Any) -> None:  # a pure-Python or a libyaml Mark
        self._values += count
        if self._values > MAX_NODES:
            raise _Refused(f"more than {MAX_NODES} values (aliases count as what they expand to)", mark)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            anchored = self.anchors.get(event.anchor)
            if anchored is not None:
                self._charge(self._sizes.get(id(anchored), 1), event.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        before = self._values
        self._charge(1, event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if getattr(event, "anchor", None):
            self._sizes[id(node)] = self._values - before
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key, _value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    raise _Refused(f"duplicate key {key.value!r}", key.start_mark)
                seen.add(key.value)
        return super().construct_mapping(node, deep=deep)


class _Refused(yaml.MarkedYAMLError):
    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem=problem, problem_mark=mark)


def load_documents(file: str, text: str) -> list[Document]:
    """The documents of one file (JSON when ``file`` ends in ``.json``, else YAML); empty ones skipped.

    Raises :class:`DocumentError` naming the file, the line and the column of the first problem.
    """
    if file.lower().endswith(JSON_SUFFIXES):
        return _load_json(file, text)
    documents: list[Document] = []
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)
        index = 0
        while loader.check_node():
            node = loader.get_node()
            data = loader.construct_document(node)
            if data is not None:
                documents.append(Document(file, index, data, node))
            index += 1
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or "invalid YAML"
        if exc.context:
            problem += f" ({exc.context})"
        raise DocumentError(file, f"invalid YAML: {problem}", location=_location(mark) if mark else None) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, other controls)
        before = text[:exc.position]
        where = Location(before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1)
        raise DocumentError(file, f"invalid YAML: character U+{exc.character:04X} is not allowed",
                            location=where) from None
    except yaml.YAMLError as exc:
        raise DocumentError(file, f"invalid YAML: {str(exc).splitlines()[0] if str(exc) else 'unreadable'}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _load_json(file: str, text: str) -> list[Document]:
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise DocumentError(file, f"invalid JSON: {exc.msg}", location=Location(exc.lineno, exc.colno)) from None
    except (ValueError, RecursionError) as exc:
        raise DocumentError(file, f"invalid JSON: {exc if isinstance(exc, ValueError) else 'nested too deeply'}") \
            from None
    return [] if data is None else [Document(file, 0, data)]
