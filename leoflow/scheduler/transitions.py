"""The task state machine: what an executor report or a timeout does to a task instance.

Pure functions (no I/O, no clock) so every edge is unit-tested directly::

    pending ──(upstreams ok)──▶ queued ──▶ running ──▶ success
       │                          │  ╲        │
       │                          │   ╲───────┴──▶ failed ──(tries left)──▶ up_for_retry ──▶ queued
       │                          │            ╲   (no tries left: final, downstream → upstream_failed)
       │                          └─────────────┴─▶ skipped (an exit code of skip_on_exit_code: no retry)
       └──(an upstream failed)──▶ upstream_failed
    any unfinished state ──(run cancelled)──▶ cancelled

Reports are about one *try*; a report whose try number is not the task instance's current one
(a late report of an earlier try) never touches the task instance. Reports are folded in order,
so ``running`` then ``success`` in one batch becomes one compare-and-set from ``queued``.

Deadlines are **durations**, never a leader's wall-clock instants: a transition says "time out
in ``timeout_after`` seconds" / "retry in ``retry_after`` seconds", and the database turns that
into ``timeout_at`` / ``next_try_at`` on its own clock, the same clock every later leader's
comparisons use (:mod:`leoflow.db.stores.task_instances.transitions`). A leader whose clock is a minute off can
therefore neither time a task out early nor hold a retry back (issue 17).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from leoflow.db.stores.task_instances.transitions import LiveTaskInstance, Transition
from leoflow.model.spec.dag import TaskSpec
from leoflow.model.spec.retry_policy import TryOutcome
from leoflow.model.tries import StatusUpdate


def failure(try_number: int, max_tries: int, *, task: TaskSpec | None,
            max_retry_delay: float) -> tuple[str, float | None]:
    """The state after try ``try_number`` failed: ``up_for_retry`` (in how many seconds) or final ``failed``."""
    if task is not None and try_number < max_tries:
        return "up_for_retry", task.retry_delay(try_number, max_retry_delay)
    return "failed", None


def failed_try(row: LiveTaskInstance, task: TaskSpec | None, outcome: TryOutcome, reason: str, *,
               max_retry_delay: float) -> tuple[str, float | None, str]:
    """(state, retry_after, reason) after the row's current try failed as ``outcome`` says.

    Retried iff tries remain and the task's ``retry_policy`` (its exit codes, its ``when``) allows
    it; a refusal is final and the reason says why. The policy's ``max_duration_seconds`` is
    checked by the database, on its clock, when the transition is written
    (:func:`~leoflow.db.stores.task_instances.transitions.apply_transitions`).
    """
    state, retry_after = failure(row.try_number, row.max_tries, task=task, max_retry_delay=max_retry_delay)
    if state == "up_for_retry" and task is not None and task.retry_policy is not None:
        refused = task.retry_policy.refusal(outcome)
        if refused is not None:
            return "failed", None, f"{reason} (not retried: {refused})"[:500]
    return state, retry_after, reason


def _seconds(started: datetime | None, ended: datetime | None) -> float | None:
    return (ended - started).total_seconds() if started is not None and ended is not None else None


def skipped_by_exit_code(update: StatusUpdate, task: TaskSpec | None) -> StatusUpdate:
    """A failure whose exit code the task lists in ``skip_on_exit_code``, as a ``skipped`` report.

    The executors report exit codes and know nothing of the list: the leader decides here, from
    the task's spec, so both executors (and a report another replica relays) behave alike. Exit
    code 0 is a success whatever the list says: a success the leader turned into a failure (its
    outputs refused) stays a failure.
    """
    code = update.exit_code
    if update.state != "failed" or task is None or not code or code not in task.skip_on_exit_code:
        return update
    return update._replace(state="skipped", reason=f"exit code {code} is in skip_on_exit_code")


def fold_reports(row: LiveTaskInstance, updates: Sequence[StatusUpdate], task: TaskSpec | None, *,
                 max_retry_delay: float) -> Transition | None:
    """One compare-and-set for all reports about the row's current try, or None if nothing changes."""
    state = row.state
    started_at: datetime | None = None
    ended_at: datetime | None = None
    timeout_after: float | None = None
    retry_after: float | None = None
    reason: str | None = None
    for update in updates:
        if update.key.try_number != row.try_number:
            continue
        if update.state == "running" and state == "queued":
            state, started_at = "running", update.at
            if task is not None and task.timeout_seconds is not None:
                timeout_after = task.timeout_seconds
        elif update.state == "success" and state in ("queued", "running"):
            state, ended_at, timeout_after = "success", update.at, None
            started_at = started_at or row.started_at or update.at
            reason = None
        elif update.state == "failed" and state in ("queued", "running"):
            ended_at, timeout_after = update.at, None
            started_at = started_at or row.started_at or update.at
            reason = update.reason or (f"exit code {update.exit_code}" if update.exit_code is not None else "failed")
            outcome = TryOutcome(row.try_number, update.exit_code, update.reason,
                                 duration_seconds=_seconds(started_at, ended_at))
            state, retry_after, reason = failed_try(row, task, outcome, reason, max_retry_delay=max_retry_delay)
        elif update.state == "skipped" and state in ("queued", "running"):
            state, ended_at, timeout_after, retry_after = "skipped", update.at, None, None
            started_at = started_at or row.started_at or update.at
            reason = update.reason
    if state == row.state:
        return None
    return Transition(ti_id=row.id, expected=row.state, try_number=row.try_number, new_state=state,
                      started_at=started_at, ended_at=ended_at, timeout_after=timeout_after,
                      retry_after=retry_after, reason=reason, retry_budget=_budget(task))


def _budget(task: TaskSpec | None) -> float | None:
    """``retry_policy.max_duration_seconds``: the database starts the task's retry deadline from it."""
    policy = task.retry_policy if task is not None else None
    return policy.max_duration_seconds if policy is not None else None


def timeout_transition(row: LiveTaskInstance, task: TaskSpec | None, *, now: datetime,
                       max_retry_delay: float) -> Transition | None:
    """A running task past its ``timeout_at``: failed (or up for retry) with reason 'timed out'."""
    if row.state != "running":
        return None
    seconds = task.timeout_seconds if task is not None else None
    reason = f"timed out after {seconds:g}s" if seconds is not None else "timed out"
    outcome = TryOutcome(row.try_number, None, reason, timed_out=True, duration_seconds=seconds)
    state, retry_after, reason = failed_try(row, task, outcome, reason, max_retry_delay=max_retry_delay)
    return Transition(ti_id=row.id, expected=row.state, try_number=row.try_number, new_state=state,
                      ended_at=now, retry_after=retry_after, reason=reason, retry_budget=_budget(task))


@dataclass
class TryFacts:
    """A try's reported facts, folded over a batch of reports."""

    state: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    reason: str | None = None
    executor_ref: str | None = None


@dataclass
class InFlightTry:
    """What the scheduler knows about a try it queued this term (saves a lookup per report)."""

    ti_id: int
    run_pk: int
    task_id: str
    try_number: int
    max_tries: int
    dag_id: str
    run_id: str
    version_id: int
    state: str = "queued"
    started_at: datetime | None = None
    map_index: int = -1

    def row(self) -> LiveTaskInstance:
        return LiveTaskInstance(id=self.ti_id, run_pk=self.run_pk, task_id=self.task_id, state=self.state,
                                try_number=self.try_number, max_tries=self.max_tries, started_at=self.started_at,
                                dag_id=self.dag_id, run_id=self.run_id, version_id=self.version_id,
                                map_index=self.map_index)


def fold_try_facts(facts: dict[tuple[int, int], TryFacts], ti_id: int, update: StatusUpdate) -> None:
    key = (ti_id, update.key.try_number)
    f = facts.get(key)
    if f is None:
        f = facts[key] = TryFacts(state=update.state)
    if f.state in ("success", "failed", "skipped") and update.state == "running":
        return  # a late "running" never reopens a finished try
    f.state = update.state
    if update.state == "running":
        f.started_at = f.started_at or update.at
    else:
        f.started_at = f.started_at or update.at
        f.ended_at = update.at
    f.exit_code = update.exit_code if update.exit_code is not None else f.exit_code
    f.reason = update.reason or f.reason
    f.executor_ref = update.executor_ref or f.executor_ref
