"""The schedule forms of a DAG spec and the one string the leader plans from.

What users write (``schedule:``), beside a single cron or preset and ``{datasets: …}``:

- a list of crons, ``["0 6 * * *", "0 18 * * 1-5"]``: one DAG, several schedules; a run per
  distinct fire time of any of them (two crons firing at the same minute make one run);
- ``"@once"``: one run, at ``start_date`` (or when the DAG is first applied), then never again —
  re-applying the same spec does not run it again, changing its schedule fields does;
- ``{every: 15m}``: a fixed interval anchored at ``start_date`` (at 1970-01-01T00:00Z without
  one, so ``every: 15m`` fires at :00, :15, :30, :45), not at the wall clock of the apply: the
  slots, and so the run ids, are a pure function of the spec, and re-applying it never shifts them;
- ``{cron: "0 6 * * *", datasets: {any: […]}}``: the cron's runs *and* a run whenever the dataset
  condition is met — Airflow's ``DatasetOrTimeSchedule`` (``combine: or``, the default);
- ``{cron: "0 6 * * *", datasets: {all: […]}, combine: and}``: "the daily run, but only once orders
  were refreshed". Each cron slot becomes the DAG's *pending slot*; its run starts when the dataset
  condition is met by events since the DAG's last run (events before the slot count: data that
  landed at 05:50 is the 06:00 run's data). The run is a scheduled run of the slot (its run id,
  logical date and data interval are the slot's) that also carries ``triggering_events``. At most
  one slot is pending: a newer slot replaces one still waiting (the older is logged as skipped, as
  ``catchup: false`` skips missed slots), and ``starting_deadline_seconds`` drops a slot that waited
  longer than that. ``catchup: true`` and ``overlap: replace`` are refused with it: a backlog of
  slots is what "at most one pending" rules out, and replacing a run at the moment its data arrives
  would cancel the run the previous data started. Dagster writes this ``on_cron & any_deps_updated``;
  Airflow has no such form (its users write a sensor as the first task, which holds a worker slot).

The leader does not re-read the spec to plan: ``dags.schedule`` holds an encoding of the time part
(:func:`encode`), a plain cron as itself (so every existing DAG row and spec hash stays as it
was), a list as ``cron; cron``, an interval as ``@every <seconds>s@<anchor ISO>``, ``@once``, and a
cron whose slots wait for datasets as ``@and <cron>`` (the planner reads the cron; the leader makes
the slot pending instead of a run).
:func:`decode` is the inverse, memoised: 10,000 DAGs on one schedule decode it once.

Beside the schedule, three DAG fields shape scheduled runs (absent from the canonical form when
unset, so existing spec hashes do not move): ``end_date`` (no slot after it), ``overlap`` (what a
due slot does while an earlier run of the DAG is still queued or running: ``allow`` it,
``skip`` the slot, or ``replace`` — cancel the earlier runs through the cancel path and run; Argo's
``concurrencyPolicy`` Allow/Forbid/Replace) and ``starting_deadline_seconds`` (a slot the leader
reaches later than this after its time is skipped, not run late; Argo's ``startingDeadlineSeconds``).
``overlap: skip|replace`` with ``catchup: true`` is refused: catch-up creates a backlog to run all
of it, which is exactly what those two say never to do (``max_active_runs: 1`` runs a backlog in
order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Literal

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_count, shown, type_name, within
from leoflow.model.fields import schedule_field, start_date_field

ONCE = "@once"
EVERY_PREFIX = "@every "
#: ``dags.schedule`` of a cron whose slots wait for the DAG's datasets (``combine: and``).
AND_PREFIX = "@and "
Combine = Literal["or", "and"]
COMBINES: tuple[Combine, ...] = ("or", "and")
LIST_SEPARATOR = "; "
#: Where ``every:`` is anchored when the DAG has no ``start_date``.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Overlap = Literal["allow", "skip", "replace"]
OVERLAPS: tuple[Overlap, ...] = ("allow", "skip", "replace")

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


@dataclass(frozen=True)
class Every:
    """A fixed interval on a grid: ``anchor + n * step`` for every integer ``n``."""

    seconds: int
    anchor: datetime

    @property
    def step(self) -> timedelta:
        return timedelta(seconds=self.seconds)

    def at_or_before(self, moment: datetime) -> datetime:
        return self.anchor + ((moment - self.anchor) // self.step) * self.step

    def after(self, moment: datetime) -> datetime:
        return self.at_or_before(moment) + self.step

    def at_or_after(self, moment: datetime) -> datetime:
        before = self.at_or_before(moment)
        return before if before == moment else before + self.step


@dataclass(frozen=True)
class Timetable:
    """The time part of a schedule, decoded from ``dags.schedule``: crons, an interval or once."""

    crons: tuple[str, ...] = ()
    every: Every | None = None
    once: bool = False
    #: Each slot waits for the DAG's dataset condition (``combine: and``) instead of running at once.
    awaits_datasets: bool = False


@lru_cache(maxsize=4096)
def decode(schedule: str) -> Timetable:
    """The timetable ``dags.schedule`` encodes (:func:`encode`); a plain cron is one cron."""
    if schedule == ONCE:
        return Timetable(once=True)
    if schedule.startswith(AND_PREFIX):
        return Timetable(crons=(schedule.removeprefix(AND_PREFIX),), awaits_datasets=True)
    if schedule.startswith(EVERY_PREFIX):
        seconds, _, anchor = schedule.removeprefix(EVERY_PREFIX).partition("@")
        return Timetable(every=Every(int(seconds.removesuffix("s")), datetime.fromisoformat(anchor)))
    return Timetable(crons=tuple(schedule.split(LIST_SEPARATOR)))


def encode(timetable: Timetable) -> str:
    if timetable.once:
        return ONCE
    if timetable.every is not None:
        return f"{EVERY_PREFIX}{timetable.every.seconds}s@{timetable.every.anchor.astimezone(UTC).isoformat()}"
    if timetable.awaits_datasets:
        return AND_PREFIX + timetable.crons[0]
    return LIST_SEPARATOR.join(timetable.crons)


def combine_field(value: object, path: str) -> Combine:
    """``schedule.combine`` of a cron with datasets: ``or`` (either starts a run, the default) or ``and``."""
    if value is None or value == "or":
        return "or"
    if value == "and":
        return "and"
    got = shown(value) if isinstance(value, str) else type_name(value)
    raise ValidationFailed(path, f"must be and or or, got {got}")


def check_awaiting_slot(schedule: str | None, catchup: bool, overlap: str) -> None:
    """``combine: and`` keeps at most one pending slot: no catch-up backlog, no ``overlap: replace``."""
    if schedule is None or not decode(schedule).awaits_datasets:
        return
    if catchup:
        raise ValidationFailed("catchup", "a cron that waits for datasets (combine: and) keeps at most one "
                               "pending slot, so it cannot catch up a backlog of them; use catchup: false")
    if overlap == "replace":
        raise ValidationFailed("overlap", "replace would cancel a run when the next slot's data "
                               "arrives; with combine: and use allow or skip")


def duration_text(seconds: int) -> str:
    """``5400`` -> ``1h30m``: the canonical spelling of ``every:`` (what the stored spec keeps)."""
    parts: list[str] = []
    for unit, size in _UNITS:
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"


def duration_seconds(value: object, path: str) -> int:
    """``15m``, ``1h30m``, ``2d`` or a number of seconds, held to :data:`~leoflow.model.limits.SCHEDULE_EVERY`."""
    if isinstance(value, str):
        match = _DURATION.match(value.strip()) if len(value) <= 40 else None
        if not value.strip() or match is None:
            raise ValidationFailed(path, f"{shown(value)} is not a duration like 15m, 1h30m, 2d or 90s")
        total = sum(int(n) * size for n, (_, size) in zip(match.groups(), _UNITS, strict=True) if n)
        return int(within(total, path, limits.SCHEDULE_EVERY))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(within(value, path, limits.SCHEDULE_EVERY))
    raise ValidationFailed(path, f"must be a duration like 15m or a number of seconds, got {type_name(value)}")


@dataclass(frozen=True)
class ScheduleForm:
    """A time schedule as written: what ``dags.schedule`` gets and what the canonical form keeps."""

    timetable: Timetable
    #: The canonical ``schedule:`` value (a string, a list, or ``{every: …}``; a cron+datasets
    #: mapping is built by the DAG spec, which holds the condition).
    canonical: Any

    @property
    def encoded(self) -> str:
        return encode(self.timetable)


def is_time_mapping(value: object) -> bool:
    """A mapping ``schedule:`` that is a time form (``every``, or ``cron`` with datasets), not datasets only."""
    return isinstance(value, dict) and ("every" in value or "cron" in value)


def parse_time_schedule(value: object, path: str, start_date: datetime | None) -> ScheduleForm | None:
    """A list of crons, ``@once``, ``{every: D}``, or (None) a plain cron/preset/null left to ``schedule_field``."""
    if value == ONCE:
        return ScheduleForm(Timetable(once=True), ONCE)
    if isinstance(value, list):
        check_count(len(value), path, limits.SCHEDULE_CRONS)
        crons: dict[str, int] = {}
        for i, item in enumerate(value):
            if item == ONCE:
                raise ValidationFailed(f"{path}[{i}]", "@once cannot be one of several schedules")
            cron = schedule_field(item, f"{path}[{i}]")
            if cron is None:
                raise ValidationFailed(f"{path}[{i}]", "must be a cron expression or a preset, got null")
            if cron in crons:
                raise ValidationFailed(f"{path}[{i}]", f"duplicate schedule {shown(cron)} (also {path}[{crons[cron]}])")
            crons[cron] = i
        timetable = Timetable(crons=tuple(crons))
        return ScheduleForm(timetable, list(timetable.crons))
    if isinstance(value, dict) and "every" in value:
        unknown = [k for k in value if k != "every"]
        if unknown:
            raise ValidationFailed(f"{path}.{unknown[0]}", "unknown field (an interval schedule takes every only)")
        seconds = duration_seconds(value["every"], f"{path}.every")
        return ScheduleForm(Timetable(every=Every(seconds, (start_date or EPOCH).astimezone(UTC))),
                            {"every": duration_text(seconds)})
    return None


def end_date_field(value: object, timezone: str, start_date: datetime | None) -> datetime | None:
    """``end_date``: like ``start_date`` (no offset: the DAG's zone), and after it."""
    end = start_date_field(value, "end_date", timezone)
    if end is not None and start_date is not None and end <= start_date:
        raise ValidationFailed("end_date", f"must be after start_date ({start_date.isoformat()}), "
                               f"got {end.isoformat()}")
    return end


def overlap_field(value: object, catchup: bool) -> Overlap:
    if value is None:
        return "allow"
    if value not in OVERLAPS:
        raise ValidationFailed("overlap", f"must be one of {', '.join(OVERLAPS)}, got "
                               f"{shown(value) if isinstance(value, str) else type_name(value)}")
    overlap: Overlap = "skip" if value == "skip" else "replace" if value == "replace" else "allow"
    if overlap != "allow" and catchup:
        raise ValidationFailed("overlap", f"overlap: {overlap} never runs two runs at once, but catchup: true "
                               "asks for a backlog of them (use max_active_runs: 1 to run a backlog in order)")
    return overlap


def starting_deadline_field(value: object) -> float | None:
    return None if value is None else within(value, "starting_deadline_seconds", limits.STARTING_DEADLINE)
