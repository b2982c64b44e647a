"""Every SQL statement of the leader's scheduling loop.

The loop (:mod:`leoflow.scheduler.service`) decides; this module reads and writes. Functions
take an ``AsyncConnection`` inside a transaction the caller owns and has already fenced with
:func:`leoflow.db.fencing.check_term_async`.

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
cancelled or the try timed out) and ``cancelled`` (killed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.models import ACTIVE_RUNS_SQL, ACTIVE_TASKS_SQL, LIVE_TRIES_SQL, SLOT_TASKS_SQL
from leoflow.model.run_context import RunContext
from leoflow.model.tries import TryKey


@dataclass(frozen=True)
class DueDag:
    dag_id: str
    next_run_at: datetime
    schedule: str
    version_id: int
    timezone: str
    catchup: bool


@dataclass(frozen=True)
class TaskInstanceRow:
    """A task instance as the scheduler reads it: its current state and try, and where it belongs."""

    id: int
    run_pk: int
    task_id: str
    state: str
    try_number: int
    max_tries: int
    dag_id: str
    run_id: str
    version_id: int


@dataclass(frozen=True)
class ReadyTask(TaskInstanceRow):
    """A task instance that may be queued now (upstreams done, or its retry delay is over)."""


@dataclass(frozen=True)
class QueuedTry:
    task_instance_id: int
    task_try_id: int
    try_number: int


@dataclass(frozen=True)
class LiveTaskInstance(TaskInstanceRow):
    """A task instance locked for a status change."""

    started_at: datetime | None = None


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class TryToKill:
    task_try_id: int
    key: TryKey


@dataclass(frozen=True)
class FinishedRun:
    run_pk: int
    dag_id: str
    run_id: str
    state: str


# --------------------------------------------------------------------------- DAG versions

async def load_specs(conn: AsyncConnection, version_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    rows = await conn.execute(text("SELECT id, spec FROM dag_versions WHERE id = ANY(CAST(:ids AS bigint[]))"),
                              {"ids": list(version_ids)})
    return {int(r.id): r.spec for r in rows}


# --------------------------------------------------------------------------- scheduled runs

async def due_dags(conn: AsyncConnection, now: datetime, limit: int) -> list[DueDag]:
    rows = await conn.execute(text("""
        SELECT d.dag_id, d.next_run_at, d.schedule, d.current_version_id AS version_id,
               coalesce(v.spec->>'timezone', 'UTC') AS timezone,
               coalesce((v.spec->>'catchup')::boolean, false) AS catchup
        FROM dags d JOIN dag_versions v ON v.id = d.current_version_id
        WHERE NOT d.paused AND NOT d.deleted AND d.next_run_at <= :now AND d.schedule IS NOT NULL
        ORDER BY d.next_run_at, d.dag_id
        LIMIT :limit
    """), {"now": now, "limit": limit})
    return [DueDag(**r._mapping) for r in rows]


async def create_scheduled_runs(conn: AsyncConnection, dag: DueDag, run_ids: Sequence[str],
                                logical_dates: Sequence[datetime], now: datetime, term: int) -> int:
    """Insert scheduled runs; an existing (dag, logical date) or run id is skipped. Returns inserts.

    Their conf is the version's ``default_conf`` (the defaults of the DAG's ``params``).
    """
    result = await conn.execute(text("""
        INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, conf,
                              created_at, updated_at, term)
        SELECT :dag_id, x.run_id, :vid, 'scheduled', x.logical_date, 'queued', v.default_conf, :now, :now, :term
        FROM unnest(CAST(:run_ids AS text[]), CAST(:dates AS timestamptz[])) AS x(run_id, logical_date)
        JOIN dag_versions v ON v.id = :vid
        ON CONFLICT DO NOTHING
        RETURNING id
    """), {"dag_id": dag.dag_id, "vid": dag.version_id, "run_ids": list(run_ids), "dates": list(logical_dates),
           "now": now, "term": term})
    return len(result.all())


async def advance_next_run(conn: AsyncConnection, dag_id: str, expected: datetime, new: datetime) -> bool:
    """Move ``next_run_at`` forward, only if nobody (a re-apply) changed it meanwhile."""
    result = await conn.execute(text("""
        UPDATE dags SET next_run_at = :new
        WHERE dag_id = :dag_id AND next_run_at = :expected AND NOT deleted
        RETURNING dag_id
    """), {"dag_id": dag_id, "expected": expected, "new": new})
    return result.first() is not None


# --------------------------------------------------------------------------- starting runs

async def startable_runs(conn: AsyncConnection, limit: int) -> list[int]:
    """Queued runs that ``max_active_runs`` (of the DAG's current version) lets start, oldest first."""
    rows = await conn.execute(text(f"""
        WITH active AS (
            SELECT dag_id, count(*) FILTER (WHERE state = 'running') AS running
            FROM dag_runs WHERE state IN {ACTIVE_RUNS_SQL} GROUP BY dag_id
        ), ranked AS (
            SELECT r.id, r.dag_id, row_number() OVER (PARTITION BY r.dag_id ORDER BY r.id) AS rank
            FROM dag_runs r WHERE r.state = 'queued'
        )
        SELECT ranked.id
        FROM ranked
        JOIN active ON active.dag_id = ranked.dag_id
        JOIN dags d ON d.dag_id = ranked.dag_id
        JOIN dag_versions v ON v.id = d.current_version_id
        WHERE ranked.rank <= coalesce((v.spec->>'max_active_runs')::int, 16) - active.running
        ORDER BY ranked.id
        LIMIT :limit
    """), {"limit": limit})
    return [int(r.id) for r in rows]


async def start_runs(conn: AsyncConnection, run_pks: Sequence[int], now: datetime, term: int) -> list[int]:
    """queued → running, creating each run's task instances from its version. Returns started ids."""
    rows = await conn.execute(text("""
        WITH started AS (
            UPDATE dag_runs SET state = 'running', started_at = :now, updated_at = :now, term = :term
            WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'queued'
            RETURNING id, dag_version_id
        ), created AS (
            INSERT INTO task_instances (run_pk, task_id, state, max_tries, pending_upstreams, term, updated_at)
            SELECT s.id, t->>'id', 'pending', coalesce((t->>'retries')::int, 0) + 1,
                   jsonb_array_length(coalesce(t->'depends_on', '[]'::jsonb)), :term, :now
            FROM started s
            JOIN dag_versions v ON v.id = s.dag_version_id
            CROSS JOIN LATERAL jsonb_array_elements(v.spec->'tasks') AS t
            ON CONFLICT (run_pk, task_id) DO NOTHING
        )
        SELECT id FROM started
    """), {"ids": list(run_pks), "now": now, "term": term})
    return [int(r.id) for r in rows]


# --------------------------------------------------------------------------- queueing

async def count_slots_in_use(conn: AsyncConnection) -> int:
    """Task instances counted against ``LEOFLOW_PARALLELISM`` (queued or running)."""
    return int((await conn.execute(text(
        f"SELECT count(*) FROM task_instances WHERE state IN {SLOT_TASKS_SQL}"))).scalar_one())


async def ready_task_instances(conn: AsyncConnection, limit: int) -> list[ReadyTask]:
    """Pending tasks with every upstream succeeded, and retries whose delay is over (database clock)."""
    rows = await conn.execute(text("""
        SELECT * FROM (
            (SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries,
                    r.dag_id, r.run_id, r.dag_version_id AS version_id
             FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
             WHERE ti.state = 'pending' AND ti.pending_upstreams = 0
             ORDER BY ti.id LIMIT :limit)
            UNION ALL
            (SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries,
                    r.dag_id, r.run_id, r.dag_version_id AS version_id
             FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
             WHERE ti.state = 'up_for_retry' AND ti.next_try_at <= now()
             ORDER BY ti.id LIMIT :limit)
        ) AS ready ORDER BY id LIMIT :limit
    """), {"limit": limit})
    return [ReadyTask(**r._mapping) for r in rows]


def _run_context(row: Any) -> RunContext:
    """A ``dag_runs`` row's ``conf`` and ``logical_date`` columns as the context tries receive."""
    return RunContext(conf=row.conf or {}, logical_date=row.logical_date)


async def run_contexts(conn: AsyncConnection, run_pks: Iterable[int]) -> dict[int, RunContext]:
    """The conf and logical date of each run, for the environment of the tries being launched."""
    wanted = sorted(set(run_pks))
    if not wanted:
        return {}
    rows = await conn.execute(
        text("SELECT id, conf, logical_date FROM dag_runs WHERE id = ANY(CAST(:ids AS bigint[]))"), {"ids": wanted})
    return {r.id: _run_context(r) for r in rows}


async def queue_task_instances(conn: AsyncConnection, tasks: Sequence[ReadyTask], now: datetime,
                               term: int) -> list[QueuedTry]:
    """CAS pending/up_for_retry → queued, bump the try number and create the try row."""
    if not tasks:
        return []
    rows = await conn.execute(text("""
        WITH c AS (
            SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:states AS text[]), CAST(:tries AS int[]))
                AS c(id, state, try_number)
        ), q AS (
            UPDATE task_instances ti
            SET state = 'queued', try_number = ti.try_number + 1, queued_at = :now, started_at = NULL,
                ended_at = NULL, timeout_at = NULL, next_try_at = NULL, reason = NULL, updated_at = :now,
                term = :term
            FROM c
            WHERE ti.id = c.id AND ti.state = c.state AND ti.try_number = c.try_number
              AND (ti.state = 'up_for_retry' OR ti.pending_upstreams = 0)
            RETURNING ti.id, ti.try_number
        )
        INSERT INTO task_tries (task_instance_id, try_number, state, term, queued_at)
        SELECT id, try_number, 'queued', :term, :now FROM q
        RETURNING id, task_instance_id, try_number
    """), {"ids": [t.id for t in tasks], "states": [t.state for t in tasks],
           "tries": [t.try_number for t in tasks], "now": now, "term": term})
    return [QueuedTry(task_instance_id=int(r.task_instance_id), task_try_id=int(r.id),
                      try_number=int(r.try_number)) for r in rows]


async def succeed_empty_tasks(conn: AsyncConnection, ids: Sequence[int], now: datetime,
                              term: int) -> list[tuple[int, int, str]]:
    """CAS pending → success for ``kind: empty`` tasks. Returns (id, run_pk, task_id) applied."""
    if not ids:
        return []
    rows = await conn.execute(text("""
        UPDATE task_instances SET state = 'success', queued_at = :now, started_at = :now, ended_at = :now,
               updated_at = :now, term = :term
        WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'pending' AND pending_upstreams = 0
        RETURNING id, run_pk, task_id
    """), {"ids": list(ids), "now": now, "term": term})
    return [(int(r.id), int(r.run_pk), str(r.task_id)) for r in rows]


async def release_downstream(conn: AsyncConnection, pairs: Sequence[tuple[int, str]], now: datetime) -> None:
    """One upstream of each (run_pk, task_id) succeeded: decrement its ``pending_upstreams``."""
    if not pairs:
        return
    await conn.execute(text("""
        UPDATE task_instances ti SET pending_upstreams = ti.pending_upstreams - d.n, updated_at = :now
        FROM (SELECT run_pk, task_id, count(*) AS n
              FROM unnest(CAST(:runs AS bigint[]), CAST(:tasks AS text[])) AS x(run_pk, task_id)
              GROUP BY run_pk, task_id) AS d
        WHERE ti.run_pk = d.run_pk AND ti.task_id = d.task_id AND ti.state = 'pending'
    """), {"runs": [p[0] for p in pairs], "tasks": [p[1] for p in pairs], "now": now})


async def mark_upstream_failed(conn: AsyncConnection, pairs: Sequence[tuple[int, str]], now: datetime,
                               term: int) -> int:
    """pending → upstream_failed for each (run_pk, task_id). Returns rows changed."""
    if not pairs:
        return 0
    result = await conn.execute(text("""
        UPDATE task_instances ti SET state = 'upstream_failed', ended_at = :now, updated_at = :now, term = :term,
               reason = 'an upstream task failed'
        FROM (SELECT DISTINCT * FROM unnest(CAST(:runs AS bigint[]), CAST(:tasks AS text[])) AS x(run_pk, task_id)) d
        WHERE ti.run_pk = d.run_pk AND ti.task_id = d.task_id AND ti.state = 'pending'
        RETURNING ti.id
    """), {"runs": [p[0] for p in pairs], "tasks": [p[1] for p in pairs], "now": now, "term": term})
    return len(result.all())


# --------------------------------------------------------------------------- status changes

async def lock_task_instances(conn: AsyncConnection, keys: Sequence[TryKey]) -> list[LiveTaskInstance]:
    """The task instances the keys refer to, row-locked in id order (no deadlock between batches)."""
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
        FOR UPDATE OF ti
    """), {"dags": [k.dag_id for k in keys], "runs": [k.run_id for k in keys], "tasks": [k.task_id for k in keys]})
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

_TRY_CHANGES = f"""
    UPDATE task_tries tt
    SET state = CASE WHEN tt.state = 'cancelling' AND c.state = 'running' THEN 'cancelling'
                     -- the kill's own report may arrive before the scheduler marks the try killed
                     WHEN tt.state = 'cancelling' AND c.state = 'failed' THEN 'cancelled'
                     ELSE c.state END,
        started_at = coalesce(tt.started_at, c.started_at),
        ended_at = coalesce(tt.ended_at, c.ended_at),
        exit_code = coalesce(c.exit_code, tt.exit_code),
        reason = coalesce(tt.reason, c.reason),
        executor_ref = coalesce(tt.executor_ref, c.executor_ref)
    FROM unnest(CAST(:t_ids AS bigint[]), CAST(:t_tries AS int[]), CAST(:t_states AS text[]),
                CAST(:t_started AS timestamptz[]), CAST(:t_ended AS timestamptz[]), CAST(:t_codes AS int[]),
                CAST(:t_reasons AS text[]), CAST(:t_refs AS text[]))
         AS c(ti_id, try_number, state, started_at, ended_at, exit_code, reason, executor_ref)
    WHERE tt.task_instance_id = c.ti_id AND tt.try_number = c.try_number
      AND tt.state IN {LIVE_TRIES_SQL}
"""


def _transition_params(transitions: Sequence[Transition], now: datetime, term: int) -> dict[str, Any]:
    return {
        "ids": [t.ti_id for t in transitions], "expected": [t.expected for t in transitions],
        "tries": [t.try_number for t in transitions], "states": [t.new_state for t in transitions],
        "started": [t.started_at for t in transitions], "ended": [t.ended_at for t in transitions],
        "timeouts": [t.timeout_after for t in transitions], "next_tries": [t.retry_after for t in transitions],
        "reasons": [t.reason for t in transitions], "now": now, "term": term,
    }


def _try_params(changes: Sequence[TryChange]) -> dict[str, Any]:
    return {
        "t_ids": [c.ti_id for c in changes], "t_tries": [c.try_number for c in changes],
        "t_states": [c.state for c in changes], "t_started": [c.started_at for c in changes],
        "t_ended": [c.ended_at for c in changes], "t_codes": [c.exit_code for c in changes],
        "t_reasons": [c.reason for c in changes], "t_refs": [c.executor_ref for c in changes],
    }


async def apply_transitions(conn: AsyncConnection, transitions: Sequence[Transition], now: datetime,
                            term: int, *, try_changes: Sequence[TryChange] = ()) -> set[int]:
    """Batched compare-and-set on task instances (plus, in the same statement, reported try facts).

    Returns the task instance ids actually changed. Try facts only move forward: a finished try is
    never reopened.
    """
    if not transitions and not try_changes:
        return set()
    if not transitions:
        await conn.execute(text(_TRY_CHANGES), _try_params(try_changes))
        return set()
    if not try_changes:
        rows = await conn.execute(text(_TRANSITIONS), _transition_params(transitions, now, term))
        return {int(r.id) for r in rows}
    rows = await conn.execute(
        text(f"WITH tries AS ({_TRY_CHANGES} RETURNING tt.id), changed AS ({_TRANSITIONS}) SELECT id FROM changed"),
        {**_transition_params(transitions, now, term), **_try_params(try_changes)})
    return {int(r.id) for r in rows}


async def timed_out_task_instances(conn: AsyncConnection, limit: int) -> list[int]:
    """Running tasks past their ``timeout_at`` — on the database's clock, which set it."""
    rows = await conn.execute(text("""
        SELECT id FROM task_instances WHERE state = 'running' AND timeout_at <= now() ORDER BY id LIMIT :limit
    """), {"limit": limit})
    return [int(r.id) for r in rows]


async def request_kill(conn: AsyncConnection, tries: Sequence[tuple[int, int]], reason: str) -> None:
    """Flag live tries (ti_id, try_number) ``cancelling``: the leader asks the executor to kill them."""
    if not tries:
        return
    await conn.execute(text("""
        UPDATE task_tries tt SET state = 'cancelling', reason = coalesce(tt.reason, :reason)
        FROM unnest(CAST(:ids AS bigint[]), CAST(:tries AS int[])) AS c(ti_id, try_number)
        WHERE tt.task_instance_id = c.ti_id AND tt.try_number = c.try_number AND tt.state IN ('queued', 'running')
    """), {"ids": [t[0] for t in tries], "tries": [t[1] for t in tries], "reason": reason})


async def tries_to_kill(conn: AsyncConnection, limit: int) -> list[TryToKill]:
    rows = await conn.execute(text("""
        SELECT tt.id, r.dag_id, r.run_id, ti.task_id, tt.try_number
        FROM task_tries tt
        JOIN task_instances ti ON ti.id = tt.task_instance_id
        JOIN dag_runs r ON r.id = ti.run_pk
        WHERE tt.state = 'cancelling'
        ORDER BY tt.id LIMIT :limit
    """), {"limit": limit})
    return [TryToKill(int(r.id), TryKey(r.dag_id, r.run_id, r.task_id, int(r.try_number))) for r in rows]


async def mark_tries_killed(conn: AsyncConnection, task_try_ids: Sequence[int], now: datetime) -> None:
    await conn.execute(text("""
        UPDATE task_tries SET state = 'cancelled', ended_at = coalesce(ended_at, :now)
        WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'cancelling'
    """), {"ids": list(task_try_ids), "now": now})


@dataclass(frozen=True)
class QueuedLaunch:
    """A try queued in the database, to be (re)submitted to the executor."""

    task_try_id: int
    task_instance_id: int
    key: TryKey
    version_id: int
    run: RunContext


async def queued_tries_after(conn: AsyncConnection, after_id: int, limit: int) -> list[QueuedLaunch]:
    """Queued tries of queued task instances, keyset-paged by try id (resubmitted after failover)."""
    rows = await conn.execute(text("""
        SELECT tt.id, tt.task_instance_id, tt.try_number, ti.task_id, r.dag_id, r.run_id,
               r.dag_version_id, r.conf, r.logical_date
        FROM task_tries tt
        JOIN task_instances ti ON ti.id = tt.task_instance_id AND ti.try_number = tt.try_number
        JOIN dag_runs r ON r.id = ti.run_pk
        WHERE tt.state = 'queued' AND ti.state = 'queued' AND tt.id > :after
        ORDER BY tt.id LIMIT :limit
    """), {"after": after_id, "limit": limit})
    return [QueuedLaunch(int(r.id), int(r.task_instance_id), TryKey(r.dag_id, r.run_id, r.task_id, int(r.try_number)),
                         int(r.dag_version_id), _run_context(r)) for r in rows]


# --------------------------------------------------------------------------- finishing runs

async def finish_runs(conn: AsyncConnection, run_pks: Sequence[int], now: datetime, term: int) -> list[FinishedRun]:
    """running → success/failed for runs whose task instances are all final."""
    if not run_pks:
        return []
    rows = await conn.execute(text(f"""
        WITH s AS (
            SELECT run_pk, bool_and(state = 'success') AS ok, bool_or(state IN {ACTIVE_TASKS_SQL}) AS busy
            FROM task_instances WHERE run_pk = ANY(CAST(:ids AS bigint[])) GROUP BY run_pk
        )
        UPDATE dag_runs r SET state = CASE WHEN s.ok THEN 'success' ELSE 'failed' END,
               ended_at = :now, updated_at = :now, term = :term
        FROM s
        WHERE r.id = s.run_pk AND NOT s.busy AND r.state = 'running'
        RETURNING r.id, r.dag_id, r.run_id, r.state
    """), {"ids": list(run_pks), "now": now, "term": term})
    return [FinishedRun(int(r.id), r.dag_id, r.run_id, r.state) for r in rows]


async def running_runs_after(conn: AsyncConnection, after_id: int, limit: int) -> list[int]:
    """Keyset page of running runs (the periodic completion sweep)."""
    rows = await conn.execute(text("""
        SELECT id FROM dag_runs WHERE state = 'running' AND id > :after ORDER BY id LIMIT :limit
    """), {"after": after_id, "limit": limit})
    return [int(r.id) for r in rows]


def conf_json(conf: dict[str, Any]) -> str:
    return json.dumps(conf, sort_keys=True)
