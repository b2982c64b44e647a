"""The code stays clean under the project's own linters (configured in pyproject.toml).

Run as tests so the README's one test command (and CI) enforces them, not a separate step
someone may skip. ruff covers the whole tree; mypy the package (tests are not type-checked).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_ruff_finds_nothing() -> None:
    done = _run(str(BIN / "ruff"), "check", ".")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_finds_nothing_in_the_package() -> None:
    done = _run(sys.executable, "-m", "mypy", "leoflow")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
