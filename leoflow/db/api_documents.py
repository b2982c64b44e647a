"""Hot API reads that PostgreSQL renders as JSON: one statement, one round trip, no Python objects.

The busiest read of the API is a run with its task instances (run pages and dashboards poll it;
``leoflow runs trigger --wait`` too). Building the answer in SQL (``json_build_object``) and
returning its text lets the API pass the bytes through: no row objects, no datetime
conversion, no ``json.dumps`` — the difference between ~0.3 ms and ~1.5 ms of CPU per request
(``bench/api.py``). The JSON has exactly the fields and order of the Python-rendered
answers in :mod:`leoflow.api.routes_runs`; timestamps are ISO 8601 in UTC (the API's
sessions run with ``TimeZone=UTC``).

These functions take a raw psycopg connection from the API pool (:mod:`leoflow.db.connection.api_pool`) and
return ``None`` for a missing object, so the route decides between 404s
(:func:`leoflow.db.stores.dags.dag_exists`).
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from leoflow.db.connection.api_pool import reading_cursor

_RUN_WITH_TASKS = """
SELECT json_build_object(
         'dag_id', r.dag_id, 'run_id', r.run_id, 'run_type', r.run_type, 'state', r.state,
         'logical_date', r.logical_date, 'conf', r.conf, 'created_at', r.created_at,
         'started_at', r.started_at, 'ended_at', r.ended_at, 'updated_at', r.updated_at,
         'dag_version', v.version, 'reason', r.reason, 'backfill_id', r.backfill_id,
         'deadline_at', r.deadline_at,
         'tasks', (SELECT coalesce(json_agg(json_build_object(
                      'task_id', ti.task_id, 'state', ti.state, 'try_number', ti.try_number,
                      'max_tries', ti.max_tries, 'queued_at', ti.queued_at, 'started_at', ti.started_at,
                      'ended_at', ti.ended_at, 'next_try_at', ti.next_try_at, 'reason', ti.reason)
                      ORDER BY ti.task_id), '[]'::json)
                     FROM task_instances ti WHERE ti.run_pk = r.id))::text
  FROM dag_runs r JOIN dag_versions v ON v.id = r.dag_version_id
 WHERE r.dag_id = %s AND r.run_id = %s
"""


async def run_with_tasks(conn: AsyncConnection[Any], dag_id: str, run_id: str) -> str | None:
    """The run's public JSON document with its task instances (ordered by task id)."""
    cursor = await reading_cursor(conn).execute(_RUN_WITH_TASKS, (dag_id, run_id))
    row = await cursor.fetchone()
    return None if row is None else str(row[0])
