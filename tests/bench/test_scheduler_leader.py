"""``bench/scheduler.py``'s leader process ends when its scheduler does, and the driver notices.

Before, a leader whose ``SchedulerService`` died kept waiting for the SIGTERM that the driver
sends only once every run has ended or ``--timeout`` (default 600 s) has passed: a broken
benchmark looked like a slow one for ten minutes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import scheduler

ROOT = Path(__file__).resolve().parents[2]


def test_a_leader_whose_scheduler_dies_exits_at_once_saying_why() -> None:
    # Nothing listens on port 1: the scheduler's first transaction (resubmitting queued tries) fails.
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "scheduler.py"), "--leader", "--database-url",
                           "postgresql://bench@127.0.0.1:1/bench"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 1
    assert "the scheduler service ended before it was stopped" in done.stderr
    assert done.stdout == ""  # no summary: the driver must not read one as a result


def test_the_driver_fails_at_once_when_the_leader_has_exited() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"], text=True)
    proc.wait(timeout=60)
    with pytest.raises(SystemExit, match=r"leader exited early \(code 3\)"):
        scheduler.check_alive(proc)


def test_the_driver_goes_on_while_the_leader_runs() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True)
    try:
        scheduler.check_alive(proc)
    finally:
        proc.kill()
        proc.wait(timeout=60)
