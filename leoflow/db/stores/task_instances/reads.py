"""Task instances as the HTTP API lists and shows them (with their tries), and the unfinished ones the metrics count.

The same rules as :mod:`leoflow.db.stores.runs.reads`: keyset pages, one statement per call,
plain dicts, ``None`` for a missing object; :func:`count_task_instances_by_state` reads only the
partial "active" index, so its cost follows the work in flight, not the history kept.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Row, case, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.fragments import map_states_sql, task_state_sql
from leoflow.db.tables import DagRun, TaskInstance, TaskLog, TaskTry
from leoflow.model.states import ACTIVE_TASK_STATES

runs = DagRun.__table__
tis = TaskInstance.__table__
tries = TaskTry.__table__
logs = TaskLog.__table__


def _row(row: Row[*tuple[Any, ...]]) -> dict[str, Any]:
    return dict(row._mapping)


_TI_COLUMNS = (tis.c.id, tis.c.task_id, tis.c.state, tis.c.try_number, tis.c.max_tries, tis.c.queued_at,
               tis.c.started_at, tis.c.ended_at, tis.c.next_try_at, tis.c.reason, tis.c.map_index, tis.c.map_count)
#: A task's one row in a run's list: a mapped task's state sums up its instances, which it counts by state.
_SUMMARY_COLUMNS: tuple[Any, ...] = (
    tis.c.id, tis.c.task_id, literal_column(task_state_sql("task_instances")).label("state"), tis.c.try_number,
    tis.c.max_tries, tis.c.queued_at, tis.c.started_at, tis.c.ended_at, tis.c.next_try_at, tis.c.reason,
    tis.c.map_count, literal_column(map_states_sql("task_instances")).label("map_states"))


async def list_task_instances(conn: AsyncConnection, run_pk: int, *, after: str | None, limit: int,
                              state: str | None) -> list[dict[str, Any]]:
    """A run's tasks ordered by task id, one row each (a mapped task's sums up its instances), up to
    ``limit + 1`` rows after ``after``."""
    query = (select(*_SUMMARY_COLUMNS).where(tis.c.run_pk == run_pk, tis.c.map_index <= 0)
             .order_by(tis.c.task_id).limit(limit + 1))
    if after is not None:
        query = query.where(tis.c.task_id > after)
    if state is not None:
        query = query.where(tis.c.state == state)
    return [_row(r) for r in await conn.execute(query)]


async def list_task_instances_of_every_run(conn: AsyncConnection, *, before_id: int | None, limit: int,
                                           state: str | None, since: datetime | None,
                                           dag_id: str | None) -> list[dict[str, Any]]:
    """Task instances of every run (or of ``dag_id``'s runs) created at or after ``since``, newest first,
    up to ``limit + 1`` rows older than ``before_id``; each names its ``dag_id`` and ``run_id``."""
    query = (select(*_TI_COLUMNS, runs.c.dag_id, runs.c.run_id)
             .select_from(tis.join(runs, runs.c.id == tis.c.run_pk))
             .order_by(tis.c.id.desc()).limit(limit + 1))
    if before_id is not None:
        query = query.where(tis.c.id < before_id)
    if state is not None:
        query = query.where(tis.c.state == state)
    if since is not None:
        query = query.where(runs.c.created_at >= since)
    if dag_id is not None:
        query = query.where(runs.c.dag_id == dag_id)
    return [{**_row(r), "map_states": None} for r in await conn.execute(query)]


#: The task instance's *current* outputs (ADR 0014, decision 1): those its try ``try_number`` stored,
#: while the instance is ``success``; NULL otherwise. A clear hides them at once (the instance leaves
#: ``success``) and the next success shows the new try's, while every try keeps its own. A correlated
#: subquery on ``task_tries``' unique ``(task_instance_id, try_number)``: one index probe, in the
#: statement that reads the instance, not one more round trip.
_CURRENT_OUTPUTS = case(
    (tis.c.state == "success",
     select(tries.c.outputs).where(tries.c.task_instance_id == tis.c.id, tries.c.try_number == tis.c.try_number)
     .scalar_subquery()),
    else_=None).label("outputs")


async def get_task_instance(conn: AsyncConnection, run_pk: int, task_id: str,
                            map_index: int | None = None) -> dict[str, Any] | None:
    """One task instance with its current ``outputs`` and all its tries (oldest first).

    A mapped task has one per instance: ``map_index`` names it. Without one, a mapped task answers
    its summary: the state summing up its instances, their count by state, and no tries.
    """
    query = select(*_TI_COLUMNS, _CURRENT_OUTPUTS, tis.c.term,
                   literal_column(task_state_sql("task_instances")).label("summary_state"),
                   literal_column(map_states_sql("task_instances")).label("map_states"))
    query = query.where(tis.c.run_pk == run_pk, tis.c.task_id == task_id)
    query = query.where(tis.c.map_index <= 0) if map_index is None else query.where(tis.c.map_index == map_index)
    row = (await conn.execute(query)).first()
    if row is None:
        return None
    ti = _row(row)
    summary_state, map_states, outputs = ti.pop("summary_state"), ti.pop("map_states"), ti.pop("outputs")
    if map_index is None and ti["map_count"] is not None:  # a mapped task: its instances, summed up
        ti.pop("term")
        # No one try's outputs and no tries: the outputs route lists every instance's values.
        return {**ti, "state": summary_state, "map_index": -1, "map_states": map_states, "outputs": None,
                "tries": []}
    ti.update(map_states=None, outputs=outputs)  # outputs, then tries: the last fields
    term = ti.pop("term")  # not a field of the task instance's answer; an implicit try's term
    query = (select(tries.c.try_number, tries.c.state, tries.c.executor_ref, tries.c.term, tries.c.queued_at,
                    tries.c.started_at, tries.c.ended_at, tries.c.exit_code, tries.c.reason,
                    tries.c.logs_shipped_at, tries.c.logs_unavailable, (logs.c.id.is_not(None)).label("has_logs"))
             .select_from(tries.outerjoin(logs, logs.c.task_try_id == tries.c.id))
             .where(tries.c.task_instance_id == ti["id"]).order_by(tries.c.try_number))
    ti["tries"] = [_row(r) for r in await conn.execute(query)]
    if ti["state"] == "queued" and ti["try_number"] > 0 and all(t["try_number"] != ti["try_number"]
                                                                 for t in ti["tries"]):
        # Its current try is queued and has no row yet (ADR 0013, :mod:`leoflow.db.queued_tries`):
        # a try with nothing stored, from what the task instance keeps.
        known = {"try_number": ti["try_number"], "state": "queued", "term": term, "queued_at": ti["queued_at"],
                 "has_logs": False}
        ti["tries"].append({k: known.get(k) for k in _TRY_KEYS})
    return ti


async def get_task_outputs(conn: AsyncConnection, dag_id: str, run_id: str, task_id: str,
                           map_index: int | None = None) -> dict[str, Any] | None:
    """A task instance's try number, state and current outputs (``None`` for those of one not
    ``success``), in one statement; ``None`` when the DAG, the run or the task does not exist.

    A mapped task without ``map_index``: what its downstream reads, each output as the list of its
    instances' values in index order (``None`` where one did not succeed); ``try_number`` 0.
    """
    query = (select(tis.c.try_number, tis.c.state, _CURRENT_OUTPUTS, tis.c.map_index, tis.c.map_count,
                    literal_column(task_state_sql("task_instances")).label("summary_state"))
             .select_from(tis.join(runs, runs.c.id == tis.c.run_pk))
             .where(runs.c.dag_id == dag_id, runs.c.run_id == run_id, tis.c.task_id == task_id)
             .order_by(tis.c.map_index))
    if map_index is not None:
        query = query.where(tis.c.map_index == map_index)
    found = [_row(r) for r in await conn.execute(query)]
    if not found:
        return None
    first = found[0]
    if map_index is not None or first["map_count"] is None:
        return {"try_number": first["try_number"], "state": first["state"], "outputs": first["outputs"]}
    names = sorted({name for r in found if r["outputs"] for name in r["outputs"]})
    outputs = {name: [(r["outputs"] or {}).get(name) for r in found if r["map_index"] >= 0] for name in names}
    return {"try_number": 0, "state": first["summary_state"], "outputs": outputs}


#: The columns of a try as :func:`get_task_instance` returns them, and as :func:`get_task_log` does.
_TRY_KEYS = ("try_number", "state", "executor_ref", "term", "queued_at", "started_at", "ended_at", "exit_code",
             "reason", "logs_shipped_at", "logs_unavailable", "has_logs")

async def count_task_instances_by_state(conn: AsyncConnection) -> dict[str, int]:
    """Unfinished task instances per state (index-only over the partial active index)."""
    query = (select(tis.c.state, func.count()).where(tis.c.state.in_(ACTIVE_TASK_STATES))
             .group_by(tis.c.state))
    counts: dict[str, int] = dict.fromkeys(ACTIVE_TASK_STATES, 0)
    counts.update({state: n for state, n in await conn.execute(query)})
    return counts
