"""Runs (``dag_runs``): triggered and cancelled by users, made due and started by the leader.

**The users' side** (:func:`trigger_run`, :func:`cancel_run`: the HTTP API, on any replica), as
for :mod:`leoflow.db.stores.dags`: every function takes a connection inside a transaction the
caller owns, raises :class:`~leoflow.errors.NotFound` / :class:`~leoflow.errors.Conflict` for bad
requests, and is not fenced. ``trigger_run`` and ``cancel_run`` send ``NOTIFY leoflow_wakeup``.

- Runs start ``queued``; their task instances are created by the leader when the run starts
  (``max_active_runs`` permitting), so a queued run has no task instances yet.
- Manual runs of a paused DAG are allowed and run: pausing stops *scheduled* runs only.
- A deleted DAG's runs take no commands: cancelling one answers 404.

**The leader's side** (:func:`due_dags`, :func:`create_due_runs`, :func:`startable_runs`,
:func:`start_runs`): scheduled runs are created and queued runs started in transactions the
caller has fenced, with the rules of :mod:`leoflow.db.stores.task_instances.transitions` (compare-and-set,
batched, bounded).

**The run's document, rendered by PostgreSQL** (:func:`run_document`). The busiest read of the
API is a run with its task instances (run pages and dashboards poll it; ``leoflow runs trigger
--wait`` too). Building the answer in SQL (``json_build_object``) and returning its text lets the
API pass the bytes through: no row objects, no datetime conversion, no ``json.dumps`` — the
difference between ~0.3 ms and ~1.5 ms of CPU per request (``bench/api.py``). The JSON has exactly
the fields and order of the Python-rendered answers in :mod:`leoflow.api.routes.runs`; timestamps
are ISO 8601 in UTC (the API's sessions run with ``TimeZone=UTC``). It takes a raw psycopg
connection from the API pool (:mod:`leoflow.db.connection.api_pool`) and returns ``None`` for a
missing run, so the route decides between 404s (:func:`leoflow.db.stores.dags.dag_exists`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.clock import Clock
from leoflow.db import arrays
from leoflow.db.connection.api_pool import reading_cursor
from leoflow.db.connection.wakeup import notify_wakeup
from leoflow.db.fragments import ACTIVE_RUNS_SQL, ACTIVE_TASKS_SQL, run_deadline_sql, task_summary_json_sql
from leoflow.db.queued_tries import cancel_implicit_sql
from leoflow.db.stores.task_instances.transitions import ReadyTask
from leoflow.errors import Conflict, NotFound
from leoflow.model.run_ids import manual_run_id
from leoflow.model.run_request import check_conf, check_run_id
from leoflow.model.spec.fairness import DEFAULT_POOL, MAX_PRIORITY, MIN_PRIORITY


async def trigger_run(conn: AsyncConnection, dag_id: str, *, run_id: str | None, conf: dict[str, Any],
                      clock: Clock, run_timeout_seconds: float | None = None,
                      logical_date: datetime | None = None) -> str:
    """Queue a manual run; returns its run id. Conflict if ``run_id`` exists, NotFound if no DAG.

    ``run_timeout_seconds`` (already validated) overrides the DAG's run deadline for this run.
    ``logical_date`` (already validated; default: now) is the moment the run is for, and both ends of
    its data interval. Without a ``run_id`` the run is named after it (``manual__<logical date>``),
    so a client that retries a trigger for a date gets a Conflict, not a second run for that date.
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
    logical = now if logical_date is None else logical_date.astimezone(UTC)
    wanted = run_id or manual_run_id(logical)
    for _ in range(3):
        inserted = (await conn.execute(text("""
            INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, conf,
                                  created_at, updated_at, run_timeout_seconds, data_interval_start, data_interval_end)
            VALUES (:dag_id, :run_id, :vid, 'manual', :logical, 'queued', CAST(:conf AS jsonb), :now, :now, :timeout,
                    :logical, :logical)
            ON CONFLICT (dag_id, run_id) DO NOTHING RETURNING run_id
        """), {"dag_id": dag_id, "run_id": wanted, "vid": dag[0], "now": now, "conf": conf_json,
               "timeout": run_timeout_seconds, "logical": logical})).first()
        if inserted is not None:
            await notify_wakeup(conn, dag_id)
            return wanted
        if run_id is not None:
            raise Conflict(f"run {run_id!r} of DAG {dag_id!r} already exists")
        if logical_date is not None:
            raise Conflict(f"a manual run of DAG {dag_id!r} for logical_date {logical.isoformat()} already "
                           f"exists ({wanted!r}); pass a run_id to make another")
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


async def cancel_replaced_runs(conn: AsyncConnection, new_runs: dict[str, Sequence[str]]) -> list[int]:
    """``overlap: replace``: cancel each DAG's queued and running runs but its new ones (``new_runs``:
    DAG id to the run ids just created), as :func:`cancel_runs` cancels any; returns their keys."""
    rows = await conn.execute(text(f"""
        SELECT r.id FROM dag_runs r
        JOIN unnest(CAST(:dag_ids AS text[])) AS d(dag_id) ON d.dag_id = r.dag_id
        WHERE r.state IN {ACTIVE_RUNS_SQL} AND (r.dag_id, r.run_id) NOT IN (
            SELECT * FROM unnest(CAST(:keep_dags AS text[]), CAST(:keep_runs AS text[])))
        FOR UPDATE OF r
    """), {"dag_ids": arrays.texts(new_runs), "keep_dags": arrays.texts(d for d, ids in new_runs.items() for _ in ids),
           "keep_runs": arrays.texts(r for ids in new_runs.values() for r in ids)})
    run_pks = [int(r.id) for r in rows]
    await cancel_runs(conn, run_pks, reason="replaced by a newer scheduled run (overlap: replace)")
    return run_pks


_RUN_WITH_TASKS = f"""
SELECT json_build_object(
         'dag_id', r.dag_id, 'run_id', r.run_id, 'run_type', r.run_type, 'state', r.state,
         'logical_date', r.logical_date, 'conf', r.conf, 'created_at', r.created_at,
         'started_at', r.started_at, 'ended_at', r.ended_at, 'updated_at', r.updated_at,
         'dag_version', v.version, 'reason', r.reason, 'backfill_id', r.backfill_id,
         'deadline_at', r.deadline_at, 'body_state', r.body_state, 'triggering_events', r.triggering_events,
         'data_interval_start', coalesce(r.data_interval_start, r.logical_date),
         'data_interval_end', coalesce(r.data_interval_end, r.logical_date),
         'tasks', (SELECT coalesce(json_agg({task_summary_json_sql("ti")} ORDER BY ti.task_id), '[]'::json)
                     FROM task_instances ti WHERE ti.run_pk = r.id AND ti.map_index <= 0))::text
  FROM dag_runs r JOIN dag_versions v ON v.id = r.dag_version_id
 WHERE r.dag_id = %s AND r.run_id = %s
"""


async def run_document(conn: psycopg.AsyncConnection[Any], dag_id: str, run_id: str) -> str | None:
    """The run's public JSON document with its task instances (ordered by task id); see the module docstring."""
    cursor = await reading_cursor(conn).execute(_RUN_WITH_TASKS, (dag_id, run_id))
    row = await cursor.fetchone()
    return None if row is None else str(row[0])


@dataclass(frozen=True)
class DueDag:
    dag_id: str
    next_run_at: datetime
    schedule: str
    version_id: int
    timezone: str
    catchup: bool
    #: The version's ``end_date``, ``starting_deadline_seconds`` and ``overlap`` (leoflow.model.spec.schedules),
    #: as stored text: the leader parses them per DAG, so one hand-edited version fails its own DAG, not the scan.
    end_date: str | None = None
    deadline: str | None = None
    overlap: str = "allow"
    #: A run of the DAG is queued or running (read only for ``overlap: skip|replace``).
    active: bool = False


@dataclass(frozen=True)
class StartableRun:
    run_pk: int
    version_id: int


# --------------------------------------------------------------------------- scheduled runs

async def due_dags(conn: AsyncConnection, now: datetime, limit: int) -> list[DueDag]:
    rows = await conn.execute(text("""
        SELECT d.dag_id, d.next_run_at, d.schedule, d.current_version_id AS version_id,
               coalesce(v.spec->>'timezone', 'UTC') AS timezone,
               coalesce(v.spec->'catchup' = 'true'::jsonb, false) AS catchup,
               v.spec->>'end_date' AS end_date, v.spec->>'starting_deadline_seconds' AS deadline,
               coalesce(v.spec->>'overlap', 'allow') AS overlap,
               -- Only DAGs with an overlap rule pay for the probe (a CASE evaluates its branch lazily).
               CASE WHEN v.spec ? 'overlap' THEN EXISTS (
                   SELECT 1 FROM dag_runs r WHERE r.dag_id = d.dag_id AND r.state IN ('queued', 'running'))
               ELSE false END AS active
        FROM dags d JOIN dag_versions v ON v.id = d.current_version_id
        WHERE NOT d.paused AND NOT d.deleted AND d.next_run_at <= :now AND d.schedule IS NOT NULL
        ORDER BY d.next_run_at, d.dag_id
        LIMIT :limit
    """), {"now": now, "limit": limit})
    return [DueDag(**r._mapping) for r in rows]


@dataclass(slots=True)
class PlannedRuns:
    """One due DAG's plan: its runs to create and where ``next_run_at`` moves (from ``expected``)."""

    dag_id: str
    version_id: int
    expected: datetime
    next_run_at: datetime | None
    run_ids: Sequence[str]
    logical_dates: Sequence[datetime]
    #: Each run's ``data_interval_start`` (its end is its logical date).
    interval_starts: Sequence[datetime] = ()


async def create_due_runs(conn: AsyncConnection, plans: Sequence[PlannedRuns], now: datetime,
                          term: int) -> dict[str, int]:
    """Every planned DAG's runs inserted and its ``next_run_at`` advanced, in one statement.

    Returns, for each DAG whose ``next_run_at`` moved, how many runs were inserted (0: they
    existed already). The advance is a compare-and-set on ``next_run_at`` *and* the planned
    version, and runs are inserted only for the DAGs it moved: a DAG re-applied, paused or
    deleted since the scan gets nothing now and is planned again on the next tick. Inserts are
    idempotent by run id and logical date (``ON CONFLICT DO NOTHING``), so a step redone after a
    crash or a bisection creates nothing twice. Their conf is the version's ``default_conf``
    (the defaults of the DAG's ``params``); rows keep the plans' order, so run ids (and the
    order runs start in) follow the due order.
    """
    if not plans:
        return {}
    seen: dict[int, str] = {}
    run_dags = [p.dag_id for p in plans for _ in p.run_ids]
    result = await conn.execute(_CREATE_DUE_RUNS, {
        "dag_ids": arrays.texts(p.dag_id for p in plans), "versions": arrays.ints(p.version_id for p in plans),
        "expected": arrays.timestamps((p.expected for p in plans), seen),
        "next": arrays.timestamps((p.next_run_at for p in plans), seen),
        "run_dags": arrays.texts(run_dags), "run_ids": arrays.texts(r for p in plans for r in p.run_ids),
        "dates": arrays.timestamps((d for p in plans for d in p.logical_dates), seen),
        "starts": arrays.timestamps((s for p in plans for s in p.interval_starts), seen),
        "now": now, "term": term})
    return {str(r.dag_id): int(r.created) for r in result}


_CREATE_DUE_RUNS = text("""
    WITH plan AS (
        SELECT * FROM unnest(CAST(:dag_ids AS text[]), CAST(:versions AS bigint[]),
                             CAST(:expected AS timestamptz[]), CAST(:next AS timestamptz[]))
            AS p(dag_id, version_id, expected, next_run_at)
    ), advanced AS (
        UPDATE dags d SET next_run_at = p.next_run_at
        FROM plan p
        WHERE d.dag_id = p.dag_id AND d.next_run_at = p.expected AND d.current_version_id = p.version_id
          AND NOT d.deleted AND NOT d.paused
        RETURNING d.dag_id, d.current_version_id AS version_id
    ), inserted AS (
        INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, conf,
                              created_at, updated_at, term, data_interval_start, data_interval_end)
        SELECT a.dag_id, x.run_id, a.version_id, 'scheduled', x.logical_date, 'queued', v.default_conf,
               :now, :now, :term, x.interval_start, x.logical_date
        FROM unnest(CAST(:run_dags AS text[]), CAST(:run_ids AS text[]), CAST(:dates AS timestamptz[]),
                    CAST(:starts AS timestamptz[]))
            WITH ORDINALITY AS x(dag_id, run_id, logical_date, interval_start, n)
        JOIN advanced a ON a.dag_id = x.dag_id
        JOIN dag_versions v ON v.id = a.version_id
        ORDER BY x.n
        ON CONFLICT DO NOTHING
        RETURNING dag_id
    )
    SELECT a.dag_id, coalesce(c.created, 0) AS created
    FROM advanced a LEFT JOIN (SELECT dag_id, count(*) AS created FROM inserted GROUP BY dag_id) c
        ON c.dag_id = a.dag_id
""")


# --------------------------------------------------------------------------- starting runs

#: ``max_active_runs`` of a version, read so that no stored value can fail the scan for every DAG.
_MAX_ACTIVE_RUNS = """
    CASE WHEN jsonb_typeof(v.spec->'max_active_runs') = 'number'
         THEN least(greatest((v.spec->>'max_active_runs')::numeric, 0), 2147483647)::int
         ELSE 16 END"""


async def startable_runs(conn: AsyncConnection, limit: int) -> list[StartableRun]:
    """Queued runs that ``max_active_runs`` (of the DAG's current version) lets start, oldest first.

    Reads what it may start, not the backlog: the DAGs with queued runs are found by skipping
    through ``ix_dag_runs_active`` one DAG at a time, and for each, its running count and its
    oldest queued runs are two ranges of that index (``dag_id, state, id``). Ranking every queued
    run instead cost 0.65 s a call with 100,000 of them waiting, on every tick that finished a run.
    """
    rows = await conn.execute(_STARTABLE, {"limit": limit})
    return [StartableRun(int(r.id), int(r.dag_version_id)) for r in rows]


#: ``state = 'queued'`` for :data:`_STARTABLE`, written so that only ``ix_dag_runs_active``
#: (``dag_id, state, id``) returns the rows in the order the statement asks for (``r.state``
#: before ``r.id``): with an equality the planner drops ``state`` from that order and may walk the
#: primary key instead, filtering (15 ms to find 4 runs behind 100,000 of another DAG, and the
#: whole history on a database that has one). The IN list proves the partial index's predicate.
_QUEUED = "r.state IN ('queued', 'running') AND r.state >= 'queued' AND r.state <= 'queued'"

_STARTABLE = text(f"""
    WITH RECURSIVE queued_dags(dag_id) AS (
        SELECT ''::varchar  -- before every DAG id; joins no DAG
        UNION ALL
        SELECT (SELECT r.dag_id::varchar FROM dag_runs r WHERE r.dag_id > q.dag_id AND {_QUEUED}
                ORDER BY r.dag_id, r.state LIMIT 1)
        FROM queued_dags q WHERE q.dag_id IS NOT NULL
    )
    SELECT s.id, s.dag_version_id
    FROM queued_dags q
    JOIN dags d ON d.dag_id = q.dag_id
    JOIN dag_versions v ON v.id = d.current_version_id
    CROSS JOIN LATERAL (
        SELECT r.id, r.dag_version_id FROM dag_runs r
        WHERE r.dag_id = q.dag_id AND {_QUEUED}
        ORDER BY r.state, r.id
        LIMIT greatest({_MAX_ACTIVE_RUNS} - (SELECT count(*) FROM dag_runs a
                                            WHERE a.dag_id = q.dag_id AND a.state = 'running'), 0)
    ) s
    ORDER BY s.id
    LIMIT :limit
""")


@dataclass(frozen=True)
class StartedRuns:
    """Runs started by :func:`start_runs`, and their tasks without upstreams (ready at once)."""

    run_pks: list[int]
    roots: list[ReadyTask]


async def start_runs(conn: AsyncConnection, run_pks: Sequence[int], now: datetime, term: int) -> StartedRuns:
    """queued → running, creating each run's task instances from its version (whose spec the caller compiled).

    A run with a ``run_timeout_seconds`` (its own from the trigger, else its version's) gets its
    ``deadline_at`` here, from the database's clock: the deadline counts from the run's start
    (not from its queueing) and does not depend on any leader's wall clock.
    """
    rows = await conn.execute(text(f"""
        WITH started AS (
            UPDATE dag_runs r SET state = 'running', started_at = :now, updated_at = :now, term = :term,
                   deadline_at = {run_deadline_sql("r", "v")}
            FROM dag_versions v
            WHERE r.id = ANY(CAST(:ids AS bigint[])) AND r.state = 'queued' AND v.id = r.dag_version_id
            RETURNING r.id, r.dag_id, r.run_id, r.dag_version_id
        ), version_tasks AS (
            SELECT v.id AS version_id, e.t, e.ord
            FROM (SELECT DISTINCT dag_version_id FROM started) AS sv
            JOIN dag_versions v ON v.id = sv.dag_version_id
            CROSS JOIN LATERAL jsonb_array_elements(v.spec->'tasks') WITH ORDINALITY AS e(t, ord)
        ), upstreams AS (  -- the tasks something depends on (the others are leaves), once per version
            SELECT DISTINCT vt.version_id, d.task_id
            FROM version_tasks vt
            CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(vt.t->'depends_on', '[]'::jsonb)) AS d(task_id)
        ), created AS (
            INSERT INTO task_instances (run_pk, task_id, state, max_tries, pending_upstreams, is_leaf, term,
                                        updated_at, pool, priority)
            SELECT s.id, vt.t->>'id', 'pending', coalesce((vt.t->>'retries')::int, 0) + 1,
                   jsonb_array_length(coalesce(vt.t->'depends_on', '[]'::jsonb)), u.task_id IS NULL, :term, :now,
                   CASE WHEN vt.t->>'kind' = 'empty' THEN NULL
                        ELSE left(coalesce(vt.t->>'pool', :default_pool), 50) END,
                   CASE WHEN jsonb_typeof(vt.t->'priority') = 'number'
                        THEN least(greatest((vt.t->>'priority')::numeric, :min_priority), :max_priority)::int
                        ELSE 0 END
            FROM started s
            JOIN version_tasks vt ON vt.version_id = s.dag_version_id
            LEFT JOIN upstreams u ON u.version_id = vt.version_id AND u.task_id = vt.t->>'id'
            -- ids in run order, then the spec's task order: equal priorities go oldest first
            ORDER BY s.id, vt.ord
            ON CONFLICT (run_pk, task_id, map_index) DO NOTHING
            RETURNING id, run_pk, task_id, state, try_number, max_tries, pending_upstreams
        )
        -- The runs, then their roots, as two lists rather than a join: the planner estimates one
        -- row per CTE, and its nested loop over 500 runs x 500 roots was half the statement's time.
        SELECT true AS is_run, s.id AS run_pk, s.dag_id, s.run_id, s.dag_version_id AS version_id,
               NULL::bigint AS id, NULL::varchar AS task_id, NULL::varchar AS state, NULL::int AS try_number,
               NULL::int AS max_tries
        FROM started s
        UNION ALL
        SELECT false, c.run_pk, NULL, NULL, NULL, c.id, c.task_id, c.state, c.try_number, c.max_tries
        FROM created c WHERE c.pending_upstreams = 0
    """), {"ids": list(run_pks), "now": now, "term": term, "default_pool": DEFAULT_POOL,
           "min_priority": MIN_PRIORITY, "max_priority": MAX_PRIORITY})
    started: dict[int, tuple[str, str, int]] = {}
    root_rows = []
    for r in rows:
        if r.is_run:
            started[int(r.run_pk)] = (r.dag_id, r.run_id, int(r.version_id))
        else:
            root_rows.append(r)
    roots: list[ReadyTask] = []
    for r in root_rows:
        dag_id, run_id, version_id = started[int(r.run_pk)]
        roots.append(ReadyTask(id=int(r.id), run_pk=int(r.run_pk), task_id=r.task_id, state=r.state,
                               try_number=int(r.try_number), max_tries=int(r.max_tries), dag_id=dag_id,
                               run_id=run_id, version_id=version_id))
    return StartedRuns(list(started), roots)
