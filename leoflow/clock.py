"""Injected time.

Lease, keepalive, cron and retry code takes a :class:`Clock` so that tests can move time by
hand instead of sleeping. Deadlines use :meth:`Clock.monotonic`; only timestamps that are shown to
people or compared with database times use :meth:`Clock.now`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current wall-clock time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; for deadlines only."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class SkewedClock:
    """The real clock, ``offset`` seconds off on the wall (a host whose NTP is broken).

    Monotonic time is untouched: only wall-clock readings are skewed. Used to prove that no
    deadline compares one leader's wall clock with another's (tests, ``bench/chaos.py``).
    """

    def __init__(self, offset: float, base: Clock | None = None) -> None:
        self.offset = timedelta(seconds=offset)
        self._base = base or SystemClock()

    def now(self) -> datetime:
        return self._base.now() + self.offset

    def monotonic(self) -> float:
        return self._base.monotonic()


class FakeClock:
    """A clock that only moves when told to (tests)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set(self, when: datetime) -> None:
        delta = (when - self._now).total_seconds()
        if delta < 0:
            raise ValueError("FakeClock cannot go backwards")
        self.advance(delta)
