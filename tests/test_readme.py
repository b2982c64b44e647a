"""The README is the front door and part of the interface: its commands match CI, it stays short,
and the tables it sends readers to (``docs/configuration.md``, ``docs/limits.md``) match the code."""

from __future__ import annotations

import re
from pathlib import Path

from leoflow.cli.docs import END, LIMITS_END, LIMITS_START, PAGES, START, render_readme
from leoflow.model.limits import LIMITS
from leoflow.settings import VARIABLES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
LIMITS_PAGE = (ROOT / "docs" / "limits.md").read_text()


def test_the_readme_is_a_front_door_not_the_manual() -> None:
    assert len(README.splitlines()) <= 250


def test_settings_and_limits_tables_match_code() -> None:
    assert set(PAGES) == {"docs/configuration.md", "docs/limits.md", "docs/access-control.md"}
    roles = (ROOT / "docs" / "access-control.md").read_text()
    assert render_readme(roles) == roles, "run: python -m leoflow.cli.docs"
    for text, markers in ((CONFIGURATION, (START, END)), (LIMITS_PAGE, (LIMITS_START, LIMITS_END))):
        for marker in markers:
            assert text.count(marker) == 1, marker
        assert render_readme(text) == text, "run: python -m leoflow.cli.docs"


def test_configuration_table_has_a_row_for_every_variable() -> None:
    table = CONFIGURATION.partition(START)[2].partition(END)[0]
    for variable in VARIABLES:
        assert f"| `{variable.name}` |" in table, variable.name


def test_limits_table_lists_every_limit_of_the_model() -> None:
    table = LIMITS_PAGE.partition(LIMITS_START)[2].partition(LIMITS_END)[0]
    rows = table.strip().splitlines()[2:]  # after the header and its rule
    assert len(rows) == len(LIMITS) and all(row.count(" | ") == 2 for row in rows)
    for limit in LIMITS:
        assert f"| {limit.subject} | {limit.rule} |" in table


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    test_command = next(b.strip() for b in blocks if "pytest" in b)
    assert test_command in (ROOT / ".ci" / "run").read_text()
