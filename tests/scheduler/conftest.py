"""Scheduler test fixtures: every scheduler test also checks that the completion sweep repaired nothing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from leoflow.metrics import scheduler as metrics


@dataclass
class SweepRepairs:
    """Runs the test expects the completion sweep to repair (0 unless it breaks a run on purpose)."""

    expected: int = 0


@pytest.fixture(autouse=True)
def sweep_repairs() -> Iterator[SweepRepairs]:
    """Issue 21: runs finish in the step that completes them, so the sweep never has work.

    The counter is process-wide; scheduler tests run their scheduler in the test process, so a
    repair made during a test shows up here and fails it.
    """
    repairs = SweepRepairs()
    before = metrics.SWEEP_REPAIRS._value.get()
    yield repairs
    made = metrics.SWEEP_REPAIRS._value.get() - before
    assert made == repairs.expected, f"the completion sweep repaired {made} run(s): a step left a complete run running"
