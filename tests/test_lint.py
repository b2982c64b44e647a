"""The code stays clean under the project's own linters (configured in pyproject.toml).

Run as tests so the README's one test command (and CI) enforces them, not a separate step
someone may skip. ruff covers the whole tree; mypy the package and the benchmarks (tests are not
type-checked, so the test harness the chaos soak imports is read but not reported on).
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


def test_mypy_finds_nothing_in_the_benchmarks() -> None:
    # bench/ is a namespace package run by hand: its type errors went unseen until they piled up
    # (seven in four files, by 2026-11-28). ``--follow-imports=silent``: tests/harness, which
    # bench/chaos imports, is not the benchmarks' to check.
    done = _run(sys.executable, "-m", "mypy", "--explicit-package-bases", "--follow-imports=silent", "bench")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
