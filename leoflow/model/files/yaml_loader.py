"""The one way Leoflow reads YAML: bounded before anything is built, errors with line and column.

YAML arrives from people (``leoflow dags apply``, ``Content-Type: application/yaml`` bodies, DAG
directories) and must not be a way to exhaust a server. ``yaml.safe_load`` alone is not safe in
that sense: an alias bomb of 349 bytes expands to 58 MB of JSON once anything walks it, and the
C parser's composer recurses without limit and crashes the process on a few hundred thousand
``[``. So a text is read in two passes:

1. **Scan** the event stream (libyaml's parser, which keeps its own stack and never recurses)
   and hold it to the :data:`~leoflow.model.limits.DOCUMENT` budget: nesting at most
   ``max_depth`` deep, at most ``max_values`` values, and at most ``max_bytes`` bytes of scalar
   text, where an **alias counts as everything its anchor stands for** — so a document that
   uses anchors costs what it would cost written out, and a bomb fails at the budget, after
   reading a few hundred bytes. Aliases stay allowed because people use them for shared blocks
   (``env: *common``); a recursive alias (an anchor used inside itself) is refused.
2. **Build** the documents with the same parser (fast, and safe now that the depth is known),
   refusing duplicate keys in a mapping (YAML would silently keep the last one) and turning any
   value that cannot be built (``2026-02-30``, a 5,000-digit integer) into an error at its
   position instead of a ``ValueError`` from deep inside PyYAML.

Every failure is :class:`YamlRejected` (``line 3, column 7: ...``, 1-based like an editor);
nothing else escapes. The document budget is checked on the parsed document too: the limit
applies to what the text *means*, not only to its length.

Plain scalars are typed by the **YAML 1.2 core schema**, not PyYAML's YAML 1.1 one: only
``true``/``false`` (``True``, ``TRUE``, ...) are booleans, so ``on:`` (a notification rule's
key), ``yes``, ``no``, ``off``, ``y`` and ``n`` stay strings, as every YAML 1.2 tool and JSON
reads them; integers are decimal (``0777`` is 777, not 511), ``0o17`` octal and ``0x1f`` hex;
``1:20`` is a string, not 80 (no sexagesimal numbers), and ``1_000`` a string too. Timestamps
(``2026-01-01``) and merge keys (``<<``) keep their YAML 1.1 meaning, which people rely on.
:func:`dump_yaml` writes with the same schema, so what Leoflow writes it reads back alike.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import yaml

from leoflow.errors import LeoflowError
from leoflow.model.limits import DOCUMENT, DOCUMENT_MAX_BYTES, Documents

#: libyaml when installed (every wheel of PyYAML ships it); the pure-Python parser otherwise.
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"
_INT = "tag:yaml.org,2002:int"
_1_2_CORE = (  # (tag, pattern, first characters), as the YAML 1.2 spec's core schema (10.3.2) writes them
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", "tTfF"),
    (_INT, r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
     r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", "-+.0123456789"),
)
_KEPT_FROM_1_1 = ("tag:yaml.org,2002:null", "tag:yaml.org,2002:timestamp", _MERGE)


def _implicit_resolvers() -> dict[str | None, list[tuple[str, re.Pattern[str]]]]:
    """PyYAML's table of plain-scalar types, rebuilt for the YAML 1.2 core schema (module docstring)."""
    table: dict[str | None, list[tuple[str, re.Pattern[str]]]] = {}
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items():
        table[first] = [(tag, pattern) for tag, pattern in resolvers if tag in _KEPT_FROM_1_1]
    for tag, pattern, firsts in _1_2_CORE:
        compiled = re.compile(f"^(?:{pattern})$")
        for first in firsts:
            table.setdefault(first, []).append((tag, compiled))
    return {first: resolvers for first, resolvers in table.items() if resolvers}


_IMPLICIT_1_2 = _implicit_resolvers()
#: libyaml 0.2.6 (in PyYAML 6.0.4's wheels) refuses nesting past 1,000 levels in its scanner, which
#: reads ahead of the events :func:`_scan` counts (up to a simple key's 1,024 characters): on a
#: long run of ``[`` its error comes first. It is our depth limit, met a little late.
_SCANNER_DEPTH_PROBLEM = "maximum nesting depth"


class YamlRejected(LeoflowError):
    """A YAML text that cannot be read: its syntax, or a budget it exceeds; names line and column."""

    def __init__(self, problem: str, line: int | None = None, column: int | None = None, *,
                 too_large: bool = False) -> None:
        self.problem = problem
        self.line = line
        self.column = column
        #: The text is valid but stands for more than the byte budget (a 413, not a 400).
        self.too_large = too_large
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(f"{where}{problem}")


@dataclass(frozen=True)
class YamlDocument:
    """One document of a text (0-based ``index`` among all, empty ones included) and its node tree.

    The node tree carries the position of every value (``node.start_mark``), for callers that
    point at the line of a validation error.
    """

    index: int
    data: Any
    node: yaml.Node


def _rejected_at(problem: str, mark: Any, *, too_large: bool = False) -> YamlRejected:
    if mark is None:
        return YamlRejected(problem, too_large=too_large)
    return YamlRejected(problem, mark.line + 1, mark.column + 1, too_large=too_large)


class _Frame:
    __slots__ = ("anchor", "bytes", "values")

    def __init__(self, anchor: str | None, values: int, size: int) -> None:
        self.anchor, self.values, self.bytes = anchor, values, size


class YamlBudget:
    """What several YAML texts of one request may stand for *together*, and until when.

    One text is held to its own limits; a request carrying many texts (``dags:sync``: up to
    10,000 files) would otherwise get each file's budget again — twenty files of aliases cost
    twenty times one (issue 44, item 15). Pass one budget to every :func:`load_yaml_documents`
    of the request: values and bytes (aliases expanded) add up across texts, and the scan gives
    up at ``deadline`` (a :func:`time.monotonic` value), as the work runs in a thread no request
    timeout can stop. Once ``exhausted``, every further text is refused at its first event.
    """

    def __init__(self, max_values: int, max_bytes: int, *, deadline: float | None = None,
                 subject: str = "the texts of this request") -> None:
        self.max_values, self.max_bytes, self.deadline, self.subject = max_values, max_bytes, deadline, subject
        self.values = 0
        self.bytes = 0
        self.exhausted = False

    def out_of_time(self) -> bool:
        """True once the deadline has passed (and the budget is then exhausted)."""
        if self.deadline is None or time.monotonic() <= self.deadline:
            return False
        self.exhausted = True
        return True

    def timed_out(self) -> YamlRejected:
        return YamlRejected(f"{self.subject} took longer to read than a request may (send fewer or smaller files)",
                            too_large=True)


#: Events between two looks at a budget's deadline (a look costs about as much as 50 events).
_EVENTS_PER_CLOCK_CHECK = 4096


def _scan(text: str, max_bytes: int, limit: Documents, budget: YamlBudget | None = None) -> None:
    """Pass 1: walk the events, holding the text to the budget (see the module docstring)."""
    values = size = 0
    cap_values, cap_bytes = limit.max_values, max_bytes
    if budget is not None:
        if budget.out_of_time():
            raise budget.timed_out()
        if budget.exhausted:
            raise YamlRejected(f"not read: {budget.subject} already stand for all they may", too_large=True)
        cap_values = min(cap_values, budget.max_values - budget.values)
        cap_bytes = min(cap_bytes, budget.max_bytes - budget.bytes)
    #: What each finished anchor stands for: (values, bytes).
    anchored: dict[str, tuple[int, int]] = {}
    open_frames: list[_Frame] = []
    events = 0
    loader = _Base(text)
    try:
        while loader.check_event():
            event = loader.get_event()
            events += 1
            if isinstance(event, yaml.AliasEvent):
                if any(f.anchor == event.anchor for f in open_frames):
                    raise _rejected_at(f"alias *{event.anchor} is used inside its own anchor (a recursive "
                                       "structure)", event.start_mark)
                if event.anchor not in anchored:
                    raise _rejected_at(f"alias *{event.anchor} names no anchor defined before it", event.start_mark)
                more_values, more_bytes = anchored[event.anchor]
                values += more_values
                size += more_bytes
            elif isinstance(event, yaml.ScalarEvent):
                scalar = len(event.value.encode("utf-8", "surrogatepass"))
                values += 1
                size += scalar
                if event.anchor:
                    anchored[event.anchor] = (1, scalar)
            elif isinstance(event, yaml.CollectionStartEvent):
                if len(open_frames) >= limit.max_depth:
                    raise _rejected_at(f"nested more than {limit.max_depth} levels deep", event.start_mark)
                values += 1
                open_frames.append(_Frame(event.anchor, values - 1, size))
            elif isinstance(event, yaml.CollectionEndEvent):
                frame = open_frames.pop()
                if frame.anchor:
                    anchored[frame.anchor] = (values - frame.values, size - frame.bytes)
            elif isinstance(event, yaml.DocumentEndEvent):
                anchored.clear()  # anchors are local to their document
            if values > cap_values or size > cap_bytes:
                raise _over_budget(values, size, max_bytes, limit, budget, event.start_mark)
            if budget is not None and events % _EVENTS_PER_CLOCK_CHECK == 0 and budget.out_of_time():
                raise _rejected_at(budget.timed_out().problem, event.start_mark, too_large=True)
    except yaml.MarkedYAMLError as exc:
        if exc.problem and _SCANNER_DEPTH_PROBLEM in exc.problem:
            raise _rejected_at(f"nested more than {limit.max_depth} levels deep", exc.problem_mark) from None
        raise
    finally:
        loader.dispose()
    if budget is not None:
        budget.values += values
        budget.bytes += size


def _over_budget(values: int, size: int, max_bytes: int, limit: Documents, budget: YamlBudget | None,
                 mark: Any) -> YamlRejected:
    if values > limit.max_values:
        return _rejected_at(f"more than {limit.max_values:,} values (aliases count as what they expand to)",
                            mark, too_large=True)
    if size > max_bytes:
        return _rejected_at(f"stands for more than {max_bytes:,} bytes of text (aliases count as what they "
                            "expand to)", mark, too_large=True)
    assert budget is not None  # only a shared budget caps below the text's own limits
    budget.exhausted = True
    return _rejected_at(f"{budget.subject} together stand for more than {budget.max_values:,} values or "
                        f"{budget.max_bytes:,} bytes of text (aliases count as what they expand to)",
                        mark, too_large=True)


def _construct_int_1_2(loader: Any, node: yaml.ScalarNode) -> int:
    value: str = loader.construct_scalar(node)
    if value.startswith("0o"):
        return int(value[2:], 8)
    if value.startswith("0x"):
        return int(value[2:], 16)
    return int(value, 10)  # a leading zero is no octal in YAML 1.2


class _Builder(_Base):  # type: ignore[misc]
    """Pass 2: PyYAML's safe constructor, refusing duplicate keys and locating bad values."""

    yaml_implicit_resolvers = _IMPLICIT_1_2

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError, TypeError) as exc:  # a scalar that no Python value can hold
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this value ({exc})",
                                                    node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[tuple[str, str]] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE:
                if (key.tag, key.value) in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key.value[:60]!r}",
                                                            key.start_mark)
                seen.add((key.tag, key.value))
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


_Builder.add_constructor(_INT, _construct_int_1_2)


def _either_schema() -> dict[str | None, list[tuple[str, re.Pattern[str]]]]:
    table = {first: list(resolvers) for first, resolvers in _IMPLICIT_1_2.items()}
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items():
        table.setdefault(first, []).extend(resolvers)
    return table


class _Writer(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """PyYAML's safe dumper, quoting every string that YAML 1.2 *or* YAML 1.1 would read as
    something else (``'1e5'``, ``'on'``): Leoflow reads it back alike, and so does any other tool."""

    yaml_implicit_resolvers = _either_schema()


def dump_yaml(data: Any) -> str:
    """``data`` as YAML that :func:`load_yaml` reads back alike (keys in their order, UTF-8 kept)."""
    text: str = yaml.dump(data, Dumper=_Writer, sort_keys=False, allow_unicode=True)
    return text


def _problem(exc: yaml.MarkedYAMLError) -> str:
    problem = exc.problem or "invalid YAML"
    return f"{problem} ({exc.context})" if exc.context else problem


def _reader_position(text: str, position: int) -> tuple[int, int]:
    before = text[:position]
    return before.count("\n") + 1, position - (before.rfind("\n") + 1) + 1


class _NeedsNodes(Exception):
    """A construct :func:`_build_single` leaves to PyYAML's node builder: a merge key, an explicit
    collection tag (``!!set``, ``!!omap``), or a collection used as a mapping key."""


_PLAIN_COLLECTION_TAGS = (None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")
_NO_KEY = object()


class _Frame2:
    """An open collection of :func:`_build_single`: the container and, in a mapping, the key read."""

    __slots__ = ("container", "key", "seen")

    def __init__(self, container: list[Any] | dict[Any, Any]) -> None:
        self.container = container
        self.key: Any = _NO_KEY
        self.seen: set[tuple[str, str]] = set()


def _build_single(text: str) -> list[tuple[Any, Any]]:
    """Pass 2 for a request body: every document's data and start mark, built from the parser's
    events without PyYAML's node tree.

    The node tree costs about 450 bytes a value (a node and two marks each): 54 MB for a 1 MiB body
    of short values, freed only after the request, on whichever replica parses it. Built from
    events, a body costs what its data costs (~10 MB for the same body). Scalars still go through
    the safe constructor (one short-lived node each), so every value reads exactly as in
    :func:`load_yaml_documents`; what events alone cannot build the same way raises
    :class:`_NeedsNodes` and the caller uses the node builder. The text was scanned first
    (:func:`_scan`), so depth and aliases are already bounded and every alias names a finished
    anchor.
    """
    builder = _Builder(text)
    documents: list[tuple[Any, Any]] = []
    anchors: dict[str | None, Any] = {}
    stack: list[_Frame2] = []
    root: list[Any] = []
    root_mark: list[Any] = []

    def add(value: Any, mark: Any, key_tag: str | None = None, key_text: str | None = None) -> None:
        if not stack:
            root.append(value)
            root_mark.append(mark)
            return
        frame = stack[-1]
        if isinstance(frame.container, list):
            frame.container.append(value)
        elif frame.key is _NO_KEY:
            if key_tag is None or key_text is None:
                raise _NeedsNodes  # a collection (or an alias) as a key: PyYAML's own errors apply
            if key_tag == _MERGE:
                raise _NeedsNodes
            if (key_tag, key_text) in frame.seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key_text[:60]!r}", mark)
            frame.seen.add((key_tag, key_text))
            frame.key = value
        else:
            frame.container[frame.key] = value
            frame.key = _NO_KEY

    try:
        while builder.check_event():
            event: Any = builder.get_event()
            if isinstance(event, yaml.ScalarEvent):
                tag = event.tag
                if tag is None or tag == "!":
                    tag = builder.resolve(yaml.ScalarNode, event.value, event.implicit)
                if tag == _MERGE:
                    raise _NeedsNodes  # a merge key (``<<``): PyYAML's node builder merges
                start: Any = event.start_mark  # libyaml's marks: the node builder uses them alike
                end: Any = event.end_mark
                node = yaml.ScalarNode(tag, event.value, start, end, event.style)
                value = builder.construct_object(node, deep=True)
                builder.constructed_objects.pop(node, None)
                if event.anchor:
                    anchors[event.anchor] = value
                add(value, event.start_mark, tag, event.value)
            elif isinstance(event, yaml.AliasEvent):
                add(anchors[event.anchor], event.start_mark)
            elif isinstance(event, yaml.CollectionStartEvent):
                if event.tag not in _PLAIN_COLLECTION_TAGS:
                    raise _NeedsNodes
                container: list[Any] | dict[Any, Any] = (
                    [] if isinstance(event, yaml.SequenceStartEvent) else {})
                if event.anchor:
                    anchors[event.anchor] = container
                add(container, event.start_mark)
                stack.append(_Frame2(container))
            elif isinstance(event, yaml.CollectionEndEvent):
                stack.pop()
            elif isinstance(event, yaml.DocumentStartEvent):
                anchors.clear()
                root.clear()
                root_mark.clear()
            elif isinstance(event, yaml.DocumentEndEvent):
                documents.append((root[0] if root else None, root_mark[0] if root_mark else event.start_mark))
    finally:
        builder.dispose()
    return documents


def _translate(exc: yaml.YAMLError, text: str) -> YamlRejected:
    """A PyYAML error as the one :class:`YamlRejected` callers see."""
    if isinstance(exc, yaml.MarkedYAMLError):
        return _rejected_at(_problem(exc), exc.problem_mark or exc.context_mark)
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, other controls)
        line, column = _reader_position(text, exc.position)
        return YamlRejected(f"character U+{exc.character:04X} is not allowed in YAML", line, column)
    return YamlRejected(str(exc).splitlines()[0] if str(exc) else "invalid YAML")


def load_yaml_documents(text: str, *, max_bytes: int = DOCUMENT_MAX_BYTES, limit: Documents = DOCUMENT,
                        budget: YamlBudget | None = None) -> list[YamlDocument]:
    """Every non-empty document of ``text``, bounded; YamlRejected on any problem.

    ``max_bytes`` bounds the scalar text the documents stand for (aliases expanded): the API
    passes its body limit, so a body's meaning is held to the same size as its bytes.
    ``budget``, shared by the texts of one request, bounds them together (:class:`YamlBudget`).
    """
    try:
        _scan(text, max_bytes, limit, budget)
        return _build_nodes(text)
    except yaml.YAMLError as exc:
        raise _translate(exc, text) from None


def _build_nodes(text: str) -> list[YamlDocument]:
    documents: list[YamlDocument] = []
    builder = _Builder(text)
    try:
        index = 0
        while builder.check_node():
            node = builder.get_node()
            data = builder.construct_document(node)
            if data is not None:
                documents.append(YamlDocument(index, data, node))
            index += 1
    finally:
        builder.dispose()
    return documents


def load_yaml(text: str, *, max_bytes: int = DOCUMENT_MAX_BYTES, limit: Documents = DOCUMENT) -> Any:
    """The single document of ``text`` (None when empty); YamlRejected if there are several.

    Built from events (:func:`_build_single`), without the node tree no caller of a single
    document needs; the node builder only for what events cannot build alike.
    """
    try:
        _scan(text, max_bytes, limit)
        try:
            found = [(data, mark) for data, mark in _build_single(text) if data is not None]
        except _NeedsNodes:
            found = [(d.data, d.node.start_mark) for d in _build_nodes(text)]
    except yaml.YAMLError as exc:
        raise _translate(exc, text) from None
    if len(found) > 1:
        raise _rejected_at("expected one document, found several (apply each separately)", found[1][1])
    return found[0][0] if found else None
