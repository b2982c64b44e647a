"""Backfills as data: which cron slots a request covers, and how a request is validated.

A backfill runs a scheduled DAG for the cron slots (fire times, evaluated in the DAG's time
zone) in ``[start, end)``. Each slot's run is the *scheduled* run of that slot — the same id,
``scheduled__<logical date>``, the scheduler would give it — so a slot that already has a run
is never run twice: it is left alone, or, with ``rerun_failed``, a failed run is run again.

Bounds, checked before anything is written (a 422 naming the field):

- ``start`` < ``end``, both ISO 8601 (a date alone means midnight in the DAG's time zone; a
  date-time without an offset is in the DAG's time zone too), both within
  :data:`~leoflow.model.limits.START_DATE`'s range (1970 to 2200, as a DAG's ``start_date``):
  cron arithmetic near year 1 or 9999 overflows Python's ``datetime``, and no DAG has slots there;
- ``end`` not in the future: a slot whose time has not come is the scheduler's business;
- at most :data:`MAX_BACKFILL_SLOTS` slots per request (split a longer range into several
  backfills, one after the other), and at least one;
- ``max_active_runs`` between 1 and :data:`MAX_BACKFILL_ACTIVE_RUNS` (default
  :data:`DEFAULT_BACKFILL_ACTIVE_RUNS`): how many of the backfill's runs may be unfinished at
  once. Runs also wait for the DAG's own ``max_active_runs`` (the scheduler starts them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any
from zoneinfo import ZoneInfo

from leoflow.errors import ValidationFailed
from leoflow.model.bounds import check_moment
from leoflow.model.limits import START_DATE
from leoflow.model.spec.timetable import next_fire_after, next_fire_at_or_after

#: Slots one backfill may cover: a year of hourly slots is 8,760 — split it; a year of daily
#: slots (365) or a month of hourly ones (744) fits.
MAX_BACKFILL_SLOTS = 1000
MAX_BACKFILL_ACTIVE_RUNS = 1000
#: Airflow's default for a backfill's own limit.
DEFAULT_BACKFILL_ACTIVE_RUNS = 10

_FIELDS = {"start", "end", "max_active_runs", "rerun_failed"}


@dataclass(frozen=True)
class BackfillRequest:
    start: datetime
    end: datetime
    max_active_runs: int
    rerun_failed: bool


def parse_backfill_request(body: dict[str, Any], timezone: str) -> BackfillRequest:
    """Validate ``{start, end, max_active_runs?, rerun_failed?}`` (times read in ``timezone``)."""
    for key in body:
        if key not in _FIELDS:
            raise ValidationFailed(key, f"unknown field (allowed: {', '.join(sorted(_FIELDS))})")
    start = parse_moment(body.get("start"), "start", timezone)
    end = parse_moment(body.get("end"), "end", timezone)
    if start >= end:
        raise ValidationFailed("end", "must be later than start")
    raw_max = body.get("max_active_runs", DEFAULT_BACKFILL_ACTIVE_RUNS)
    if raw_max is None:
        raw_max = DEFAULT_BACKFILL_ACTIVE_RUNS
    if not isinstance(raw_max, int) or isinstance(raw_max, bool) or not 1 <= raw_max <= MAX_BACKFILL_ACTIVE_RUNS:
        raise ValidationFailed("max_active_runs", f"must be an integer between 1 and {MAX_BACKFILL_ACTIVE_RUNS}")
    rerun = body.get("rerun_failed", False)
    if rerun is None:
        rerun = False
    if not isinstance(rerun, bool):
        raise ValidationFailed("rerun_failed", "must be true or false")
    return BackfillRequest(start=start, end=end, max_active_runs=raw_max, rerun_failed=rerun)


def parse_moment(value: object, path: str, timezone: str) -> datetime:
    """An ISO 8601 date or date-time; naive values are in ``timezone``."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationFailed(path, "is required (ISO 8601, e.g. 2026-11-01 or 2026-11-01T06:00:00Z)")
    text = value.strip()
    if len(text) > 40:
        raise ValidationFailed(path, "is not an ISO 8601 date or date-time")
    try:
        if len(text) == 10:
            moment = datetime.combine(date.fromisoformat(text), time(0))
        else:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValidationFailed(path, f"{text!r} is not an ISO 8601 date or date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(timezone))
    return check_moment(moment, path, START_DATE)


def backfill_slots(schedule: str, timezone: str, start: datetime, end: datetime, *,
                   limit: int = MAX_BACKFILL_SLOTS) -> list[datetime]:
    """The cron fire times in ``[start, end)`` (UTC), oldest first; at most ``limit + 1``.

    One more than ``limit`` is returned when the range holds more, so the caller can tell the
    user exactly what went wrong without enumerating a decade of minutes.
    """
    slots: list[datetime] = []
    current = next_fire_at_or_after(schedule, timezone, start)
    while current < end and len(slots) <= limit:
        slots.append(current)
        current = next_fire_after(schedule, timezone, current)
    return slots


def check_slots(slots: list[datetime], *, schedule: str, now: datetime, end: datetime) -> None:
    """Refuse an empty, oversized or future range (422 naming the field to change)."""
    if end > now:
        raise ValidationFailed("end", "must not be in the future (the scheduler creates runs whose time has come)")
    if not slots:
        raise ValidationFailed("start", f"no slot of the schedule {schedule!r} falls in [start, end)")
    if len(slots) > MAX_BACKFILL_SLOTS:
        raise ValidationFailed("end", f"the range holds more than {MAX_BACKFILL_SLOTS} slots of {schedule!r}; "
                               "split it into several backfills")
