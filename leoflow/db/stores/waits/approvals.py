"""The API's statements for task waits: decide an approval, and what a task instance waits for.

An approval is recorded by any replica, unfenced, as a compare-and-set on the waiting row
(``decision IS NULL``): two operators racing get one decision and one ``409``. The row's
``check_at`` becomes now and the leader is woken; its fenced step then moves the task
(:mod:`leoflow.scheduler.waits`), so the decision is applied exactly once whatever the leader does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.connection.wakeup import notify_wakeup
from leoflow.errors import Conflict, NotFound

Decision = Literal["approve", "reject"]


@dataclass(frozen=True)
class Decided:
    dag_id: str
    run_id: str
    task_id: str
    decision: str
    decided_by: str
    comment: str


async def decide_approval(conn: AsyncConnection, dag_id: str, run_id: str, task_id: str, *, decision: Decision,
                          comment: str, by: str) -> Decided:
    """Record ``decision`` on the task's open approval; NotFound without one, Conflict if already decided."""
    row = (await conn.execute(text("""
        SELECT ti.id, ti.state, w.position, w.decision, w.state AS wait_state
        FROM dag_runs r JOIN task_instances ti ON ti.run_pk = r.id AND ti.task_id = :task AND ti.map_index = -1
        LEFT JOIN task_waits w ON w.task_instance_id = ti.id AND w.kind = 'approval'
        WHERE r.dag_id = :dag AND r.run_id = :run
        ORDER BY (w.state = 'waiting') DESC NULLS LAST, w.position LIMIT 1 FOR UPDATE OF ti
    """), {"dag": dag_id, "run": run_id, "task": task_id})).first()
    if row is None:
        raise NotFound(f"task {task_id!r} of run {run_id!r} of DAG {dag_id!r} not found")
    if row.position is None or row.state != "waiting":
        raise Conflict(f"task {task_id!r} is {row.state}, not waiting for an approval")
    if row.decision is not None or row.wait_state != "waiting":
        raise Conflict(f"the approval of task {task_id!r} was already decided ({row.decision or row.wait_state})")
    await conn.execute(text("""
        UPDATE task_waits SET decision = :decision, decided_by = :by, comment = :comment, check_at = now()
        WHERE task_instance_id = :ti AND position = :pos AND decision IS NULL AND state = 'waiting'
    """), {"decision": decision, "by": by, "comment": comment, "ti": row.id, "pos": row.position})
    await notify_wakeup(conn, dag_id)
    return Decided(dag_id, run_id, task_id, decision, by, comment)


async def waiting_for(conn: AsyncConnection, ti_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """Each task instance's conditions, for its document: kind, target, state, reason, and a human line."""
    if not ti_ids:
        return {}
    rows = await conn.execute(text("""
        SELECT task_instance_id, position, kind, target, target_date, states, since, state, reason, timeout_at,
               decision, decided_by, comment, decided_at
        FROM task_waits WHERE task_instance_id = ANY(CAST(:ids AS bigint[])) ORDER BY task_instance_id, position
    """), {"ids": list(ti_ids)})
    out: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        item: dict[str, Any] = {"kind": r.kind, "state": r.state, "reason": _human(r),
                                "timeout_at": r.timeout_at.isoformat() if r.timeout_at else None}
        if r.kind in ("dag", "dataset"):
            item["target"] = r.target
        if r.kind in ("dag", "time") and r.target_date is not None:
            item["logical_date" if r.kind == "dag" else "not_before"] = r.target_date.isoformat()
        if r.kind == "approval":
            item.update(message=r.target or None, decision=r.decision, decided_by=r.decided_by, comment=r.comment)
        if r.state == "failed":
            item["failure"] = r.reason
        out.setdefault(int(r.task_instance_id), []).append(item)
    return out


def _human(r: Any) -> str:
    if r.kind == "dag":
        date = r.target_date.isoformat() if r.target_date is not None else "?"
        return f"the run of DAG {r.target!r} at logical date {date} to be {' or '.join(r.states or ['success'])}"
    if r.kind == "dataset":
        return f"an event of dataset {r.target!r} after {r.since.isoformat() if r.since else 'the run started'}"
    if r.kind == "time":
        return f"{r.target_date.isoformat() if r.target_date else 'a moment'} to pass"
    if r.kind == "approval":
        return "an approval (POST …/approval)" + (f": {r.target}" if r.target else "")
    return "the same task of the previous run to succeed or be skipped"
