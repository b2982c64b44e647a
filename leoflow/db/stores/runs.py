"""Runs written on behalf of users: triggered and cancelled (the HTTP API, on any replica).

As for :mod:`leoflow.db.stores.dags`: every function takes a connection inside a transaction the
caller owns, raises :class:`~leoflow.errors.NotFound` / :class:`~leoflow.errors.Conflict` for bad
requests, and is not fenced. ``trigger_run`` and ``cancel_run`` send ``NOTIFY leoflow_wakeup``.

- Runs start ``queued``; their task instances are created by the leader when the run starts
  (``max_active_runs`` permitting), so a queued run has no task instances yet.
- Manual runs of a paused DAG are allowed and run: pausing stops *scheduled* runs only.
- A deleted DAG's runs take no commands: cancelling one answers 404.

**The run's document, rendered by PostgreSQL** (:func:`run_document`). The busiest read of the
API is a run with its task instances (run pages and dashboards poll it; ``leoflow runs trigger
--wait`` too). Building the answer in SQL (``json_build_object``) and returning its text lets the
API pass the bytes through: no row objects, no datetime conversion, no ``json.dumps`` — the
difference between ~0.3 ms and ~1.5 ms of CPU per request (``bench/api.py``). The JSON has exactly
the fields and order of the Python-rendered answers in :mod:`leoflow.api.routes_runs`; timestamps
are ISO 8601 in UTC (the API's sessions run with ``TimeZone=UTC``). It takes a raw psycopg
connection from the API pool (:mod:`leoflow.db.connection.api_pool`) and returns ``None`` for a
missing run, so the route decides between 404s (:func:`leoflow.db.stores.dags.dag_exists`).
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.clock import Clock
from leoflow.db.connection.api_pool import reading_cursor
from leoflow.db.connection.wakeup import notify_wakeup
from leoflow.db.fragments import ACTIVE_RUNS_SQL, ACTIVE_TASKS_SQL
from leoflow.db.queued_tries import cancel_implicit_sql
from leoflow.errors import Conflict, NotFound
from leoflow.model.run_ids import manual_run_id
from leoflow.model.run_request import check_conf, check_run_id


async def trigger_run(conn: AsyncConnection, dag_id: str, *, run_id: str | None, conf: dict[str, Any],
                      clock: Clock, run_timeout_seconds: float | None = None) -> str:
    """Queue a manual run; returns its run id. Conflict if ``run_id`` exists, NotFound if no DAG.

    ``run_timeout_seconds`` (already validated) overrides the DAG's run deadline for this run.
    """
    if run_id is not None:
        check_run_id(run_id)
    conf_json = json.dumps(check_conf(conf))
    dag = (await conn.execute(text(
        "SELECT current_version_id FROM dags WHERE dag_id = :dag_id AND NOT deleted"),
        {"dag_id": dag_id})).first()
    if dag is None or dag[0] is None:
        raise NotFound(f"DAG {dag_id!r} not found")
    now = clock.now().astimezone(UTC)
    wanted = run_id or manual_run_id(now)
    for _ in range(3):
        inserted = (await conn.execute(text("""
            INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, conf,
                                  created_at, updated_at, run_timeout_seconds)
            VALUES (:dag_id, :run_id, :vid, 'manual', :now, 'queued', CAST(:conf AS jsonb), :now, :now, :timeout)
            ON CONFLICT (dag_id, run_id) DO NOTHING RETURNING run_id
        """), {"dag_id": dag_id, "run_id": wanted, "vid": dag[0], "now": now, "conf": conf_json,
               "timeout": run_timeout_seconds})).first()
        if inserted is not None:
            await notify_wakeup(conn, dag_id)
            return wanted
        if run_id is not None:
            raise Conflict(f"run {run_id!r} of DAG {dag_id!r} already exists")
        # Two generated ids in the same microsecond: add a random suffix and try again.
        wanted = f"{manual_run_id(now)}_{secrets.token_hex(3)}"
    raise Conflict(f"could not allocate a unique run id for DAG {dag_id!r}")


async def cancel_run(conn: AsyncConnection, dag_id: str, run_id: str) -> None:
    """Cancel a queued or running run and its unfinished tasks; Conflict if it already ended,
    NotFound if it or its DAG does not exist (a deleted DAG's runs take no commands)."""
    # The DAG and its run in one statement: which of the two is missing decides the 404.
    row = (await conn.execute(text(
        "SELECT d.deleted, r.id, r.state FROM dags d LEFT JOIN LATERAL ("
        "  SELECT id, state FROM dag_runs WHERE dag_id = d.dag_id AND run_id = :run_id FOR UPDATE) r ON true "
        "WHERE d.dag_id = :dag_id"),
        {"dag_id": dag_id, "run_id": run_id})).first()
    if row is None or row.deleted:
        raise NotFound(f"DAG {dag_id!r} not found")
    if row.id is None:
        raise NotFound(f"run {run_id!r} of DAG {dag_id!r} not found")
    if row.state not in ("queued", "running"):
        raise Conflict(f"run {run_id!r} of DAG {dag_id!r} already ended ({row.state})")
    await cancel_runs(conn, [row.id])
    await notify_wakeup(conn, dag_id)


async def cancel_runs(conn: AsyncConnection, run_pks: list[int], *, reason: str = "run cancelled") -> None:
    """Cancel runs, their unfinished task instances, and flag their live tries for the executor."""
    if not run_pks:
        return
    await conn.execute(text(f"""
        UPDATE dag_runs SET state = 'cancelled', ended_at = now(), updated_at = now(), reason = :reason
        WHERE id = ANY(:ids) AND state IN {ACTIVE_RUNS_SQL}
    """), {"ids": run_pks, "reason": reason})
    await conn.execute(text(f"""
        WITH cancelled AS (
            UPDATE task_instances SET state = 'cancelled', ended_at = now(), updated_at = now(),
                   reason = :reason, next_try_at = NULL, timeout_at = NULL
            WHERE run_pk = ANY(:ids) AND state IN {ACTIVE_TASKS_SQL}
            RETURNING id
        ), implicit AS ({cancel_implicit_sql("cancelled", ":reason")})
        UPDATE task_tries tt SET state = 'cancelling', reason = :reason
        FROM cancelled c
        WHERE tt.task_instance_id = c.id AND tt.state IN ('queued', 'running')
    """), {"ids": run_pks, "reason": reason})


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


async def run_document(conn: psycopg.AsyncConnection[Any], dag_id: str, run_id: str) -> str | None:
    """The run's public JSON document with its task instances (ordered by task id); see the module docstring."""
    cursor = await reading_cursor(conn).execute(_RUN_WITH_TASKS, (dag_id, run_id))
    row = await cursor.fetchone()
    return None if row is None else str(row[0])
