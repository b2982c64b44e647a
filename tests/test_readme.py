"""The README is part of the interface: its commands and table must match the code."""

from __future__ import annotations

import re
from pathlib import Path

from leoflow.cli.docs import render_readme

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_settings_table_matches_code() -> None:
    assert render_readme(README) == README, "run: python -m leoflow.cli.docs"


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    test_command = next(b.strip() for b in blocks if "pytest" in b)
    assert test_command in (ROOT / ".ci" / "run").read_text()
