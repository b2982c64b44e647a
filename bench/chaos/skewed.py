"""``leoflow serve`` on a host whose wall clock is ``offset`` seconds off (the soak's ``clock_skew``).

Usage: ``python -m bench.chaos.skewed <offset seconds> serve``. The replica runs exactly as
``python -m leoflow serve`` does (same CLI, settings, logging), except that the clock every
replica part is given (:class:`leoflow.replica.Replica`'s: the elector, the leader's
scheduler and executor) reads the wall clock ``offset`` seconds off
(:class:`leoflow.clock.SkewedClock`), as on a host whose NTP is broken. Monotonic time is
untouched. PostgreSQL's clock (on another "host") stays right, so any deadline that compares
one leader's wall clock with another's shows up as tasks timed out or retried at the wrong time.
"""

from __future__ import annotations

import sys

import leoflow.replica
from leoflow.cli.main import main
from leoflow.clock import SkewedClock


def run(argv: list[str]) -> int:
    offset = float(argv[0])
    # Replica() falls back to SystemClock() when given no clock; the CLI gives none.
    leoflow.replica.SystemClock = lambda: SkewedClock(offset)  # type: ignore[assignment, attr-defined, return-value]
    return main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:]))
