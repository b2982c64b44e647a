"""The README is part of the interface: its commands and table must match the code."""

from __future__ import annotations

import re
from pathlib import Path

from leoflow.cli.docs import END, LIMITS_END, LIMITS_START, START, render_readme
from leoflow.model.limits import LIMITS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_settings_and_limits_tables_match_code() -> None:
    for marker in (START, END, LIMITS_START, LIMITS_END):
        assert README.count(marker) == 1, marker
    assert render_readme(README) == README, "run: python -m leoflow.cli.docs"


def test_limits_table_lists_every_limit_of_the_model() -> None:
    table = README.partition(LIMITS_START)[2].partition(LIMITS_END)[0]
    rows = table.strip().splitlines()[2:]  # after the header and its rule
    assert len(rows) == len(LIMITS) and all(row.count(" | ") == 2 for row in rows)
    for limit in LIMITS:
        assert f"| {limit.subject} | {limit.rule} |" in table


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    test_command = next(b.strip() for b in blocks if "pytest" in b)
    assert test_command in (ROOT / ".ci" / "run").read_text()
