"""Renders the README's configuration table from :data:`leoflow.settings.VARIABLES`.

The README is checked against this output by a test, so the table cannot drift from the code.
"""

from __future__ import annotations

from leoflow.settings import VARIABLES

START = "<!-- settings-table:start -->"
END = "<!-- settings-table:end -->"


def settings_table() -> str:
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.default_text} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(rows)


def render_readme(text: str) -> str:
    """``text`` with the block between the markers replaced by the current table."""
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{settings_table()}\n{END}{tail}"


if __name__ == "__main__":
    import pathlib

    readme = pathlib.Path(__file__).resolve().parents[2] / "README.md"
    readme.write_text(render_readme(readme.read_text()))
