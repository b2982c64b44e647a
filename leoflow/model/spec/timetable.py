"""Which scheduled runs are due: pure functions of the schedule, the DAG's plan and the time.

``dags.next_run_at`` holds the logical date of the next scheduled run (a cron fire time, in UTC).
When it is due the leader creates runs for it and moves it forward with a compare-and-set, so a
crash between the two only means the (idempotent, uniquely keyed) creation is redone.

- With ``catchup: true`` every missed fire time since ``start_date`` gets a run, oldest first, at
  most ``limit`` per call (the rest on the next tick, so one DAG with a long backlog cannot
  stall the loop).
- With ``catchup: false`` only the most recent due fire time gets a run; older ones are skipped.

The logical date is the fire time itself; the run id is ``scheduled__<logical date ISO>``.

A tick plans every due DAG, and real installs put hundreds or thousands of them on the same
expression (``0 0 * * *``) at the same last fire: :class:`TickPlanner` plans each distinct
(schedule, time zone, catchup, ``next_run_at``) once per tick, so midnight for 10,000 DAGs costs
one croniter evaluation, not 20,000. It lives for one tick only (``now`` is part of every plan),
so it is a memo, not a cache: nothing in it outlives the tick or needs invalidating.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import TracebackType
from zoneinfo import ZoneInfo

from leoflow.errors import ValidationFailed
from leoflow.model.cron import CRON_ERRORS, cron_expression, next_fire, previous_fire
from leoflow.model.spec.dag import DagSpec


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


#: What a plan depends on besides the tick's ``now`` and limit: schedule, time zone, catchup, next_run_at.
PlanKey = tuple[str, str, bool, datetime]


@dataclass
class TickPlanner:
    """:func:`plan_scheduled_runs` for one tick's ``now``, once per distinct :data:`PlanKey`.

    A schedule that cannot be planned raises for every DAG that shares it (the exception is
    remembered too, so a bad expression shared by 1,000 DAGs is parsed once, and each DAG is
    still failed on its own by the caller). Bounded by the DAGs of one tick's batch.
    """

    now: datetime
    limit: int
    _plans: dict[PlanKey, RunPlan | tuple[Exception, TracebackType | None]] = field(default_factory=dict)

    def plan(self, schedule: str, timezone: str, *, catchup: bool, next_run_at: datetime) -> RunPlan:
        key = (schedule, timezone, catchup, next_run_at)
        found = self._plans.get(key)
        if found is None:
            try:
                found = plan_scheduled_runs(schedule, timezone, catchup=catchup, next_run_at=next_run_at,
                                            now=self.now, limit=self.limit)
            except (*CRON_ERRORS, LookupError, ValidationFailed) as exc:  # remembered for the DAGs sharing the key
                # (a zone that is gone is a LookupError); each DAG is still failed alone by the caller
                found = (exc, exc.__traceback__)
            self._plans[key] = found
        if isinstance(found, tuple):
            # The original traceback each time, so raising it for 1,000 DAGs does not grow it.
            raise found[0].with_traceback(found[1])
        return found

    @property
    def distinct(self) -> int:
        """Plans made this tick (one per distinct key)."""
        return len(self._plans)


def next_fire_at_or_after(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The first cron fire time ``>= moment``, evaluated in ``timezone``, returned in UTC."""
    local = moment.astimezone(ZoneInfo(timezone)) - timedelta(microseconds=1)
    fire = next_fire(cron_expression(schedule), local)
    return fire.astimezone(UTC)


def next_fire_after(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The first cron fire time strictly after ``moment``, in UTC."""
    fire = next_fire(cron_expression(schedule), moment.astimezone(ZoneInfo(timezone)))
    return fire.astimezone(UTC)


def last_fire_at_or_before(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The latest cron fire time ``<= moment``, in UTC."""
    local = moment.astimezone(ZoneInfo(timezone)) + timedelta(microseconds=1)
    fire = previous_fire(cron_expression(schedule), local)
    return fire.astimezone(UTC)


def first_scheduled_run(spec: DagSpec, now: datetime) -> datetime | None:
    """Where a (re)applied DAG's schedule starts: the first fire at/after ``start_date`` (or now).

    Without catchup the scheduler later skips ahead to the latest due fire time, so a DAG whose
    ``start_date`` lies in the past gets one run for the most recent slot, not a backlog.
    """
    if spec.schedule is None:
        return None
    return next_fire_at_or_after(spec.schedule, spec.timezone, spec.start_date or now)
