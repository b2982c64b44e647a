"""Renders the README's generated tables: configuration (:data:`leoflow.settings.VARIABLES`) and
input limits (:data:`leoflow.model.limits.LIMITS`).

The README is checked against this output by a test, so neither table can drift from the code.
``python -m leoflow.cli.docs`` rewrites both blocks in place.
"""

from __future__ import annotations

from leoflow.model.limits import LIMITS
from leoflow.settings import VARIABLES

START = "<!-- settings-table:start -->"
END = "<!-- settings-table:end -->"
LIMITS_START = "<!-- limits-table:start -->"
LIMITS_END = "<!-- limits-table:end -->"


def settings_table() -> str:
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.default_text} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(rows)


def limits_table() -> str:
    rows = ["| Input | Limit | Why |", "| --- | --- | --- |"]
    rows += [f"| {limit.subject} | {limit.rule} | {limit.why} |" for limit in LIMITS]
    return "\n".join(rows)


def _replace_block(text: str, start: str, end: str, table: str) -> str:
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{table}\n{end}{tail}"


def render_readme(text: str) -> str:
    """``text`` with the blocks between the markers replaced by the current tables."""
    text = _replace_block(text, START, END, settings_table())
    return _replace_block(text, LIMITS_START, LIMITS_END, limits_table())


if __name__ == "__main__":
    import pathlib

    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    readme.write_text(render_readme(readme.read_text()))
