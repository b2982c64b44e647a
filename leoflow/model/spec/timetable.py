"""Which scheduled runs are due: pure functions of the schedule, the DAG's plan and the time.

``dags.next_run_at`` holds the logical date of the next scheduled run (a cron fire time, in UTC).
When it is due the leader creates runs for it and moves it forward with a compare-and-set, so a
crash between the two only means the (idempotent, uniquely keyed) creation is redone.

- With ``catchup: true`` every missed fire time since ``start_date`` gets a run, oldest first, at
  most ``limit`` per call (the rest on the next tick, so one DAG with a long backlog cannot
  stall the loop).
- With ``catchup: false`` only the most recent due fire time gets a run; older ones are skipped.

The logical date is the fire time itself; the run id is ``scheduled__<logical date ISO>``. The
run's **data interval** ends at its logical date and starts at the fire time before it (Airflow
calls the *start* of the interval the logical date and runs it at the end, the most asked-about
confusion of its scheduler; here the date a run is named after is the moment it is for). The
schedule forms (lists of crons, ``@once``, ``every:``) are :mod:`leoflow.model.spec.schedules.forms`;
all are evaluated in the DAG's time zone, so ``30 2 * * *`` in a zone with daylight saving time
fires once a day on wall-clock time: on the spring change at the first moment after the missing
hour, on the autumn change in the first pass of the repeated hour only (:func:`_repeated`).

A tick plans every due DAG, and real installs put hundreds or thousands of them on the same
expression (``0 0 * * *``) at the same last fire: :class:`TickPlanner` plans each distinct
(schedule, time zone, catchup, ``next_run_at``) once per tick, so midnight for 10,000 DAGs costs
one croniter evaluation, not 20,000. It lives for one tick only (``now`` is part of every plan),
so it is a memo, not a cache: nothing in it outlives the tick or needs invalidating.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import TracebackType
from zoneinfo import ZoneInfo

from leoflow.errors import ValidationFailed
from leoflow.model.cron import CRON_ERRORS, cron_expression, next_fire
from leoflow.model.cron import previous_fire as previous_cron_fire
from leoflow.model.spec.dag import DagSpec
from leoflow.model.spec.schedules.forms import decode


@dataclass(frozen=True)
class RunPlan:
    logical_dates: tuple[datetime, ...]
    #: None: the schedule has no slot left (``@once`` ran, or ``end_date`` passed).
    next_run_at: datetime | None
    #: Each run's ``data_interval_start``: the slot before its logical date (``@once``: the date itself).
    interval_starts: tuple[datetime, ...] = ()


def plan_scheduled_runs(schedule: str, timezone: str, *, catchup: bool, next_run_at: datetime,
                        now: datetime, limit: int, end_date: datetime | None = None,
                        deadline: float | None = None) -> RunPlan:
    """The runs to create now and the new ``next_run_at``; nothing if ``next_run_at`` is in the future.

    ``end_date``: no slot after it (and no ``next_run_at`` past it). ``deadline``
    (``starting_deadline_seconds``): slots older than this at ``now`` are skipped, not run late.
    """
    if next_run_at > now:
        return RunPlan((), next_run_at)
    timetable = decode(schedule)
    following: datetime | None
    if timetable.once:
        dates: list[datetime] = [next_run_at]
        following = None
    elif not catchup:
        latest = max(next_run_at, last_fire_at_or_before(schedule, timezone, now))
        dates, following = [latest], next_fire_after(schedule, timezone, latest)
    else:
        dates = []
        current = next_run_at
        while current <= now and len(dates) < limit:
            dates.append(current)
            current = next_fire_after(schedule, timezone, current)
        following = current
    # Each slot's interval starts at the slot before it: in a catch-up, the previous date of the list.
    starts = [dates[0] if timetable.once else previous_fire(schedule, timezone, dates[0]), *dates[:-1]]
    kept = [(d, s) for d, s in zip(dates, starts, strict=True)
            if (end_date is None or d <= end_date)
            and (deadline is None or (now - d).total_seconds() <= deadline)]
    if following is not None and end_date is not None and following > end_date:
        following = None
    return RunPlan(tuple(d for d, _ in kept), following, tuple(s for _, s in kept))


#: What a plan depends on besides the tick's ``now`` and limit: schedule, time zone, catchup,
#: next_run_at, end_date and starting deadline.
PlanKey = tuple[str, str, bool, datetime, datetime | None, float | None]


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

    def plan(self, schedule: str, timezone: str, *, catchup: bool, next_run_at: datetime,
             end_date: datetime | None = None, deadline: float | None = None) -> RunPlan:
        key = (schedule, timezone, catchup, next_run_at, end_date, deadline)
        found = self._plans.get(key)
        if found is None:
            try:
                found = plan_scheduled_runs(schedule, timezone, catchup=catchup, next_run_at=next_run_at,
                                            now=self.now, limit=self.limit, end_date=end_date, deadline=deadline)
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


def stored_bounds(end_date: str | None, deadline: str | None) -> tuple[datetime | None, float | None]:
    """A stored version's ``end_date`` and ``starting_deadline_seconds`` (text, as the due scan reads
    them); a value no apply could have written (a hand edit) raises ValueError, which fails that DAG."""
    end = None if end_date is None else datetime.fromisoformat(end_date)
    if end is not None and end.tzinfo is None:
        raise ValueError(f"stored end_date {end_date!r} has no offset")
    seconds = None if deadline is None else float(deadline)
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"stored starting_deadline_seconds {deadline!r} is not a positive number")
    return end, seconds


def _crons(schedule: str) -> tuple[str, ...]:
    timetable = decode(schedule)
    if timetable.once:
        raise ValidationFailed("schedule", "@once has one slot (its first run), no series of fire times")
    return timetable.crons


def _repeated(expression: str, fire: datetime) -> bool:
    """A fire in the second pass of a wall-clock hour the clocks went back over, of a cron that names
    its hours: ``30 2 * * *`` means once a day, so the second 02:30 of the autumn change is not a
    slot (Vixie cron and Airflow agree; croniter alone fires twice). A cron whose hour is ``*`` fires
    in both passes: ``*/30 * * * *`` means every half hour of real time."""
    if expression.split()[1] == "*":
        return False
    zone = fire.tzinfo
    local = fire.astimezone(UTC).astimezone(zone)
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def _next_cron(expression: str, local: datetime) -> datetime:
    fire = next_fire(expression, local)
    while _repeated(expression, fire):  # at most the fires of one repeated hour
        fire = next_fire(expression, fire)
    return fire


def _previous_cron(expression: str, local: datetime) -> datetime:
    fire = previous_cron_fire(expression, local)
    while _repeated(expression, fire):
        fire = previous_cron_fire(expression, fire)
    return fire


def next_fire_at_or_after(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The first fire time ``>= moment`` (of any of the crons, evaluated in ``timezone``), in UTC."""
    every = decode(schedule).every
    if every is not None:
        return every.at_or_after(moment)
    local = moment.astimezone(ZoneInfo(timezone)) - timedelta(microseconds=1)
    return min(_next_cron(cron_expression(c), local) for c in _crons(schedule)).astimezone(UTC)


def next_fire_after(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The first fire time strictly after ``moment``, in UTC."""
    every = decode(schedule).every
    if every is not None:
        return every.after(moment)
    local = moment.astimezone(ZoneInfo(timezone))
    return min(_next_cron(cron_expression(c), local) for c in _crons(schedule)).astimezone(UTC)


def last_fire_at_or_before(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The latest fire time ``<= moment``, in UTC."""
    every = decode(schedule).every
    if every is not None:
        return every.at_or_before(moment)
    local = moment.astimezone(ZoneInfo(timezone)) + timedelta(microseconds=1)
    return max(_previous_cron(cron_expression(c), local) for c in _crons(schedule)).astimezone(UTC)


def previous_fire(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The latest fire time strictly before ``moment``: where the data interval ending at ``moment`` starts."""
    return last_fire_at_or_before(schedule, timezone, moment - timedelta(microseconds=1))


def first_scheduled_run(spec: DagSpec, now: datetime) -> datetime | None:
    """Where a (re)applied DAG's schedule starts: the first fire at/after ``start_date`` (or now).

    Without catchup the scheduler later skips ahead to the latest due fire time, so a DAG whose
    ``start_date`` lies in the past gets one run for the most recent slot, not a backlog. ``@once``
    starts at ``start_date`` (or now); none starts after ``end_date``.
    """
    if spec.schedule is None:
        return None
    if decode(spec.schedule).once:
        first = spec.start_date or now
    else:
        first = next_fire_at_or_after(spec.schedule, spec.timezone, spec.start_date or now)
    return None if spec.end_date is not None and first > spec.end_date else first
