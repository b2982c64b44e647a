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
from datetime import datetime

from leoflow.scheduler.spec import last_fire_at_or_before, next_fire_after


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
