"""The task state machine and the timetable as pure functions (no database, no sleeping)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leoflow.db.stores.task_instances.transitions import LiveTaskInstance
from leoflow.model.spec.dag import TaskSpec
from leoflow.model.spec.timetable import plan_scheduled_runs
from leoflow.model.tries import StatusUpdate, TryKey
from leoflow.scheduler.transitions import fold_reports, timeout_transition

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TASK = TaskSpec(id="t", image="x", command=("true",), retries=2, retry_delay_seconds=10, timeout_seconds=60)


def row(state: str, try_number: int = 1, max_tries: int = 3) -> LiveTaskInstance:
    return LiveTaskInstance(id=7, run_pk=1, task_id="t", state=state, try_number=try_number, max_tries=max_tries,
                            started_at=None, dag_id="d", run_id="r", version_id=1)


def report(state: str, try_number: int = 1, seconds: float = 0, **kw: object) -> StatusUpdate:
    return StatusUpdate(key=TryKey("d", "r", "t", try_number), state=state,  # type: ignore[arg-type]
                        at=T0 + timedelta(seconds=seconds), **kw)  # type: ignore[arg-type]


def test_running_sets_start_and_timeout_deadline() -> None:
    t = fold_reports(row("queued"), [report("running", seconds=5)], TASK, max_retry_delay=3600)
    assert t is not None and (t.expected, t.new_state) == ("queued", "running")
    # The deadline is a duration: the database adds it to its own clock (no leader's wall clock).
    assert t.started_at == T0 + timedelta(seconds=5) and t.timeout_after == 60


def test_running_then_success_in_one_batch_is_one_cas_from_queued() -> None:
    t = fold_reports(row("queued"), [report("running", seconds=1), report("success", seconds=2)], TASK,
                     max_retry_delay=3600)
    assert t is not None and (t.expected, t.new_state) == ("queued", "success")
    assert (t.started_at, t.ended_at, t.timeout_after) == (T0 + timedelta(seconds=1), T0 + timedelta(seconds=2), None)


@pytest.mark.parametrize(("try_number", "expected_state", "delay"), [(1, "up_for_retry", 10), (2, "up_for_retry", 20),
                                                                     (3, "failed", None)])
def test_failure_retries_with_doubling_delay_until_tries_run_out(try_number: int, expected_state: str,
                                                                 delay: float | None) -> None:
    t = fold_reports(row("running", try_number), [report("failed", try_number, exit_code=2)], TASK,
                     max_retry_delay=3600)
    assert t is not None and t.new_state == expected_state and t.reason == "exit code 2"
    assert t.retry_after == delay


def test_global_cap_limits_the_retry_delay() -> None:
    t = fold_reports(row("running", 2), [report("failed", 2)], TASK, max_retry_delay=15)
    assert t is not None and t.retry_after == 15


def test_reports_of_an_older_try_and_duplicates_change_nothing() -> None:
    assert fold_reports(row("queued", 2), [report("failed", 1)], TASK, max_retry_delay=3600) is None
    assert fold_reports(row("success"), [report("success")], TASK, max_retry_delay=3600) is None
    assert fold_reports(row("running"), [report("running")], TASK, max_retry_delay=3600) is None
    assert fold_reports(row("cancelled"), [report("failed")], TASK, max_retry_delay=3600) is None
    # A late "running" after the end never reopens the task.
    t = fold_reports(row("running"), [report("success", seconds=2), report("running", seconds=3)], TASK,
                     max_retry_delay=3600)
    assert t is not None and t.new_state == "success"


def test_timeout_fails_or_retries_a_running_task_only() -> None:
    t = timeout_transition(row("running", 1), TASK, now=T0, max_retry_delay=3600)
    assert t is not None and t.new_state == "up_for_retry" and t.reason == "timed out after 60s"
    t = timeout_transition(row("running", 3), TASK, now=T0, max_retry_delay=3600)
    assert t is not None and t.new_state == "failed"
    assert timeout_transition(row("queued"), TASK, now=T0, max_retry_delay=3600) is None


# --------------------------------------------------------------------------- timetable

def test_no_catchup_creates_only_the_latest_due_run() -> None:
    plan = plan_scheduled_runs("@hourly", "UTC", catchup=False, next_run_at=T0, now=T0 + timedelta(hours=5, minutes=3),
                               limit=50)
    assert plan.logical_dates == (T0 + timedelta(hours=5),)
    assert plan.next_run_at == T0 + timedelta(hours=6)


def test_catchup_creates_every_missed_run_in_bounded_batches() -> None:
    now = T0 + timedelta(hours=5, minutes=3)
    plan = plan_scheduled_runs("@hourly", "UTC", catchup=True, next_run_at=T0, now=now, limit=4)
    assert plan.logical_dates == tuple(T0 + timedelta(hours=h) for h in range(4))
    rest = plan_scheduled_runs("@hourly", "UTC", catchup=True, next_run_at=plan.next_run_at, now=now, limit=4)
    assert rest.logical_dates == (T0 + timedelta(hours=4), T0 + timedelta(hours=5))
    assert rest.next_run_at == T0 + timedelta(hours=6)


def test_nothing_is_due_before_next_run_at() -> None:
    plan = plan_scheduled_runs("@daily", "UTC", catchup=True, next_run_at=T0, now=T0 - timedelta(seconds=1), limit=5)
    assert plan.logical_dates == () and plan.next_run_at == T0


def test_daily_schedule_in_a_dst_timezone_keeps_local_wall_time() -> None:
    start = datetime(2026, 3, 28, 2, tzinfo=UTC)  # 03:00 Berlin (CET)
    now = datetime(2026, 3, 30, 12, tzinfo=UTC)
    plan = plan_scheduled_runs("0 3 * * *", "Europe/Berlin", catchup=True, next_run_at=start, now=now, limit=10)
    # After the switch to CEST on 29 March, 03:00 local is 01:00 UTC.
    assert plan.logical_dates == (start, datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 3, 30, 1, tzinfo=UTC))
