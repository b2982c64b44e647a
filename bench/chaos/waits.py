"""The soak's waits scenario: tasks that wait (``wait_for``) holding no pod, each resolved exactly once
across leader kills.

``chaos-waits`` has three container tasks that wait, and one after them:

- ``data`` waits for an event of :data:`WAITS_URI` newer than the run's start: the workload posts
  one through the API a few times after each trigger (:func:`follow_ups`), so a run started late
  by a failover still sees one;
- ``timed`` waits ``not_before: 15s`` after the run's logical date;
- ``approved`` waits for an approval, which the workload gives through the API, retrying until the
  task waits (``409`` "not waiting") and accepting "already decided" (its own earlier call that
  answered ambiguously);
- ``after`` depends on the three.

The audit (:func:`check_waits`) reads only the database's clock: a wait row's ``decided_at`` is set
by the leader's fenced step with ``now()``, and the soak's ``chaos_audit`` stamps every try row
inserted with ``clock_timestamp()``. For each waiting task instance of a run that was not
cancelled: one wait row, ``met``; its condition true at that moment (an event of the URI committed
before it; ``target_date`` not after it; the approval recorded); the task succeeded by exactly one
successful try; and every try of it created at or after the wait was met — a task that ran before
its condition, or twice, fails the check. The check also fails if it judged fewer than three
waits, so a soak that never exercised them cannot pass it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

import httpx
import psycopg

log = logging.getLogger(__name__)

WAITS_DAG = "chaos-waits"
WAITS_URI = "chaos://waits/ready"
#: The ``timed`` task's ``not_before``, seconds after the logical date (well inside the drain timeout).
NOT_BEFORE_S = 15
#: When, after a trigger of the waits DAG, the workload posts an event and approves (seconds).
EVENT_AFTER = (3.0, 10.0, 20.0, 35.0)
APPROVE_AFTER = 4.0
#: How long an approval is retried while the task does not wait yet (leader kills delay it).
APPROVE_DEADLINE = 90.0
WAITING_TASKS = ("data", "timed", "approved")


class Caller(Protocol):
    def call(self, method: str, path: str, *, body: Any = None, accept: tuple[int, ...] = (200, 201),
             deadline: float = 120) -> httpx.Response: ...


def waits_dag_spec() -> dict[str, Any]:
    def task(task_id: str, **fields: Any) -> dict[str, Any]:
        return {"id": task_id, "image": "busybox:1.36", "retries": 2, "retry_delay_seconds": 1,
                "command": ["sh", "-c", f"echo {WAITS_DAG} {task_id} ran"], **fields}

    return {"dag_id": WAITS_DAG, "description": "chaos soak waits", "schedule": None, "max_active_runs": 1000,
            "tasks": [task("data", wait_for=[{"dataset": WAITS_URI}]),
                      task("timed", wait_for=[{"not_before": f"{NOT_BEFORE_S}s"}]),
                      task("approved", wait_for=[{"approval": {"message": "chaos soak gate"}}]),
                      task("after", depends_on=list(WAITING_TASKS))]}


def follow_ups(dag_id: str, now: float) -> list[tuple[float, str]]:
    """(seconds since the workload started, action) to schedule after a trigger of ``dag_id``."""
    if dag_id != WAITS_DAG:
        return []
    return [(now + s, "event") for s in EVENT_AFTER] + [(now + APPROVE_AFTER, "approve")]


def perform(api: Caller, action: str, dag_id: str, run_id: str, errors: list[str]) -> None:
    """An ``event`` for :data:`WAITS_URI`, or (in a thread of its own, so that retrying it while the
    task does not wait yet delays no other action) the approval of ``run_id``'s ``approved`` task."""
    if action == "event":
        api.call("POST", "/api/v2/datasets/events", body={"uri": WAITS_URI, "extra": {"run_id": run_id}})
        return

    def approve() -> None:
        try:
            _approve(api, dag_id, run_id)
        except (RuntimeError, TimeoutError) as exc:
            errors.append(f"approve {run_id}: {exc}")

    threading.Thread(target=approve, name=f"approve-{run_id}", daemon=True).start()


def _approve(api: Caller, dag_id: str, run_id: str) -> None:
    path = f"/api/v2/dags/{dag_id}/runs/{run_id}/tasks/approved/approval"
    end = time.monotonic() + APPROVE_DEADLINE
    while True:
        answer = api.call("POST", path, body={"decision": "approve", "comment": "chaos"}, accept=(200, 404, 409))
        if answer.status_code == 200 or "already decided" in answer.text:
            return
        if time.monotonic() > end:  # the task never came to wait: the audit reports the run
            raise TimeoutError(f"approval of {run_id}: {answer.status_code} {answer.text[:200]}")
        time.sleep(1.0)


_WAITS = """
SELECT r.run_id, ti.task_id, ti.state, w.kind, w.state AS wait_state, w.target, w.target_date, w.decision,
       w.decided_at, w.since,
       (SELECT count(*) FROM task_waits o WHERE o.task_instance_id = ti.id) AS rows,
       (SELECT count(*) FROM task_tries tt WHERE tt.task_instance_id = ti.id AND tt.state = 'success') AS succeeded,
       (SELECT count(*) FROM task_tries tt WHERE tt.task_instance_id = ti.id) AS tries,
       (SELECT min(a.ts) FROM chaos_audit a JOIN task_tries tt ON tt.id = a.row_id
        WHERE a.tbl = 'task_tries' AND a.op = 'insert' AND tt.task_instance_id = ti.id) AS first_try_at,
       (SELECT min(pg_xact_commit_timestamp(e.xmin)) FROM dataset_events e WHERE e.uri = w.target) AS first_event
FROM task_instances ti
JOIN dag_runs r ON r.id = ti.run_pk
LEFT JOIN task_waits w ON w.task_instance_id = ti.id AND w.position = 0
WHERE r.dag_id = %s AND ti.task_id = ANY(%s) AND r.state <> 'cancelled'
ORDER BY r.run_id, ti.task_id
"""


def check_waits(verdict: Any, conn: psycopg.Connection[Any]) -> None:
    """Each wait of :data:`WAITS_DAG` resolved exactly once, after its condition (see the module docstring)."""
    problems: list[dict[str, Any]] = []
    judged = 0
    for row in conn.execute(_WAITS, (WAITS_DAG, list(WAITING_TASKS))).fetchall():
        (run_id, task_id, state, kind, wait_state, _target, target_date, decision, decided_at, _since, rows,
         succeeded, tries, first_try_at, first_event) = row
        judged += 1
        wrong = []
        if rows != 1 or wait_state != "met" or decided_at is None:
            wrong.append(f"{rows} wait rows, state {wait_state}")
        elif kind == "dataset" and (first_event is None or first_event > decided_at):
            wrong.append(f"met at {decided_at} before any event of the dataset ({first_event})")
        elif kind == "time" and target_date > decided_at:
            wrong.append(f"met at {decided_at} before its time {target_date}")
        elif kind == "approval" and decision != "approve":
            wrong.append(f"met with decision {decision}")
        if state != "success" or succeeded != 1:
            wrong.append(f"task {state} with {succeeded} successful tries of {tries}")
        if decided_at is not None and (first_try_at is None or first_try_at < decided_at):
            wrong.append(f"first try at {first_try_at}, before its wait was met at {decided_at}")
        if wrong:
            problems.append({"run_id": run_id, "task_id": task_id, "kind": kind, "problems": wrong})
    verdict.add("waits_resolved_once", judged >= len(WAITING_TASKS) and not problems,
                {"waits": judged, "problems": problems[:10]})
