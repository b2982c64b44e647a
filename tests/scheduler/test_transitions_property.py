"""Property tests of the task state machine (issue 16): any sequence of executor reports, any spec.

Invariants, for every generated task instance, task spec and batch of reports:

- a terminal task instance is never moved (success, failed, upstream_failed, cancelled);
- a transition names the state and try it expects (the CAS), and never another try: try numbers
  are only ever raised by queueing, never by a report;
- reports move a task only forward along the drawn edges (queued → running → success/failed/
  up_for_retry/skipped, the last only for a failure with an exit code of ``skip_on_exit_code``,
  never retried); reports about another try change nothing;
- folding never raises, whatever the timeout: deadlines are durations the database turns into
  instants (a timeout it cannot hold fails only its task: tests/scheduler/test_containment.py);
- over many batches, applied with the scheduler's own rules (CAS, retries queued again with the
  next try number), the try number never goes backwards, and within a batch a late ``running``
  never reopens a try that ended (the database then keeps ended tries as they are).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from leoflow.db.stores.task_instances.transitions import LiveTaskInstance
from leoflow.model.spec.dag import TaskSpec
from leoflow.model.states import TERMINAL_TASK_STATES, TaskState
from leoflow.model.tries import StatusUpdate, TryKey, TryState
from leoflow.scheduler.transitions import (
    TryFacts,
    fold_reports,
    fold_try_facts,
    skipped_by_exit_code,
    timeout_transition,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STATES: tuple[TaskState, ...] = ("pending", "queued", "running", "up_for_retry", "success", "failed",
                                 "upstream_failed", "cancelled")
REPORTED: tuple[TryState, ...] = ("running", "success", "failed")  # never "skipped": the leader decides it
#: Where a report may take a task instance from each state.
FORWARD = {"queued": {"running", "success", "failed", "up_for_retry", "skipped"},
           "running": {"success", "failed", "up_for_retry", "skipped"}}

seconds = st.one_of(st.none(), st.floats(min_value=0.001, max_value=1e300, allow_nan=False),
                    st.integers(min_value=1, max_value=10**12).map(float))
tasks = st.builds(TaskSpec, id=st.just("t"), image=st.just("busybox"), command=st.just(("true",)),
                  retries=st.integers(0, 5), retry_delay_seconds=st.floats(0, 1e6, allow_nan=False),
                  max_retry_delay_seconds=st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False)),
                  timeout_seconds=seconds,
                  skip_on_exit_code=st.lists(st.integers(0, 3), max_size=3, unique=True).map(tuple))
rows = st.builds(LiveTaskInstance, id=st.just(1), run_pk=st.just(1), task_id=st.just("t"),
                 state=st.sampled_from(STATES), try_number=st.integers(0, 6), max_tries=st.integers(1, 6),
                 dag_id=st.just("d"), run_id=st.just("r"), version_id=st.just(1),
                 started_at=st.one_of(st.none(), st.just(T0)))


@st.composite
def reports(draw: st.DrawFn, around: int) -> list[StatusUpdate]:
    """Reports about tries near ``around`` (earlier, current, later), at any time, with any text."""
    return draw(st.lists(st.builds(
        StatusUpdate,
        key=st.integers(max(0, around - 1), around + 1).map(lambda n: TryKey("d", "r", "t", n)),
        state=st.sampled_from(REPORTED),
        at=st.integers(0, 10**7).map(lambda s: T0 + timedelta(seconds=s)),
        exit_code=st.one_of(st.none(), st.integers(-255, 255)),
        reason=st.one_of(st.none(), st.text(max_size=8)),
        executor_ref=st.none()), max_size=6))


@settings(deadline=None)
@given(data=st.data(), row=rows, task=st.one_of(st.none(), tasks))
def test_reports_never_move_a_terminal_task_nor_another_try(data: st.DataObject, row: LiveTaskInstance,
                                                            task: TaskSpec | None) -> None:
    drawn = data.draw(reports(row.try_number))
    codes = sorted({u.exit_code for u in drawn if u.exit_code is not None and 0 <= u.exit_code <= 255})
    if task is not None and codes:  # some of the batch's own exit codes, so that skips are drawn too
        task = replace(task, skip_on_exit_code=tuple(data.draw(st.lists(st.sampled_from(codes), unique=True))))
    # As the leader applies them: a failure with a listed exit code is a skip.
    batch = [skipped_by_exit_code(u, task) for u in drawn]
    t = fold_reports(row, batch, task, max_retry_delay=3600.0)
    if t is None:
        return
    assert row.state not in TERMINAL_TASK_STATES
    assert (t.ti_id, t.expected, t.try_number) == (row.id, row.state, row.try_number)
    assert t.new_state in FORWARD[row.state]
    assert any(u.key.try_number == row.try_number for u in batch)
    if t.new_state == "skipped":  # only a listed, non-zero exit code of this try's failure skips
        assert task is not None and any(
            u.key.try_number == row.try_number and u.exit_code in task.skip_on_exit_code and u.exit_code
            for u in batch)
        assert t.retry_after is None
    if t.new_state == "running":  # the deadline is the task's own duration, never an instant
        assert t.timeout_after == (task.timeout_seconds if task is not None else None)


@settings(deadline=None)
@given(row=rows, task=st.one_of(st.none(), tasks), later=st.integers(0, 10**6))
def test_a_timeout_only_ends_a_running_task_of_its_own_try(row: LiveTaskInstance, task: TaskSpec | None,
                                                           later: int) -> None:
    t = timeout_transition(row, task, now=T0 + timedelta(seconds=later), max_retry_delay=3600.0)
    if row.state != "running":
        assert t is None
        return
    assert t is not None and (t.expected, t.try_number) == ("running", row.try_number)
    assert t.new_state in ("failed", "up_for_retry")


@settings(deadline=None)
@given(data=st.data(), task=tasks, batches=st.integers(1, 6))
def test_over_many_batches_try_numbers_never_go_backwards_and_ended_tries_never_run_again(
        data: st.DataObject, task: TaskSpec, batches: int) -> None:
    row = LiveTaskInstance(id=1, run_pk=1, task_id="t", state="queued", try_number=1, max_tries=task.max_tries,
                           dag_id="d", run_id="r", version_id=1)
    for _ in range(batches):
        batch = [skipped_by_exit_code(u, task) for u in data.draw(reports(row.try_number))]
        facts: dict[tuple[int, int], TryFacts] = {}
        ended: set[int] = set()
        for update in batch:
            fold_try_facts(facts, row.id, update)
            f = facts[(row.id, update.key.try_number)]
            if update.key.try_number in ended:
                assert f.state != "running", "a late 'running' reopened an ended try"
            if f.state in ("success", "failed", "skipped"):
                ended.add(update.key.try_number)
        before = row
        t = fold_reports(row, batch, task, max_retry_delay=3600.0)
        if t is not None:  # the CAS applies: nothing else moved the row in this model
            row = replace(row, state=t.new_state, started_at=t.started_at or row.started_at)
        if row.state == "up_for_retry":  # the scheduler queues the retry: the only place tries grow
            row = replace(row, state="queued", try_number=row.try_number + 1, started_at=None)
        assert row.try_number >= before.try_number
        if before.state in TERMINAL_TASK_STATES:
            assert row == before
