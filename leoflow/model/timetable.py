"""Which scheduled runs are due: pure functions of the schedule, the DAG's plan and the time.

``dags.next_run_at`` holds the logical date of the next scheduled run (a cron fire time, in UTC).
When it is due the leader creates runs for it and moves it forward with a compare-and-set, so a
crash between the two only means the (idempotent, uniquely keyed) creation is redone.

- With ``catchup: true`` every missed fire time since ``start_date`` gets a run, oldest first, at
  most ``limit`` per call (the rest on the next tick, so one DAG with a long backlog cannot
  stall the loop).
- With ``catchup: false`` only the most recent due fire time gets a run; older ones are skipped.

The logical date is the fire time itself; the run id is ``scheduled__<logical date ISO>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from leoflow.model.fields import CRON_PRESETS
from leoflow.model.spec import DagSpec


@dataclass(frozen=True)
class RunPlan:
    logical_dates: tuple[datetime, ...]
    next_run_at: datetime


def plan_scheduled_runs(schedule: str, timezone: str, *, catchup: bool, next_run_at: datetime,
                        now: datetime, limit: int) -> RunPlan:
    """The runs to create now and the new ``next_run_at``; nothing if ``next_run_at`` is in the future."""
    if next_run_at > now:
        return RunPlan((), next_run_at)
    if not catchup:
        latest = max(next_run_at, last_fire_at_or_before(schedule, timezone, now))
        return RunPlan((latest,), next_fire_after(schedule, timezone, latest))
    dates: list[datetime] = []
    current = next_run_at
    while current <= now and len(dates) < limit:
        dates.append(current)
        current = next_fire_after(schedule, timezone, current)
    return RunPlan(tuple(dates), current)


def cron_expression(schedule: str) -> str:
    return CRON_PRESETS.get(schedule, schedule)


def next_fire_at_or_after(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The first cron fire time ``>= moment``, evaluated in ``timezone``, returned in UTC."""
    local = moment.astimezone(ZoneInfo(timezone)) - timedelta(microseconds=1)
    fire: datetime = croniter(cron_expression(schedule), local).get_next(datetime)
    return fire.astimezone(UTC)


def next_fire_after(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The first cron fire time strictly after ``moment``, in UTC."""
    fire: datetime = croniter(cron_expression(schedule), moment.astimezone(ZoneInfo(timezone))).get_next(datetime)
    return fire.astimezone(UTC)


def last_fire_at_or_before(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The latest cron fire time ``<= moment``, in UTC."""
    local = moment.astimezone(ZoneInfo(timezone)) + timedelta(microseconds=1)
    fire: datetime = croniter(cron_expression(schedule), local).get_prev(datetime)
    return fire.astimezone(UTC)


def first_scheduled_run(spec: DagSpec, now: datetime) -> datetime | None:
    """Where a (re)applied DAG's schedule starts: the first fire at/after ``start_date`` (or now).

    Without catchup the scheduler later skips ahead to the latest due fire time, so a DAG whose
    ``start_date`` lies in the past gets one run for the most recent slot, not a backlog.
    """
    if spec.schedule is None:
        return None
    return next_fire_at_or_after(spec.schedule, spec.timezone, spec.start_date or now)
