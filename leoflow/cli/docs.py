"""Renders the documentation's generated tables: configuration (:data:`leoflow.settings.VARIABLES`,
in ``docs/configuration.md``) and input limits (:data:`leoflow.model.limits.LIMITS`, in
``docs/limits.md``).

The pages are checked against this output by a test, so neither table can drift from the code.
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


#: The page that holds each generated table, relative to the repository.
PAGES = {"docs/configuration.md": (START, END), "docs/limits.md": (LIMITS_START, LIMITS_END)}


def render_readme(text: str) -> str:
    """``text`` with the blocks between the markers it holds replaced by the current tables."""
    if START in text:
        text = _replace_block(text, START, END, settings_table())
    if LIMITS_START in text:
        text = _replace_block(text, LIMITS_START, LIMITS_END, limits_table())
    return text


if __name__ == "__main__":
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    for page in PAGES:
        (root / page).write_text(render_readme((root / page).read_text()))
