"""The states of runs, task instances and tries: one definition for the whole code base.

Every other place that names a state — SQL in :mod:`leoflow.db`, the API's filters and OpenAPI
document, the CLI's summaries, metrics labels — takes it from here, so adding or renaming a
state is one edit (plus a migration if stored rows change). The dashboard's JavaScript keeps
its own copy; ``tests/dashboard`` checks it against these tuples.

The task state machine itself is drawn in :mod:`leoflow.scheduler.transitions`.
"""

from __future__ import annotations

from typing import Literal

TaskState = Literal["pending", "queued", "running", "up_for_retry", "cancelling", "waiting", "success", "failed",
                    "upstream_failed", "skipped", "cancelled"]
RunState = Literal["queued", "running", "success", "failed", "cancelled"]

#: Task states in which a task instance is not finished. ``cancelling``: cleared while a try of it
#: was live; it waits, unqueued, until that try is confirmed gone (its process exited, its pod
#: deleted), then becomes ``pending`` (:mod:`leoflow.scheduler.periodic`), so two tries of one
#: task never run at once. ``waiting``: its trigger rule said run, but a ``wait_for`` condition or
#: ``depends_on_past`` holds it, unqueued and without a slot, until met (:mod:`leoflow.scheduler.waits`).
ACTIVE_TASK_STATES: tuple[TaskState, ...] = ("pending", "queued", "running", "up_for_retry", "cancelling",
                                             "waiting")
#: Task states counted against ``LEOFLOW_PARALLELISM``.
SLOT_TASK_STATES: tuple[TaskState, ...] = ("queued", "running")
#: ``upstream_failed`` and ``skipped`` are decided by trigger rules (leoflow.model.spec.trigger_rules).
TERMINAL_TASK_STATES: tuple[TaskState, ...] = ("success", "failed", "upstream_failed", "skipped", "cancelled")
TASK_STATES: tuple[TaskState, ...] = ACTIVE_TASK_STATES + TERMINAL_TASK_STATES

ACTIVE_RUN_STATES: tuple[RunState, ...] = ("queued", "running")
TERMINAL_RUN_STATES: tuple[RunState, ...] = ("success", "failed", "cancelled")
RUN_STATES: tuple[RunState, ...] = ACTIVE_RUN_STATES + TERMINAL_RUN_STATES

#: Try states: ``queued`` (created with the queue transition), ``running``, ``success`` /
#: ``failed`` (reported), ``skipped`` (failed with an exit code of the task's ``skip_on_exit_code``),
#: ``cancelling`` (the executor must kill it) and ``cancelled`` (killed).
TryRowState = Literal["queued", "running", "success", "failed", "skipped", "cancelling", "cancelled"]
#: Tries an executor may still be running (resubmitted on failover, killed when cancelling).
LIVE_TRY_STATES: tuple[TryRowState, ...] = ("queued", "running", "cancelling")
#: Tries whose outcome is recorded.
FINISHED_TRY_STATES: tuple[TryRowState, ...] = ("success", "failed", "skipped", "cancelled")

#: DAG list filter values of the API: ``state=active|paused`` (the same as ``paused=false|true``,
#: kept for clients written before ``paused``) or the state of the DAG's last run, ``none`` for a
#: DAG that never ran (:data:`DAG_LAST_RUN_STATES`).
DAG_STATES = ("active", "paused")
DAG_LAST_RUN_STATES: tuple[str, ...] = (*RUN_STATES, "none")

#: A notification in the outbox: waiting to be sent (or retried), sent, given up on.
NOTIFICATION_STATES = ("pending", "delivered", "failed")
