"""Every SQL statement of the leader's scheduling loop.

The loop (:mod:`leoflow.scheduler.service`) decides; this module reads and writes. Functions
take an ``AsyncConnection`` inside a transaction the caller owns and has already fenced with
:func:`leoflow.db.connection.fencing.check_term_async`.

Rules every write here follows:

- **Compare-and-set.** A state change names the state (and try number) it expects; a row that
  moved meanwhile (a user cancelled the run, a duplicate report, a racing ex-leader) is simply
  not updated, and callers act only on the ``RETURNING`` rows. A lost race is a no-op.
- **Batched.** Each statement handles a whole batch through ``unnest`` of parallel arrays, so a
  tick costs a handful of round trips whatever the batch size.
- **Bounded.** Every read has a ``LIMIT`` (keyset by ``id`` where it pages), and the hot scans
  are served by partial indexes (``ix_task_instances_ready``, ``ix_task_tries_live``,
  ``ix_dag_runs_active``) that only hold work in flight, so the cost of a tick does not grow
  with the number of waiting or finished rows.

Task-try states written here: ``queued`` (created with the queue transition), ``running``,
``success``/``failed`` (reported), ``cancelling`` (the executor must kill it: the run was
cancelled or the try timed out) and ``cancelled`` (killed). How runs and tasks *end* (completion,
``upstream_failed``, failures the scheduler contained) lives in :mod:`leoflow.db.completion_store`.

Values the scheduler reads from a DAG version's JSON spec are read so that no stored value can
make a statement fail for every row (a spec written by an older release, or by hand): scans cast
defensively, and specs and confs are returned as JSON *text* for the scheduler to decode per
entity, where one undecodable document fails only its own version or run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays
from leoflow.db.fragments import LIVE_TRIES_SQL, run_deadline_sql
from leoflow.db.queued_tries import TRY_ID_SEQUENCE
from leoflow.model.fairness import DEFAULT_POOL, MAX_PRIORITY, MIN_PRIORITY
from leoflow.model.tries import TryKey


@dataclass(frozen=True)
class DueDag:
    dag_id: str
    next_run_at: datetime
    schedule: str
    version_id: int
    timezone: str
    catchup: bool


@dataclass(slots=True)
class TaskInstanceRow:
    """A task instance as the scheduler reads it: its current state and try, and where it belongs.

    Not ``frozen``, like the other records a scheduling step builds by the hundred (rows read,
    transitions, tries queued, counts): a frozen dataclass sets each field through
    ``object.__setattr__``, 1.8 µs for twelve fields against 0.23 µs, and those constructors were
    a fifth of the leader's CPU under ``bench/scheduler.py``. Nothing mutates them; none is hashed.
    """

    id: int
    run_pk: int
    task_id: str
    state: str
    try_number: int
    max_tries: int
    dag_id: str
    run_id: str
    version_id: int


@dataclass(slots=True)
class ReadyTask(TaskInstanceRow):
    """A task instance that may be queued now (upstreams done, or its retry delay is over).

    The upstream counters let the queue check the task's trigger rule once more: a writer that
    reset task instances (a backfill's rerun, a clear) only has to leave the counters right.
    """

    upstream_successes: int = 0
    upstream_failures: int = 0
    upstream_skips: int = 0

    #: False: the row has no pool yet (an empty task, or written by an older release).
    classified: bool = True


@dataclass(frozen=True)
class StartableRun:
    run_pk: int
    version_id: int


@dataclass(slots=True)
class LiveTaskInstance(TaskInstanceRow):
    """A task instance locked for a status change."""

    started_at: datetime | None = None


@dataclass(slots=True)
class Transition:
    """One compare-and-set on ``task_instances``: from (expected, try_number) to new_state.

    Deadlines are durations (seconds from now): the database sets ``timeout_at`` /
    ``next_try_at`` on its own clock, so no leader's wall clock is compared with another's.
    """

    ti_id: int
    expected: str
    try_number: int
    new_state: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    timeout_after: float | None = None
    retry_after: float | None = None
    reason: str | None = None


@dataclass(slots=True)
class TryChange:
    """What the executor reported about one try (folded per try)."""

    ti_id: int
    try_number: int
    state: str
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    reason: str | None
    executor_ref: str | None


# --------------------------------------------------------------------------- DAG versions

async def load_specs(conn: AsyncConnection, version_ids: Sequence[int]) -> dict[int, str]:
    """Each version's spec as JSON text (the scheduler decodes and compiles it, one version at a time)."""
    rows = await conn.execute(text("SELECT id, spec::text AS spec FROM dag_versions "
                                   "WHERE id = ANY(CAST(:ids AS bigint[]))"), {"ids": list(version_ids)})
    return {int(r.id): str(r.spec) for r in rows}


# --------------------------------------------------------------------------- scheduled runs

async def due_dags(conn: AsyncConnection, now: datetime, limit: int) -> list[DueDag]:
    rows = await conn.execute(text("""
        SELECT d.dag_id, d.next_run_at, d.schedule, d.current_version_id AS version_id,
               coalesce(v.spec->>'timezone', 'UTC') AS timezone,
               coalesce(v.spec->'catchup' = 'true'::jsonb, false) AS catchup
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
    next_run_at: datetime
    run_ids: Sequence[str]
    logical_dates: Sequence[datetime]


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
                              created_at, updated_at, term)
        SELECT a.dag_id, x.run_id, a.version_id, 'scheduled', x.logical_date, 'queued', v.default_conf,
               :now, :now, :term
        FROM unnest(CAST(:run_dags AS text[]), CAST(:run_ids AS text[]), CAST(:dates AS timestamptz[]))
            WITH ORDINALITY AS x(dag_id, run_id, logical_date, n)
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
            ON CONFLICT (run_pk, task_id) DO NOTHING
            RETURNING id, run_pk, task_id, state, try_number, max_tries, pending_upstreams
        )
        SELECT s.id AS run_pk, s.dag_id, s.run_id, s.dag_version_id AS version_id, c.id, c.task_id, c.state,
               c.try_number, c.max_tries
        FROM started s LEFT JOIN created c ON c.run_pk = s.id AND c.pending_upstreams = 0
    """), {"ids": list(run_pks), "now": now, "term": term, "default_pool": DEFAULT_POOL,
           "min_priority": MIN_PRIORITY, "max_priority": MAX_PRIORITY})
    started: dict[int, None] = {}
    roots: list[ReadyTask] = []
    for r in rows:
        started[int(r.run_pk)] = None
        if r.id is not None:
            roots.append(ReadyTask(id=int(r.id), run_pk=int(r.run_pk), task_id=r.task_id, state=r.state,
                                   try_number=int(r.try_number), max_tries=int(r.max_tries), dag_id=r.dag_id,
                                   run_id=r.run_id, version_id=int(r.version_id)))
    return StartedRuns(list(started), roots)


# --------------------------------------------------------------------------- queueing

async def ready_task_instances(conn: AsyncConnection, limit: int) -> list[ReadyTask]:
    """Pending tasks with every upstream succeeded, and retries whose delay is over (database clock); oldest
    first (whatever their pool: the scheduler's isolation of a failing step bisects over them)."""
    rows = await conn.execute(text("""
        SELECT * FROM (
            (SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries,
                    r.dag_id, r.run_id, r.dag_version_id AS version_id, ti.upstream_successes,
                    ti.upstream_failures, ti.upstream_skips, ti.pool IS NOT NULL AS classified
             FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
             WHERE ti.state = 'pending' AND ti.pending_upstreams = 0
             ORDER BY ti.id LIMIT :limit)
            UNION ALL
            (SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries,
                    r.dag_id, r.run_id, r.dag_version_id AS version_id, 0, 0, 0, ti.pool IS NOT NULL
             FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
             WHERE ti.state = 'up_for_retry' AND ti.next_try_at <= now()
             ORDER BY ti.id LIMIT :limit)
        ) AS ready ORDER BY id LIMIT :limit
    """), {"limit": limit})
    return [ReadyTask(**r._mapping) for r in rows]


# --------------------------------------------------------------------------- status changes

async def lock_task_instances(conn: AsyncConnection, keys: Sequence[TryKey]) -> list[LiveTaskInstance]:
    """The task instances the keys refer to, row-locked in id order (no deadlock between batches)."""
    return await _task_instances_by_key(conn, keys, lock=True)


async def task_instances_by_key(conn: AsyncConnection, keys: Sequence[TryKey]) -> list[LiveTaskInstance]:
    """The task instances the keys refer to, read without a lock (a plan, not a change)."""
    return await _task_instances_by_key(conn, keys, lock=False)


async def _task_instances_by_key(conn: AsyncConnection, keys: Sequence[TryKey], *,
                                 lock: bool) -> list[LiveTaskInstance]:
    if not keys:
        return []
    rows = await conn.execute(text("""
        SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries, ti.started_at,
               r.dag_id, r.run_id, r.dag_version_id AS version_id
        FROM (SELECT DISTINCT * FROM unnest(CAST(:dags AS text[]), CAST(:runs AS text[]), CAST(:tasks AS text[]))
              AS k(dag_id, run_id, task_id)) AS k
        JOIN dag_runs r ON r.dag_id = k.dag_id AND r.run_id = k.run_id
        JOIN task_instances ti ON ti.run_pk = r.id AND ti.task_id = k.task_id
        ORDER BY ti.id
    """ + ("FOR UPDATE OF ti" if lock else "")),
        {"dags": [k.dag_id for k in keys], "runs": [k.run_id for k in keys], "tasks": [k.task_id for k in keys]})
    return [LiveTaskInstance(**r._mapping) for r in rows]


async def lock_task_instances_by_id(conn: AsyncConnection, ids: Sequence[int]) -> list[LiveTaskInstance]:
    rows = await conn.execute(text("""
        SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries, ti.started_at,
               r.dag_id, r.run_id, r.dag_version_id AS version_id
        FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
        WHERE ti.id = ANY(CAST(:ids AS bigint[]))
        ORDER BY ti.id
        FOR UPDATE OF ti
    """), {"ids": list(ids)})
    return [LiveTaskInstance(**r._mapping) for r in rows]


_TRANSITIONS = """
    UPDATE task_instances ti
    SET state = c.new_state, started_at = coalesce(c.started_at, ti.started_at), ended_at = c.ended_at,
        timeout_at = now() + make_interval(secs => c.timeout_after),
        next_try_at = now() + make_interval(secs => c.retry_after), reason = c.reason,
        updated_at = :now, term = :term
    FROM unnest(CAST(:ids AS bigint[]), CAST(:expected AS text[]), CAST(:tries AS int[]),
                CAST(:states AS text[]), CAST(:started AS timestamptz[]), CAST(:ended AS timestamptz[]),
                CAST(:timeouts AS float8[]), CAST(:next_tries AS float8[]),
                CAST(:reasons AS text[]))
         AS c(id, expected, try_number, new_state, started_at, ended_at, timeout_after, retry_after, reason)
    WHERE ti.id = c.id AND ti.state = c.expected AND ti.try_number = c.try_number
    RETURNING ti.id
"""

#: The reported tries, found by the unique (task_instance_id, try_number) index — or written, when
#: the report is the first word on a queued try whose row is implicit (ADR 0013,
#: :mod:`leoflow.db.queued_tries`): with the id, term and queue time its task instance keeps. Only a
#: live try changes: the conflict clause's condition, as a finished try is never reopened.
_TRY_CHANGES = f"""
    INSERT INTO task_tries AS tt (id, task_instance_id, try_number, state, term, queued_at, started_at, ended_at,
                                  exit_code, reason, executor_ref)
    SELECT CASE WHEN ti.try_number = c.try_number THEN coalesce(ti.queued_try_id, nextval({TRY_ID_SEQUENCE}))
                ELSE nextval({TRY_ID_SEQUENCE}) END,
           c.ti_id, c.try_number, c.state, ti.term, coalesce(ti.queued_at, now()), c.started_at, c.ended_at,
           c.exit_code, c.reason, c.executor_ref
    FROM unnest(CAST(:t_ids AS bigint[]), CAST(:t_tries AS int[]), CAST(:t_states AS text[]),
                CAST(:t_started AS timestamptz[]), CAST(:t_ended AS timestamptz[]), CAST(:t_codes AS int[]),
                CAST(:t_reasons AS text[]), CAST(:t_refs AS text[]))
         AS c(ti_id, try_number, state, started_at, ended_at, exit_code, reason, executor_ref)
    JOIN task_instances ti ON ti.id = c.ti_id
    -- a new row only for the task instance's implicit try; a report about any other try changes
    -- its row if it has one, and writes nothing if not (a stray try number is no try)
    WHERE (ti.try_number = c.try_number AND ti.state = 'queued' AND ti.queued_try_id IS NOT NULL)
       OR EXISTS (SELECT 1 FROM task_tries x WHERE x.task_instance_id = c.ti_id AND x.try_number = c.try_number)
    ON CONFLICT (task_instance_id, try_number) DO UPDATE
    SET state = CASE WHEN tt.state = 'cancelling' AND excluded.state = 'running' THEN 'cancelling'
                     -- the kill's own report may arrive before the scheduler marks the try killed
                     WHEN tt.state = 'cancelling' AND excluded.state = 'failed' THEN 'cancelled'
                     ELSE excluded.state END,
        started_at = coalesce(tt.started_at, excluded.started_at),
        ended_at = coalesce(tt.ended_at, excluded.ended_at),
        exit_code = coalesce(excluded.exit_code, tt.exit_code),
        reason = coalesce(tt.reason, excluded.reason),
        executor_ref = coalesce(tt.executor_ref, excluded.executor_ref)
    WHERE tt.state IN {LIVE_TRIES_SQL}
"""


def _transition_params(transitions: Sequence[Transition], now: datetime, term: int,
                       iso: dict[int, str]) -> dict[str, Any]:
    return {
        "ids": arrays.ints(t.ti_id for t in transitions), "expected": arrays.texts(t.expected for t in transitions),
        "tries": arrays.ints(t.try_number for t in transitions),
        "states": arrays.texts(t.new_state for t in transitions),
        "started": arrays.timestamps((t.started_at for t in transitions), iso),
        "ended": arrays.timestamps((t.ended_at for t in transitions), iso),
        "timeouts": arrays.floats(t.timeout_after for t in transitions),
        "next_tries": arrays.floats(t.retry_after for t in transitions),
        "reasons": arrays.texts(t.reason for t in transitions), "now": now, "term": term,
    }


def _try_params(changes: Sequence[TryChange], iso: dict[int, str]) -> dict[str, Any]:
    return {
        "t_ids": arrays.ints(c.ti_id for c in changes), "t_tries": arrays.ints(c.try_number for c in changes),
        "t_states": arrays.texts(c.state for c in changes),
        "t_started": arrays.timestamps((c.started_at for c in changes), iso),
        "t_ended": arrays.timestamps((c.ended_at for c in changes), iso),
        "t_codes": arrays.optional_ints(c.exit_code for c in changes),
        "t_reasons": arrays.texts(c.reason for c in changes), "t_refs": arrays.texts(c.executor_ref for c in changes),
    }


#: Built once: ``text()`` finds a statement's bind parameters with a regular expression on every
#: call (0.5 ms for the combined one), and every step that applies reports runs one of these.
_TRY_CHANGES_SQL = text(_TRY_CHANGES)
_TRANSITIONS_SQL = text(_TRANSITIONS)
_TRIES_AND_TRANSITIONS_SQL = text(
    f"WITH tries AS ({_TRY_CHANGES} RETURNING tt.id), changed AS ({_TRANSITIONS}) SELECT id FROM changed")


async def apply_transitions(conn: AsyncConnection, transitions: Sequence[Transition], now: datetime,
                            term: int, *, try_changes: Sequence[TryChange] = ()) -> set[int]:
    """Batched compare-and-set on task instances (plus, in the same statement, reported try facts).

    Returns the task instance ids actually changed. Try facts only move forward: a finished try is
    never reopened.
    """
    if not transitions and not try_changes:
        return set()
    iso: dict[int, str] = {}  # a report's time is in up to four arrays (arrays.timestamps)
    if not transitions:
        await conn.execute(_TRY_CHANGES_SQL, _try_params(try_changes, iso))
        return set()
    if not try_changes:
        rows = await conn.execute(_TRANSITIONS_SQL, _transition_params(transitions, now, term, iso))
        return {int(r.id) for r in rows}
    rows = await conn.execute(
        _TRIES_AND_TRANSITIONS_SQL,
        {**_transition_params(transitions, now, term, iso), **_try_params(try_changes, iso)})
    return {int(r.id) for r in rows}


async def timed_out_task_instances(conn: AsyncConnection, limit: int) -> list[int]:
    """Running tasks past their ``timeout_at`` — on the database's clock, which set it."""
    rows = await conn.execute(text("""
        SELECT id FROM task_instances WHERE state = 'running' AND timeout_at <= now() ORDER BY id LIMIT :limit
    """), {"limit": limit})
    return [int(r.id) for r in rows]


@dataclass(frozen=True)
class QueuedLaunch:
    """A try queued in the database, to be (re)submitted to the executor."""

    task_try_id: int
    task_instance_id: int
    key: TryKey
    version_id: int
    run_pk: int
    conf_json: str
    logical_date: datetime | None


async def queued_tries_after(conn: AsyncConnection, after_id: int, limit: int) -> list[QueuedLaunch]:
    """Queued tries of queued task instances, keyset-paged by task instance id (resubmitted after
    failover) — with their rows, or without when the rows are not written yet (ADR 0013)."""
    rows = await conn.execute(text("""
        SELECT coalesce(tt.id, ti.queued_try_id) AS id, ti.id AS task_instance_id, ti.try_number, ti.task_id,
               r.dag_id, r.run_id, r.dag_version_id, r.id AS run_pk, r.conf::text AS conf, r.logical_date
        FROM task_instances ti
        LEFT JOIN task_tries tt ON tt.task_instance_id = ti.id AND tt.try_number = ti.try_number
        JOIN dag_runs r ON r.id = ti.run_pk
        WHERE ti.state = 'queued' AND ti.id > :after AND coalesce(tt.state, 'queued') = 'queued'
          AND coalesce(tt.id, ti.queued_try_id) IS NOT NULL
        ORDER BY ti.id LIMIT :limit
    """), {"after": after_id, "limit": limit})
    return [QueuedLaunch(int(r.id), int(r.task_instance_id), TryKey(r.dag_id, r.run_id, r.task_id, int(r.try_number)),
                         int(r.dag_version_id), int(r.run_pk), str(r.conf), r.logical_date) for r in rows]
