"""Runs as the HTTP API lists and shows them, and the unfinished runs the metrics count.

Every list is keyset-paginated (``WHERE key > cursor ORDER BY key LIMIT n + 1``), so a page
costs the same on page 1 and page 10,000 and never holds a snapshot open; the extra row tells
the caller whether another page exists. Newest-first lists page backwards on the primary key.
Each function runs one statement on the connection it is given and returns plain dicts ready to
be rendered as JSON; a missing object is ``None``, not an exception, so the route decides
between 404 and an empty list. :func:`count_runs_by_state` counts *unfinished* rows only,
through the partial "active" index: its cost depends on the work in flight, not on the history.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.fragments import task_summary_json_sql
from leoflow.db.tables import DagRun, DagVersion
from leoflow.model.states import ACTIVE_RUN_STATES

versions = DagVersion.__table__
runs = DagRun.__table__


def _row(row: Row[*tuple[Any, ...]]) -> dict[str, Any]:
    return dict(row._mapping)


_RUN_COLUMNS = (runs.c.id, runs.c.dag_id, runs.c.run_id, runs.c.run_type, runs.c.state, runs.c.logical_date,
                runs.c.conf, runs.c.created_at, runs.c.started_at, runs.c.ended_at, runs.c.updated_at,
                versions.c.version.label("dag_version"), runs.c.reason, runs.c.backfill_id, runs.c.deadline_at,
                runs.c.body_state, runs.c.triggering_events,
                # Runs written before data intervals existed: the logical date, as for a manual run.
                func.coalesce(runs.c.data_interval_start, runs.c.logical_date).label("data_interval_start"),
                func.coalesce(runs.c.data_interval_end, runs.c.logical_date).label("data_interval_end"))


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
_RUN_WITH_TASKS = text(f"""
SELECT r.id, r.dag_id, r.run_id, r.run_type, r.state, r.logical_date, r.conf, r.created_at,
       r.started_at, r.ended_at, r.updated_at, v.version AS dag_version, r.reason, r.backfill_id, r.deadline_at,
       r.body_state, r.triggering_events,
       coalesce(r.data_interval_start, r.logical_date) AS data_interval_start,
       coalesce(r.data_interval_end, r.logical_date) AS data_interval_end,
       (SELECT coalesce(json_agg({task_summary_json_sql("ti")} ORDER BY ti.task_id), '[]'::json)
          FROM task_instances ti WHERE ti.run_pk = r.id AND ti.map_index <= 0) AS tasks
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



async def count_runs_by_state(conn: AsyncConnection) -> dict[str, int]:
    """Unfinished DAG runs per state."""
    query = (select(runs.c.state, func.count()).where(and_(runs.c.state.in_(ACTIVE_RUN_STATES)))
             .group_by(runs.c.state))
    counts: dict[str, int] = dict.fromkeys(ACTIVE_RUN_STATES, 0)
    counts.update({state: n for state, n in await conn.execute(query)})
    return counts
