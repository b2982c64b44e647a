"""Run commands (clear, mark): recorded by the API, applied by the leader under its term.

The API holds no fencing term and the scheduler keeps state between its steps, so an operator's
write to task instances must not race the leader's. The API therefore only *records* the
command (:func:`create_command`, with a NOTIFY so the leader wakes at once) and waits for it to
be applied; the leader applies pending commands in its fenced step (:mod:`leoflow.scheduler.commands`)
with the statements below and marks each one applied in the same transaction — so a command is
applied exactly once, by the newest term, whatever fails over in between, and a command a stale
leader applied never commits.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.connection.driver_errors import translated_async
from leoflow.db.connection.wakeup import notify_wakeup
from leoflow.db.fragments import ACTIVE_TASKS_SQL, LIVE_TRIES_SQL, TERMINAL_RUNS_SQL, run_deadline_sql
from leoflow.db.queued_tries import cancel_live_tries_sql
from leoflow.db.stores.task_instances.downstream import Counted, counted_rows


@dataclass(frozen=True)
class Command:
    id: int
    run_pk: int
    kind: str
    body: dict[str, Any]
    requested_by: str | None


@dataclass(frozen=True)
class CommandState:
    """What became of a command: not applied yet (``applied_at`` None), applied, or refused (``error``)."""

    id: int
    kind: str
    applied_at: datetime | None
    outcome: dict[str, Any] | None
    error: str | None


@dataclass(frozen=True)
class CommandRun:
    """The run a command is about, row-locked for the command's step."""

    run_pk: int
    dag_id: str
    run_id: str
    state: str
    version_id: int


# --------------------------------------------------------------------------- the API's side

async def create_command(conn: AsyncConnection, *, run_pk: int, dag_id: str, kind: str, body: dict[str, Any],
                         requested_by: str | None) -> int:
    """Record a command for the leader (woken when the caller's transaction commits)."""
    command_id = (await conn.execute(text("""
        INSERT INTO run_commands (run_pk, kind, body, requested_by) VALUES (:run, :kind, CAST(:body AS jsonb), :who)
        RETURNING id
    """), {"run": run_pk, "kind": kind, "body": json.dumps(body), "who": requested_by})).scalar_one()
    await notify_wakeup(conn, dag_id)
    return int(command_id)


async def command_state(conn: AsyncConnection, command_id: int) -> CommandState | None:
    row = (await conn.execute(text("""
        SELECT id, kind, applied_at, outcome, error FROM run_commands WHERE id = :id
    """), {"id": command_id})).first()
    return None if row is None else CommandState(int(row.id), row.kind, row.applied_at, row.outcome, row.error)


# --------------------------------------------------------------------------- the leader's side

@asynccontextmanager
async def savepoint(conn: AsyncConnection) -> AsyncIterator[None]:
    """One command's statements: if they raise, they are rolled back alone (the step goes on);
    driver errors leave as Leoflow errors (a lost connection is still the leader's fault)."""
    async with translated_async(), conn.begin_nested():
        yield


async def pending_commands(conn: AsyncConnection, limit: int) -> list[Command]:
    """Commands not applied yet, oldest first."""
    rows = await conn.execute(text("""
        SELECT id, run_pk, kind, body, requested_by FROM run_commands WHERE applied_at IS NULL ORDER BY id LIMIT :limit
    """), {"limit": limit})
    return [Command(int(r.id), int(r.run_pk), r.kind, r.body if isinstance(r.body, dict) else {}, r.requested_by)
            for r in rows]


async def finish_command(conn: AsyncConnection, command_id: int, now: datetime, term: int, *,
                         outcome: dict[str, Any] | None = None, error: str | None = None) -> None:
    await conn.execute(text("""
        UPDATE run_commands SET applied_at = :now, term = :term, outcome = CAST(:outcome AS jsonb), error = :error
        WHERE id = :id AND applied_at IS NULL
    """), {"id": command_id, "now": now, "term": term, "outcome": None if outcome is None else json.dumps(outcome),
           "error": error})


async def lock_run(conn: AsyncConnection, run_pk: int) -> CommandRun | None:
    row = (await conn.execute(text("""
        SELECT id, dag_id, run_id, state, dag_version_id FROM dag_runs WHERE id = :id FOR UPDATE
    """), {"id": run_pk})).first()
    return None if row is None else CommandRun(int(row.id), row.dag_id, row.run_id, row.state, int(row.dag_version_id))


async def lock_task_states(conn: AsyncConnection, run_pk: int) -> dict[str, str]:
    """The run's task instances (task id → state), row-locked in id order. A mapped task's state is
    that of an instance that did not succeed (failed, upstream_failed, cancelled) if any, so a clear
    of failed tasks takes it, else of its last instance."""
    rows = await conn.execute(text("""
        SELECT task_id, state FROM task_instances WHERE run_pk = :run ORDER BY id FOR UPDATE
    """), {"run": run_pk})
    states: dict[str, str] = {}
    for r in rows:
        if states.get(r.task_id) not in _UNSUCCESSFUL:
            states[r.task_id] = r.state
    return states


_UNSUCCESSFUL = frozenset({"failed", "upstream_failed", "cancelled"})


#: The live tries of the task instances ``changed``, flagged ``cancelling`` — rows, and queued tries
#: that have none yet (ADR 0013).
_KILL_LIVE_TRIES = cancel_live_tries_sql("changed", ":reason")


#: A task instance (``ti``, as the statement's snapshot shows it, before its update) with a try an
#: executor may still be running: queued or running itself (its current try, with or without a row),
#: already waiting for one, or with a try row still live (a mark or a run's cancel flagged it).
_HAS_LIVE_TRY = f"""(ti.state IN ('queued', 'running', 'cancelling') OR EXISTS (
    SELECT 1 FROM task_tries lt WHERE lt.task_instance_id = ti.id AND lt.state IN {LIVE_TRIES_SQL}))"""

#: Why a task instance is ``cancelling`` (shown by the API until its old try is gone).
WAITING_REASON = "waiting for the previous try to stop"


async def reset_task_instances(conn: AsyncConnection, run_pk: int, resets: Sequence[tuple[str, int]], reason: str,
                               now: datetime, term: int, map_index: int | None = None) -> list[str]:
    """Task instances (task id, retries) → ``pending`` with a fresh retry budget (try numbers keep
    counting); their live tries are flagged ``cancelling``. Returns the task ids reset. Every
    instance of a mapped task is reset, and the task expands again when it is next ready
    (:mod:`leoflow.db.stores.task_instances.mapping`). ``map_index``: that instance only, and the task
    keeps its expansion.

    One with a live try becomes ``cancelling`` instead, not ``pending``: it is not queued until
    the executor has confirmed that try gone (:func:`release_task_instances`), so a cleared task
    whose process ignores SIGTERM never runs beside its next try (issue 44).
    """
    if not resets:
        return []
    rows = await conn.execute(text(f"""
        WITH c AS (
            SELECT * FROM unnest(CAST(:tasks AS text[]), CAST(:retries AS int[])) AS c(task_id, retries)
        ), changed AS (
            UPDATE task_instances ti
            SET state = CASE WHEN {_HAS_LIVE_TRY} THEN 'cancelling' ELSE 'pending' END,
                max_tries = ti.try_number + c.retries + 1, pending_upstreams = 0,
                upstream_successes = 0, upstream_failures = 0, upstream_skips = 0, queued_at = NULL,
                started_at = NULL, ended_at = NULL, timeout_at = NULL, next_try_at = NULL, retry_deadline_at = NULL,
                reason = CASE WHEN {_HAS_LIVE_TRY} THEN :waiting END, updated_at = :now, term = :term,
                -- a mapped task expands again from its source's current value; one instance does not
                map_count = CASE WHEN CAST(:map_index AS int) IS NULL THEN NULL ELSE ti.map_count END
            FROM c WHERE ti.run_pk = :run AND ti.task_id = c.task_id
              AND (CAST(:map_index AS int) IS NULL OR ti.map_index = :map_index)
            RETURNING ti.id, ti.task_id
        ), {_KILL_LIVE_TRIES}
        SELECT DISTINCT task_id FROM changed ORDER BY task_id
    """), {"run": run_pk, "tasks": [r[0] for r in resets], "retries": [r[1] for r in resets], "now": now,
           "term": term, "reason": reason, "waiting": WAITING_REASON, "map_index": map_index})
    return [r.task_id for r in rows]


async def cancelling_task_instances(conn: AsyncConnection, limit: int) -> list[int]:
    """Task instances waiting in ``cancelling`` whose every try is finished: ready to be released.

    One range of ``ix_task_instances_active`` (partial on the active states, ``cancelling`` among
    them) plus a probe per row of the tries' unique index: nothing when no clear waits.
    """
    rows = await conn.execute(text(f"""
        SELECT ti.id FROM task_instances ti
        WHERE ti.state = 'cancelling' AND NOT EXISTS (
            SELECT 1 FROM task_tries lt WHERE lt.task_instance_id = ti.id AND lt.state IN {LIVE_TRIES_SQL})
        ORDER BY ti.id LIMIT :limit
    """), {"limit": limit})
    return [int(r.id) for r in rows]


async def release_task_instances(conn: AsyncConnection, ids: Sequence[int], now: datetime, term: int) -> list[int]:
    """``cancelling`` → ``pending`` for those of ``ids`` whose old tries are all finished now (row-
    locked by the update, so a try flagged meanwhile keeps its task instance waiting). Returns the
    runs of the task instances released; the caller recounts their upstreams
    (:func:`recount_pending`), which ``cancelling`` ones were not counted in."""
    if not ids:
        return []
    rows = await conn.execute(text(f"""
        UPDATE task_instances ti SET state = 'pending', reason = NULL, updated_at = :now, term = :term
        WHERE ti.id = ANY(CAST(:ids AS bigint[])) AND ti.state = 'cancelling' AND NOT EXISTS (
            SELECT 1 FROM task_tries lt WHERE lt.task_instance_id = ti.id AND lt.state IN {LIVE_TRIES_SQL})
        RETURNING ti.run_pk
    """), {"ids": list(ids), "now": now, "term": term})
    return sorted({int(r.run_pk) for r in rows})


async def set_task_state(conn: AsyncConnection, run_pk: int, task_id: str, state: str, reason: str,
                         now: datetime, term: int, map_index: int | None = None) -> bool:
    """Mark a task instance ``state`` (success/failed) as if it had ended so; a live try is killed.
    ``map_index``: only that instance of a mapped task (None: every instance of the task)."""
    rows = await conn.execute(text(f"""
        WITH changed AS (
            UPDATE task_instances ti
            SET state = :state, reason = :reason, ended_at = :now, started_at = coalesce(ti.started_at, :now),
                timeout_at = NULL, next_try_at = NULL, updated_at = :now, term = :term
            WHERE ti.run_pk = :run AND ti.task_id = :task AND ti.state <> :state
              AND (CAST(:map_index AS int) IS NULL OR ti.map_index = :map_index)
            RETURNING ti.id
        ), {_KILL_LIVE_TRIES}
        SELECT id FROM changed
    """), {"run": run_pk, "task": task_id, "state": state, "reason": reason, "now": now, "term": term,
           "map_index": map_index})
    return rows.first() is not None


async def mark_run(conn: AsyncConnection, run_pk: int, state: str, reason: str, now: datetime, term: int) -> list[str]:
    """Airflow's mark run success/failed: the task instances (see leoflow.model.run_commands) and the
    run itself; live tries flagged ``cancelling``. Returns the task ids changed."""
    rows = await conn.execute(text(f"""
        WITH changed AS (
            UPDATE task_instances ti
            SET state = CASE WHEN :state = 'success' THEN 'success'
                             WHEN ti.state IN ('queued', 'running') THEN 'failed' ELSE 'skipped' END,
                reason = :reason, ended_at = :now, timeout_at = NULL, next_try_at = NULL, updated_at = :now,
                term = :term
            WHERE ti.run_pk = :run AND CASE WHEN :state = 'success' THEN ti.state <> 'success'
                                            ELSE ti.state IN {ACTIVE_TASKS_SQL} END
            RETURNING ti.id, ti.task_id
        ), {_KILL_LIVE_TRIES}, run AS (
            UPDATE dag_runs SET state = :state, ended_at = :now, updated_at = :now, term = :term, observed_at = NULL,
                   reason = CASE WHEN :state = 'failed' THEN :reason END
            WHERE id = :run
        )
        SELECT DISTINCT task_id FROM changed ORDER BY task_id
    """), {"run": run_pk, "state": state, "reason": reason, "now": now, "term": term})
    return [r.task_id for r in rows]


async def reopen_run(conn: AsyncConnection, run_pk: int, now: datetime, term: int) -> bool:
    """A finished run → ``running`` again (a fresh deadline; the observer will announce its new end)."""
    rows = await conn.execute(text(f"""
        UPDATE dag_runs r SET state = 'running', ended_at = NULL, reason = NULL, observed_at = NULL,
               deadline_at = {run_deadline_sql("r", "v")}, updated_at = :now, term = :term
        FROM dag_versions v
        WHERE r.id = :run AND r.state IN {TERMINAL_RUNS_SQL} AND v.id = r.dag_version_id
        RETURNING r.id
    """), {"run": run_pk, "now": now, "term": term})
    return rows.first() is not None


async def recount_pending(conn: AsyncConnection, run_pk: int, now: datetime) -> list[Counted]:
    """Recompute the upstream counters of the run's pending task instances from their upstream
    tasks' current states (a ``cancelled`` upstream counts as failed); returns them all, for
    their trigger rules to be decided again.

    Each pending row counts its own upstreams (their ids from one map of the version's
    ``depends_on``, each upstream's state by the ``(run_pk, task_id)`` key): work in proportion to
    the run's tasks and edges whatever the planner estimates. Joining a per-task tally to the
    run's rows instead let a stale estimate (one row for a run just started) pick a nested loop
    that re-read the tally for every row: 108 s for a 10,000-task chain, past the statement
    timeout, so a clear of such a run failed the leader's step on every tick (issue 44).
    """
    rows = await conn.execute(text("""
        WITH deps AS MATERIALIZED (
            SELECT jsonb_object_agg(t->>'id', coalesce(t->'depends_on', '[]'::jsonb)) AS by_task
            FROM dag_runs r JOIN dag_versions v ON v.id = r.dag_version_id
            -- the exit tasks (on_exit) depend on each other: their rows are recounted like the others
            CROSS JOIN LATERAL jsonb_array_elements(v.spec->'tasks' || coalesce(v.spec->'on_exit', '[]'::jsonb)) AS t
            WHERE r.id = :run
        )
        UPDATE task_instances ti
        SET (pending_upstreams, upstream_successes, upstream_failures, upstream_skips) = (
                SELECT count(*) FILTER (WHERE up.state NOT IN ('success', 'failed', 'upstream_failed', 'skipped',
                                                               'cancelled')),
                       count(*) FILTER (WHERE up.state = 'success'),
                       count(*) FILTER (WHERE up.state IN ('failed', 'upstream_failed', 'cancelled')),
                       count(*) FILTER (WHERE up.state = 'skipped')
                FROM jsonb_array_elements_text(coalesce((SELECT by_task FROM deps) -> ti.task_id, '[]'::jsonb))
                     AS d(task_id)
                -- OFFSET 0 keeps this a lookup per upstream by the unique key (never flattened into a join).
                CROSS JOIN LATERAL (SELECT u.state FROM task_instances u
                                    WHERE u.run_pk = ti.run_pk AND u.task_id = d.task_id OFFSET 0) AS up),
            updated_at = :now
        FROM dag_runs r
        WHERE ti.run_pk = :run AND ti.state = 'pending' AND r.id = ti.run_pk
        RETURNING ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries, ti.pending_upstreams,
                  ti.upstream_successes, ti.upstream_failures, ti.upstream_skips,
                  r.dag_id, r.run_id, r.dag_version_id AS version_id
    """), {"run": run_pk, "now": now})
    return counted_rows(rows.all())
