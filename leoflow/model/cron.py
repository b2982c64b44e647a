"""Cron expressions: the one module that speaks to croniter.

A DAG's ``schedule`` is a 5-field cron expression or a preset (``@daily``). Validation asks two
questions here (is it well formed; does it fire within a bound, so ``0 0 31 2 *`` is refused at
apply time) and the timetable asks for fire times. croniter reports a bad expression or a date it
cannot reach with :class:`croniter.CroniterError` (a ``ValueError``); past year 9999 Python's
``datetime`` raises ``ValueError`` or ``OverflowError``. Those are caught by name below, so any
other exception is a bug that surfaces, not a schedule quietly called invalid.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

from croniter import CroniterError, croniter

CRON_PRESETS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
#: What croniter and ``datetime`` raise for an expression or a date they cannot handle.
CRON_ERRORS = (CroniterError, ValueError, OverflowError)


def cron_expression(schedule: str) -> str:
    """The expression behind a schedule (a preset's, or the schedule itself)."""
    return CRON_PRESETS.get(schedule, schedule)


@lru_cache(maxsize=4096)
def is_valid(expression: str) -> bool:
    """Whether croniter can read ``expression``: a pure function of the text, so cached (a leader
    compiling 10,000 DAGs' versions at a boundary asks it of the same few expressions)."""
    try:
        return bool(croniter.is_valid(expression))
    except CRON_ERRORS:
        return False


def fires_within(expression: str, local_reference: datetime, years: int) -> bool:
    """Whether ``expression`` fires within ``years`` after ``local_reference`` (aware, in the DAG's zone)."""
    try:
        croniter(expression, local_reference, max_years_between_matches=years).get_next(datetime)
    except CRON_ERRORS:
        return False
    return True


def next_fire(expression: str, local_moment: datetime) -> datetime:
    """The first fire strictly after ``local_moment``, in its zone."""
    fire: datetime = croniter(expression, local_moment).get_next(datetime)
    return fire


def previous_fire(expression: str, local_moment: datetime) -> datetime:
    """The last fire strictly before ``local_moment``, in its zone."""
    fire: datetime = croniter(expression, local_moment).get_prev(datetime)
    return fire
