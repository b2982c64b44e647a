"""Read queries behind the HTTP API's lists and detail pages (writes live in :mod:`leoflow.db.stores`).

Every list is keyset-paginated (``WHERE key > cursor ORDER BY key LIMIT n + 1``), so a page
costs the same on page 1 and page 10,000 and never holds a snapshot open; the extra row tells
the caller whether another page exists. Newest-first lists (runs, events) page backwards on
the primary key. Each function runs one statement on the connection it is given and returns
plain dicts ready to be rendered as JSON; a missing object is ``None``, not an exception, so the
route decides between 404 and an empty list.

The metrics gauges use :func:`count_task_instances_by_state` / :func:`count_runs_by_state`,
which only count *unfinished* rows through the partial "active" indexes: their cost depends on
the work in flight, not on the history kept (finished task instances can number millions).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.tables import (
    Dag,
    DagRun,
    DagVersion,
    TaskInstance,
    TaskLog,
    TaskTry,
)
from leoflow.model.states import ACTIVE_RUN_STATES, ACTIVE_TASK_STATES

dags = Dag.__table__
versions = DagVersion.__table__
runs = DagRun.__table__
tis = TaskInstance.__table__
tries = TaskTry.__table__
logs = TaskLog.__table__


def _row(row: Row[*tuple[Any, ...]]) -> dict[str, Any]:
    return dict(row._mapping)


# --------------------------------------------------------------------------- DAGs

_DAG_COLUMNS = (dags.c.dag_id, dags.c.paused, dags.c.schedule, versions.c.version, dags.c.next_run_at,
                dags.c.source, dags.c.schedule_error, dags.c.created_at, dags.c.updated_at)


async def list_dags(conn: AsyncConnection, *, after: str | None, limit: int,
                    paused: bool | None) -> list[dict[str, Any]]:
    """Live (not deleted) DAGs ordered by id, up to ``limit + 1`` rows after ``after``."""
    query = (select(*_DAG_COLUMNS)
             .select_from(dags.outerjoin(versions, versions.c.id == dags.c.current_version_id))
             .where(dags.c.deleted.is_(False)).order_by(dags.c.dag_id).limit(limit + 1))
    if after is not None:
        query = query.where(dags.c.dag_id > after)
    if paused is not None:
        query = query.where(dags.c.paused.is_(paused))
    return [_row(r) for r in await conn.execute(query)]


async def get_dag(conn: AsyncConnection, dag_id: str) -> dict[str, Any] | None:
    """One live DAG with the spec of its current version."""
    query = (select(*_DAG_COLUMNS, versions.c.spec)
             .select_from(dags.outerjoin(versions, versions.c.id == dags.c.current_version_id))
             .where(dags.c.dag_id == dag_id, dags.c.deleted.is_(False)))
    row = (await conn.execute(query)).first()
    return _row(row) if row else None


# --------------------------------------------------------------------------- runs

_RUN_COLUMNS = (runs.c.id, runs.c.dag_id, runs.c.run_id, runs.c.run_type, runs.c.state, runs.c.logical_date,
                runs.c.conf, runs.c.created_at, runs.c.started_at, runs.c.ended_at, runs.c.updated_at,
                versions.c.version.label("dag_version"), runs.c.reason, runs.c.backfill_id, runs.c.deadline_at)


async def list_runs(conn: AsyncConnection, dag_id: str, *, before_id: int | None, limit: int,
                    state: str | None) -> list[dict[str, Any]]:
    """A DAG's runs, newest first, up to ``limit + 1`` rows older than ``before_id``."""
    query = (select(*_RUN_COLUMNS)
             .select_from(runs.join(versions, versions.c.id == runs.c.dag_version_id))
             .where(runs.c.dag_id == dag_id).order_by(runs.c.id.desc()).limit(limit + 1))
    if before_id is not None:
        query = query.where(runs.c.id < before_id)
    if state is not None:
        query = query.where(runs.c.state == state)
    return [_row(r) for r in await conn.execute(query)]


async def list_runs_of_every_dag(conn: AsyncConnection, *, before_id: int | None, limit: int, state: str | None,
                                 since: datetime | None, dag_id: str | None = None) -> list[dict[str, Any]]:
    """Every DAG's runs (or ``dag_id``'s), newest first (``limit + 1`` rows older than ``before_id``),
    created at or after ``since``."""
    query = (select(*_RUN_COLUMNS)
             .select_from(runs.join(versions, versions.c.id == runs.c.dag_version_id))
             .order_by(runs.c.id.desc()).limit(limit + 1))
    if dag_id is not None:
        query = query.where(runs.c.dag_id == dag_id)
    if before_id is not None:
        query = query.where(runs.c.id < before_id)
    if state is not None:
        query = query.where(runs.c.state == state)
    if since is not None:
        query = query.where(runs.c.created_at >= since)
    return [_row(r) for r in await conn.execute(query)]


# One round trip for a run and all its task instances, as Python values: the answers of the
# write routes (trigger, cancel) inside their transaction. The hot GET of the same run has
# PostgreSQL render the JSON instead (leoflow.db.stores.runs.run_document); a test keeps the two equal.
_RUN_WITH_TASKS = text("""
SELECT r.id, r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.conf, r.created_at,
       r.started_at, r.ended_at, r.updated_at, v.version AS dag_version, r.reason, r.backfill_id, r.deadline_at,
       (SELECT coalesce(json_agg(json_build_object(
                   'task_id', ti.task_id, 'state', ti.state, 'try_number', ti.try_number,
                   'max_tries', ti.max_tries, 'queued_at', ti.queued_at, 'started_at', ti.started_at,
                   'ended_at', ti.ended_at, 'next_try_at', ti.next_try_at, 'reason', ti.reason)
                   ORDER BY ti.task_id), '[]'::json)
          FROM task_instances ti WHERE ti.run_pk = r.id) AS tasks
  FROM dag_runs r JOIN dag_versions v ON v.id = r.dag_version_id
 WHERE r.dag_id = :dag_id AND r.run_id = :run_id
""")


async def get_run(conn: AsyncConnection, dag_id: str, run_id: str, *,
                  with_tasks: bool = True) -> dict[str, Any] | None:
    """One run (with its task instances ordered by task id, unless ``with_tasks`` is False)."""
    if with_tasks:
        row = (await conn.execute(_RUN_WITH_TASKS, {"dag_id": dag_id, "run_id": run_id})).first()
    else:
        query = (select(*_RUN_COLUMNS)
                 .select_from(runs.join(versions, versions.c.id == runs.c.dag_version_id))
                 .where(runs.c.dag_id == dag_id, runs.c.run_id == run_id))
        row = (await conn.execute(query)).first()
    return _row(row) if row else None


# --------------------------------------------------------------------------- task instances

_TI_COLUMNS = (tis.c.id, tis.c.task_id, tis.c.state, tis.c.try_number, tis.c.max_tries, tis.c.queued_at,
               tis.c.started_at, tis.c.ended_at, tis.c.next_try_at, tis.c.reason)


async def list_task_instances(conn: AsyncConnection, run_pk: int, *, after: str | None, limit: int,
                              state: str | None) -> list[dict[str, Any]]:
    """A run's task instances ordered by task id, up to ``limit + 1`` rows after ``after``."""
    query = select(*_TI_COLUMNS).where(tis.c.run_pk == run_pk).order_by(tis.c.task_id).limit(limit + 1)
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
    return [_row(r) for r in await conn.execute(query)]


async def get_task_instance(conn: AsyncConnection, run_pk: int, task_id: str) -> dict[str, Any] | None:
    """One task instance with all its tries (oldest first)."""
    row = (await conn.execute(select(*_TI_COLUMNS, tis.c.term).where(tis.c.run_pk == run_pk,
                                                                     tis.c.task_id == task_id))).first()
    if row is None:
        return None
    ti = _row(row)
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


#: The columns of a try as :func:`get_task_instance` returns them, and as :func:`get_task_log` does.
_TRY_KEYS = ("try_number", "state", "executor_ref", "term", "queued_at", "started_at", "ended_at", "exit_code",
             "reason", "logs_shipped_at", "logs_unavailable", "has_logs")
_LOG_KEYS = ("try_number", "state", "ended_at", "logs_shipped_at", "executor_ref", "logs_unavailable", "content",
             "truncated", "size_bytes", "log_updated_at")


async def get_task_log(conn: AsyncConnection, ti: Mapping[str, Any], try_number: int | None) -> dict[str, Any] | None:
    """One try of ``ti`` (a task instance as :func:`get_task_instance` returns it, tries included;
    the newest when ``try_number`` is None) with its stored log, if any.

    A queued try whose row is not written yet (ADR 0013) is among ``ti``'s tries already: it is
    answered from there, with nothing stored, without asking the database again.
    """
    shown = [t for t in ti["tries"] if try_number in (None, t["try_number"])]
    if not shown:
        return None
    wanted = shown[-1]
    query = (select(tries.c.try_number, tries.c.state, tries.c.ended_at, tries.c.logs_shipped_at, tries.c.executor_ref,
                    tries.c.logs_unavailable, logs.c.content, logs.c.truncated, logs.c.size_bytes,
                    logs.c.updated_at.label("log_updated_at"))
             .select_from(tries.outerjoin(logs, logs.c.task_try_id == tries.c.id))
             .where(tries.c.task_instance_id == ti["id"], tries.c.try_number == wanted["try_number"]))
    row = (await conn.execute(query)).first()
    if row is not None:
        return _row(row)
    return {k: wanted.get(k) for k in _LOG_KEYS} if wanted["state"] == "queued" else None


# --------------------------------------------------------------------------- metrics

async def count_task_instances_by_state(conn: AsyncConnection) -> dict[str, int]:
    """Unfinished task instances per state (index-only over the partial active index)."""
    query = (select(tis.c.state, func.count()).where(tis.c.state.in_(ACTIVE_TASK_STATES))
             .group_by(tis.c.state))
    counts: dict[str, int] = dict.fromkeys(ACTIVE_TASK_STATES, 0)
    counts.update({state: n for state, n in await conn.execute(query)})
    return counts


async def count_runs_by_state(conn: AsyncConnection) -> dict[str, int]:
    """Unfinished DAG runs per state."""
    query = (select(runs.c.state, func.count()).where(and_(runs.c.state.in_(ACTIVE_RUN_STATES)))
             .group_by(runs.c.state))
    counts: dict[str, int] = dict.fromkeys(ACTIVE_RUN_STATES, 0)
    counts.update({state: n for state, n in await conn.execute(query)})
    return counts
