"""Renders the values table of ``helm/leoflow/README.md`` from ``values.yaml`` and its comments.

The convention (the one helm-docs reads): a ``# --`` comment directly above a key documents that
key, and the ``#`` lines right after it continue the description. Other comments (section
headers) are not part of the table. A key without its own ``# --`` comment is covered by a
documented ancestor (``resources`` documents ``resources.requests.cpu``), or it is undocumented,
which :func:`undocumented` reports and ``tests/deploy/test_chart_readme.py`` refuses.

Run ``python helm/generate_readme.py`` after changing ``values.yaml``; the test fails while the
README is stale. Only the block between the markers is generated; the rest is written by hand.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART_DIR = Path(__file__).resolve().parent / "leoflow"
START = "<!-- values-table:start -->"
END = "<!-- values-table:end -->"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?:\s|$)")
_DOC = re.compile(r"^ *# -- ?(?P<text>.*)$")
_MORE = re.compile(r"^ *#(?: (?P<text>.*))?$")
_MISSING = object()


@dataclass(frozen=True)
class DocumentedValue:
    """One row of the table: a value path (``database.url``), its default and description."""

    path: str
    default: Any
    description: str
    type: str


def _key_paths(lines: list[str]) -> list[tuple[int, str, str]]:
    """``(line number, dotted path, doc)`` for every mapping key outside lists and block scalars."""
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    doc: list[str] | None = None
    opaque_below: int | None = None  # lines indented deeper than this belong to a list or text block
    found: list[tuple[int, str, str]] = []
    for number, line in enumerate(lines):
        if not line.strip():
            doc = None  # a blank line ends a doc comment that documents nothing
            continue
        indent = len(line) - len(line.lstrip(" "))
        if opaque_below is not None and indent > opaque_below:
            continue
        opaque_below = None
        if (match := _DOC.match(line)) is not None:
            doc = [match["text"].strip()]
            continue
        if (more := _MORE.match(line)) is not None:
            if doc is not None:
                doc.append((more["text"] or "").strip())
            continue
        if line.lstrip(" ").startswith("-"):  # a list item: its content is the parent's default
            opaque_below = indent
            doc = None
            continue
        key = _KEY.match(line)
        if key is None:
            doc = None
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([*(k for _, k in stack), key["key"]])
        found.append((number, path, " ".join(part for part in (doc or []) if part)))
        stack.append((indent, key["key"]))
        if re.match(r"^[|>][-+0-9]*\s*(#.*)?$", line[key.end():].strip()):
            opaque_below = indent  # a block scalar's text may look like keys
        doc = None
    return found


def value_at(values: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``values``, or ``_MISSING``."""
    node = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def exists(values: Any, path: str) -> bool:
    return value_at(values, path) is not _MISSING


def _schema_type(schema: dict[str, Any], path: str, default: Any) -> str:
    node: dict[str, Any] | None = schema
    for part in path.split("."):
        node = (node or {}).get("properties", {}).get(part)
    if node and "enum" in node and "type" not in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    if node and isinstance(node.get("type"), str):
        return str(node["type"])
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(default), "string")


def documented_values(values_text: str, schema: dict[str, Any] | None = None) -> list[DocumentedValue]:
    """Every key with a ``# --`` comment, in file order."""
    values = yaml.safe_load(values_text) or {}
    rows = []
    for _, path, doc in _key_paths(values_text.splitlines()):
        if doc:
            default = value_at(values, path)
            rows.append(DocumentedValue(path, default, doc, _schema_type(schema or {}, path, default)))
    return rows


def undocumented(values_text: str) -> list[str]:
    """Leaf values (scalars, lists, empty maps) no ``# --`` comment covers, itself or an ancestor."""
    values = yaml.safe_load(values_text) or {}
    documented = {row.path for row in documented_values(values_text)}

    def leaves(node: Any, prefix: str) -> list[str]:
        if isinstance(node, dict) and node:
            return [leaf for key, child in node.items() for leaf in leaves(child, f"{prefix}{key}.")]
        return [prefix.rstrip(".")]

    def covered(path: str) -> bool:
        parts = path.split(".")
        return any(".".join(parts[:n]) in documented for n in range(1, len(parts) + 1))

    return [leaf for leaf in leaves(values, "") if not covered(leaf)]


def _cell(text: str) -> str:
    """Table-cell safe: pipes escaped, and <fullname> shown rather than taken for an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def values_table(values_text: str, schema: dict[str, Any]) -> str:
    rows = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for row in documented_values(values_text, schema):
        # Inside a code span only the pipe needs escaping (GitHub splits cells on it first).
        default = json.dumps(row.default, separators=(",", ":")).replace("|", "\\|")
        rows.append(f"| `{row.path}` | {_cell(row.type)} | `{default}` | {_cell(row.description)} |")
    return "\n".join(rows)


def render_readme(readme: str, values_text: str, schema: dict[str, Any]) -> str:
    """``readme`` with the block between the markers replaced by the current table."""
    if START not in readme or END not in readme:
        raise ValueError(f"README lacks the markers {START} ... {END}")
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{values_table(values_text, schema)}\n{END}{tail}"


def current_inputs(chart_dir: Path = CHART_DIR) -> tuple[str, str, dict[str, Any]]:
    """(README text, values.yaml text, schema) of the chart."""
    return ((chart_dir / "README.md").read_text(), (chart_dir / "values.yaml").read_text(),
            json.loads((chart_dir / "values.schema.json").read_text()))


if __name__ == "__main__":
    readme, values_text, schema = current_inputs()
    (CHART_DIR / "README.md").write_text(render_readme(readme, values_text, schema))
