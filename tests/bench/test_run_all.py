"""bench/run_all.py's results file: a new day starts from the last day's entries, so re-running a
few benchmarks still renders the whole page (each entry keeps its own time and machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run_all


def test_a_new_day_carries_the_latest_earlier_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_all, "RESULTS", tmp_path)
    assert run_all.carried_over("2026-11-27") == {"date": "2026-11-27", "benchmarks": {}}
    for day, entries in (("2026-11-20", {"api": {"v": 1}}), ("2026-11-23", {"api": {"v": 2}, "chaos": {"v": 3}}),
                         ("2026-11-30", {"api": {"v": 9}})):
        (tmp_path / f"{day}.json").write_text(json.dumps({"date": day, "benchmarks": entries}))
    (tmp_path / "2026-11-24-chaos-600.json").write_text("{}")  # a side result, not a day's file
    assert run_all.carried_over("2026-11-27") == {"date": "2026-11-27",
                                                  "benchmarks": {"api": {"v": 2}, "chaos": {"v": 3}}}
