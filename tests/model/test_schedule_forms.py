"""Schedule forms and data intervals as pure functions: parsing, canonical form, planning, poison.

The scheduler's side (runs created on PostgreSQL) is tests/scheduler/test_schedule_forms.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from leoflow.errors import ValidationFailed
from leoflow.model.run_request import parse_run_request
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.schedules.forms import decode, duration_text
from leoflow.model.spec.timetable import (
    TickPlanner,
    first_scheduled_run,
    next_fire_after,
    plan_scheduled_runs,
    previous_fire,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def doc(**fields: Any) -> dict[str, Any]:
    return {"dag_id": "forms", "start_date": T0.isoformat(), "tasks": [{"id": "t", "kind": "empty"}], **fields}


def problem(**fields: Any) -> tuple[str, str]:
    with pytest.raises(ValidationFailed) as caught:
        parse_dag_spec(doc(**fields))
    return caught.value.path, str(caught.value)


@pytest.mark.parametrize("schedule", [["0 6 * * *", "0 18 * * 1-5"], "@once", {"every": "15m"}, {"every": 5400},
                                      {"cron": "@daily", "datasets": {"any": ["s3://b/orders"]}},
                                      {"cron": "0 6 * * *", "datasets": {"all": ["s3://b/orders"]}, "combine": "and"}])
def test_every_form_survives_its_canonical_form(schedule: Any) -> None:
    """The scheduler re-parses the stored canonical form: it must give the same spec and hash."""
    spec = parse_dag_spec(doc(schedule=schedule, end_date="2027-01-01", overlap="skip",
                              starting_deadline_seconds=600))
    again = parse_dag_spec(spec.to_canonical(), stored=True)
    assert again == spec and again.spec_hash() == spec.spec_hash()


def test_fields_left_unset_stay_out_of_the_canonical_form() -> None:
    """A spec written before these fields keeps its canonical form, so its hash (and version) stay."""
    canonical = parse_dag_spec(doc(schedule="@daily")).to_canonical()
    assert canonical["schedule"] == "@daily"
    assert not {"end_date", "overlap", "starting_deadline_seconds"} & set(canonical)
    assert "overlap" not in parse_dag_spec(doc(schedule="@daily", overlap="allow")).to_canonical()


def test_a_list_of_crons_fires_at_the_union_of_their_times() -> None:
    spec = parse_dag_spec(doc(schedule=["0 6 * * *", "0 18 * * 1-5"]))
    assert spec.schedule == "0 6 * * *; 0 18 * * 1-5"
    friday_6 = datetime(2026, 1, 2, 6, tzinfo=UTC)
    assert next_fire_after(spec.schedule, "UTC", friday_6) == datetime(2026, 1, 2, 18, tzinfo=UTC)
    # Saturday: no 18:00 slot, so from Friday 18:00 the next is Saturday 06:00, then Sunday 06:00.
    saturday_6 = next_fire_after(spec.schedule, "UTC", datetime(2026, 1, 2, 18, tzinfo=UTC))
    assert saturday_6 == datetime(2026, 1, 3, 6, tzinfo=UTC)
    assert next_fire_after(spec.schedule, "UTC", saturday_6) == datetime(2026, 1, 4, 6, tzinfo=UTC)
    # Monday 06:00's interval starts at Sunday 06:00 (no weekend evening slot).
    assert previous_fire(spec.schedule, "UTC", datetime(2026, 1, 5, 6, tzinfo=UTC)) == datetime(2026, 1, 4, 6,
                                                                                                tzinfo=UTC)


def test_a_catch_up_gives_each_run_the_interval_since_the_slot_before() -> None:
    plan = plan_scheduled_runs("@hourly", "UTC", catchup=True, next_run_at=T0, now=T0 + timedelta(hours=2, minutes=1),
                               limit=50)
    assert plan.logical_dates == (T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    assert plan.interval_starts == (T0 - timedelta(hours=1), T0, T0 + timedelta(hours=1))
    assert plan.next_run_at == T0 + timedelta(hours=3)


def test_without_catch_up_the_latest_slot_still_covers_one_interval() -> None:
    plan = plan_scheduled_runs("@daily", "UTC", catchup=False, next_run_at=T0, now=T0 + timedelta(days=3, hours=1),
                               limit=50)
    assert plan.logical_dates == (T0 + timedelta(days=3),)
    assert plan.interval_starts == (T0 + timedelta(days=2),)


def test_every_is_anchored_at_start_date_not_at_the_apply() -> None:
    spec = parse_dag_spec(doc(schedule={"every": "1h30m"}, start_date="2026-01-01T00:10:00Z"))
    assert spec.to_canonical()["schedule"] == {"every": "1h30m"}
    now = datetime(2026, 1, 1, 5, 0, tzinfo=UTC)
    first = first_scheduled_run(spec, now)
    assert first == datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    assert spec.schedule is not None
    plan = plan_scheduled_runs(spec.schedule, "UTC", catchup=False, next_run_at=first, now=now, limit=50)
    assert plan.logical_dates == (datetime(2026, 1, 1, 4, 40, tzinfo=UTC),)
    assert plan.interval_starts == (datetime(2026, 1, 1, 3, 10, tzinfo=UTC),)
    assert plan.next_run_at == datetime(2026, 1, 1, 6, 10, tzinfo=UTC)
    # Without a start_date the grid is anchored at the epoch: every 15m fires on the quarter hours.
    epoch = parse_dag_spec({**doc(schedule={"every": "15m"}), "start_date": None})
    assert first_scheduled_run(epoch, datetime(2026, 3, 3, 7, 1, tzinfo=UTC)) == datetime(2026, 3, 3, 7, 15,
                                                                                           tzinfo=UTC)


def test_once_runs_once_and_then_has_no_next_slot() -> None:
    spec = parse_dag_spec(doc(schedule="@once"))
    assert first_scheduled_run(spec, T0 + timedelta(days=9)) == T0
    plan = plan_scheduled_runs("@once", "UTC", catchup=True, next_run_at=T0, now=T0 + timedelta(days=9), limit=50)
    assert plan.logical_dates == (T0,) and plan.interval_starts == (T0,) and plan.next_run_at is None
    without_start = parse_dag_spec({**doc(schedule="@once"), "start_date": None})
    assert first_scheduled_run(without_start, T0 + timedelta(days=9)) == T0 + timedelta(days=9)


def test_end_date_stops_the_schedule() -> None:
    end = T0 + timedelta(hours=2)
    plan = plan_scheduled_runs("@hourly", "UTC", catchup=True, next_run_at=T0, now=T0 + timedelta(hours=5),
                               limit=50, end_date=end)
    assert plan.logical_dates == (T0, T0 + timedelta(hours=1), end) and plan.next_run_at is None
    late = parse_dag_spec(doc(schedule="@daily", start_date="2026-01-01T01:00:00Z", end_date="2026-01-01T12:00:00Z"))
    assert first_scheduled_run(late, T0) is None  # its only day's midnight falls outside [start, end]


def test_starting_deadline_skips_slots_the_leader_reaches_too_late() -> None:
    now = T0 + timedelta(hours=3, minutes=20)
    plan = plan_scheduled_runs("@hourly", "UTC", catchup=True, next_run_at=T0, now=now, limit=50, deadline=3600)
    assert plan.logical_dates == (T0 + timedelta(hours=3),)  # 00:00-02:00 were missed by more than an hour
    assert plan.next_run_at == T0 + timedelta(hours=4)
    stale = plan_scheduled_runs("@daily", "UTC", catchup=False, next_run_at=T0, now=T0 + timedelta(minutes=11),
                                limit=50, deadline=600)
    assert stale.logical_dates == () and stale.next_run_at == T0 + timedelta(days=1)


def test_a_dst_zone_fires_on_wall_clock_time_and_the_interval_follows() -> None:
    """Berlin, 2026-03-29: 02:00 local does not exist; 03:30 local is 01:30Z (not 02:30Z) from that day."""
    before = datetime(2026, 3, 28, 2, 30, tzinfo=UTC)  # 03:30 CET
    after = next_fire_after("30 3 * * *", "Europe/Berlin", before)
    assert after == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)  # 03:30 CEST
    assert previous_fire("30 3 * * *", "Europe/Berlin", after) == before  # a 23-hour interval, as the wall clock


def test_the_autumn_change_does_not_run_a_daily_cron_twice() -> None:
    """Berlin, 2026-10-25: 02:30 local happens twice (00:30Z in summer time, 01:30Z in winter time).
    ``30 2 * * *`` runs once that day (croniter alone fires in both passes); a cron with ``*`` hours
    runs on real time, in both."""
    first = next_fire_after("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 24, 12, tzinfo=UTC))
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert next_fire_after("30 2 * * *", "Europe/Berlin", first) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)
    assert previous_fire("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 26, 1, 30, tzinfo=UTC)) == first
    plan = plan_scheduled_runs("30 2 * * *", "Europe/Berlin", catchup=True, next_run_at=first,
                               now=datetime(2026, 10, 26, 2, tzinfo=UTC), limit=50)
    assert plan.logical_dates == (first, datetime(2026, 10, 26, 1, 30, tzinfo=UTC))
    half_hours = [datetime(2026, 10, 25, 0, 0, tzinfo=UTC)]
    for _ in range(4):
        half_hours.append(next_fire_after("*/30 * * * *", "Europe/Berlin", half_hours[-1]))
    assert [h.minute + 60 * h.hour for h in half_hours] == [0, 30, 60, 90, 120]


def test_the_tick_planner_keys_on_end_date_and_deadline_too() -> None:
    planner = TickPlanner(T0 + timedelta(hours=2), 50)
    plain = planner.plan("@hourly", "UTC", catchup=True, next_run_at=T0)
    ended = planner.plan("@hourly", "UTC", catchup=True, next_run_at=T0, end_date=T0)
    assert len(plain.logical_dates) == 3 and ended.logical_dates == (T0,) and planner.distinct == 2


def test_duration_text_is_the_canonical_spelling() -> None:
    assert [duration_text(s) for s in (60, 900, 3600, 5400, 86_400 + 61)] == ["1m", "15m", "1h", "1h30m", "1d1m1s"]
    assert decode("@every 900s@2026-01-01T00:00:00+00:00").every is not None


# --------------------------------------------------------------------------- poison

@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"schedule": [f"{m} * * * *" for m in range(50)]}, "schedule", "50 cron expressions"),
    ({"schedule": []}, "schedule", "0 cron expressions"),
    ({"schedule": ["0 6 * * *", "0  6 * * *"]}, "schedule[1]", "duplicate"),
    ({"schedule": ["0 6 * * *", "@once"]}, "schedule[1]", "@once"),
    ({"schedule": ["0 6 * * *", None]}, "schedule[1]", "null"),
    ({"schedule": ["0 6 * * *", "61 * * * *"]}, "schedule[1]", "not a valid cron"),
    ({"schedule": ["0 0 31 2 *"]}, "schedule[0]", "never fires"),
    ({"schedule": ["0 6 * * *", 5]}, "schedule[1]", "integer"),
    ({"schedule": {"every": "0m"}}, "schedule.every", "between 60"),
    ({"schedule": {"every": 10}}, "schedule.every", "between 60"),
    ({"schedule": {"every": "15x"}}, "schedule.every", "not a duration"),
    ({"schedule": {"every": ""}}, "schedule.every", "not a duration"),
    ({"schedule": {"every": "-5m"}}, "schedule.every", "not a duration"),
    ({"schedule": {"every": "400d"}}, "schedule.every", "between 60"),
    ({"schedule": {"every": "9" * 5000 + "s"}}, "schedule.every", "not a duration"),
    ({"schedule": {"every": True}}, "schedule.every", "boolean"),
    ({"schedule": {"every": "15m", "at": 1}}, "schedule.at", "unknown field"),
    ({"schedule": {"cron": "@daily"}}, "schedule.datasets", "required"),
    ({"schedule": {"cron": ["@daily"], "datasets": {"any": ["s3://x"]}}}, "schedule.cron", "list"),
    ({"schedule": {"cron": "@daily", "datasets": {"any": []}}}, "schedule.datasets.any", "URIs"),
    ({"end_date": "2025-12-31T00:00:00Z"}, "end_date", "after start_date"),
    ({"end_date": "2026-01-01T00:00:00Z"}, "end_date", "after start_date"),
    ({"end_date": "yesterday"}, "end_date", "ISO 8601"),
    ({"end_date": "9999-12-31T23:00:00-05:00"}, "end_date", "2200"),
    ({"overlap": "forbid"}, "overlap", "allow, skip, replace"),
    ({"overlap": 1}, "overlap", "integer"),
    ({"overlap": "skip", "catchup": True}, "overlap", "catchup"),
    ({"starting_deadline_seconds": 0}, "starting_deadline_seconds", "greater than"),
    ({"starting_deadline_seconds": -5}, "starting_deadline_seconds", ""),
    ({"starting_deadline_seconds": 1e308}, "starting_deadline_seconds", "at most"),
    ({"starting_deadline_seconds": "10"}, "starting_deadline_seconds", "number"),
])
def test_bad_schedule_fields_are_refused_naming_the_field(fields: dict[str, Any], field: str, words: str) -> None:
    where, message = problem(**fields)
    assert where == field, message
    assert words in message, message


@pytest.mark.parametrize(("value", "words"), [
    ("2026-01-01T00:00:00", "no offset"),
    ("tomorrow", "not an ISO 8601"),
    ("", "not an ISO 8601"),
    ("9" * 10_000, "not an ISO 8601"),
    (1767225600, "string"),
    ("1969-12-31T23:59:59Z", "1970"),
    ("9999-12-31T23:00:00-05:00", "2200"),
])
def test_a_bad_logical_date_on_a_trigger_names_the_field(value: object, words: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_run_request({"logical_date": value})
    assert caught.value.path == "logical_date" and words in str(caught.value), str(caught.value)


def test_a_logical_date_with_an_offset_is_read_in_utc() -> None:
    wanted = parse_run_request({"logical_date": "2026-05-01T02:00:00+02:00"})
    assert wanted.logical_date == datetime(2026, 5, 1, tzinfo=UTC)
    assert parse_run_request({"logical_date": "2026-05-01T00:00:00Z"}).logical_date == wanted.logical_date


def test_a_cron_and_datasets_plans_its_cron_and_keeps_or_specs_as_they_were() -> None:
    """``combine: and`` is stored as ``@and <cron>`` (the planner reads the cron, the leader makes the slot
    pending); ``combine: or`` is the form without it, so its hash is what it was."""
    data = {"all": ["s3://b/orders"]}
    both = parse_dag_spec(doc(schedule={"cron": "0 6 * * *", "datasets": data, "combine": "and"}))
    assert both.schedule == "@and 0 6 * * *" and decode(both.schedule).awaits_datasets
    assert both.dataset_schedule is not None and both.dataset_schedule.uris == ("s3://b/orders",)
    six = datetime(2026, 1, 2, 6, tzinfo=UTC)
    assert next_fire_after(both.schedule, "UTC", six) == six + timedelta(days=1)
    assert previous_fire(both.schedule, "UTC", six) == six - timedelta(days=1)
    either = parse_dag_spec(doc(schedule={"cron": "0 6 * * *", "datasets": data}))
    explicit = parse_dag_spec(doc(schedule={"cron": "0 6 * * *", "datasets": data, "combine": "or"}))
    assert explicit.spec_hash() == either.spec_hash() and either.schedule == "0 6 * * *"
    assert both.spec_hash() != either.spec_hash()


@pytest.mark.parametrize(("fields", "path"), [
    ({"schedule": {"cron": "@daily", "datasets": {"all": ["u"]}, "combine": "AND"}}, "schedule.combine"),
    ({"schedule": {"cron": "@daily", "datasets": {"all": ["u"]}, "combine": True}}, "schedule.combine"),
    ({"schedule": {"datasets": {"all": ["u"]}, "combine": "and"}}, "schedule.combine"),
    ({"schedule": {"cron": "@daily", "datasets": {"all": ["u"]}, "combine": "and"}, "catchup": True}, "catchup"),
    ({"schedule": {"cron": "@daily", "datasets": {"all": ["u"]}, "combine": "and"}, "overlap": "replace"}, "overlap"),
])
def test_a_cron_and_datasets_refuses_what_it_cannot_keep(fields: dict[str, Any], path: str) -> None:
    assert problem(**fields)[0] == path
