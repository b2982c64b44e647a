"""Scheduler metrics (prometheus_client default registry). Followers export zeros.

Names are part of the operator contract (dashboards, alerts); do not rename.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

TICKS = Counter("leoflow_scheduler_ticks_total", "Scheduling loop iterations on this replica")
TICK_SECONDS = Histogram("leoflow_scheduler_tick_duration_seconds", "Duration of one scheduling loop iteration",
                         buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
TICK_ERRORS = Counter("leoflow_scheduler_tick_errors_total",
                      "Scheduling loop iterations that failed (database errors); retried next tick")
TASKS_QUEUED = Counter("leoflow_scheduler_tasks_queued_total", "Task tries handed to the executor")
TASK_TRANSITIONS = Counter("leoflow_scheduler_task_transitions_total",
                           "Task instance state changes applied by the scheduler", ["state"])
RUNS_CREATED = Counter("leoflow_scheduler_runs_created_total", "Scheduled runs created by the leader")
RUNS_FINISHED = Counter("leoflow_scheduler_runs_finished_total", "Runs finished by the scheduler", ["state"])
ENTITY_ERRORS = Counter("leoflow_scheduler_entity_errors_total",
                        "Entities failed because handling them raised (contained; the leader carried on), by kind",
                        ["kind"])
SWEEP_REPAIRS = Counter("leoflow_scheduler_sweep_repairs_total",
                        "Runs the completion sweep found complete but still running (expected 0: runs are "
                        "finished in the transaction that completes them)")
KILL_SECONDS = Histogram("leoflow_scheduler_kill_duration_seconds",
                         "Time from the leader starting to kill a try (cancelled run, deadline, timeout, clear) "
                         "to the kill recorded, waiting for a kill slot included",
                         buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
SLOW_KILLS = Counter("leoflow_scheduler_slow_kills_total",
                     "Kills the executor had not finished 30 s after starting them (each also logged as a "
                     "warning naming the try); expected 0")

#: ``kind`` of ENTITY_ERRORS: a DAG's schedule, a DAG version's spec, a run, a task instance, an
#: executor report that names no task instance, an executor's handling of one try.
ENTITY_KINDS = ("dag", "dag_version", "run", "task", "report", "try")

for _state in ("running", "success", "failed", "up_for_retry", "upstream_failed", "skipped"):
    TASK_TRANSITIONS.labels(state=_state)
for _state in ("success", "failed"):
    RUNS_FINISHED.labels(state=_state)
for _kind in ENTITY_KINDS:
    ENTITY_ERRORS.labels(kind=_kind)
