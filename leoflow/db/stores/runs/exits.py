"""Exit tasks (``on_exit``): created when a run's body ends, cancelled when the body runs again.

ADR 0014, decision 7. An exit task has no task instance row until every other task of its run
is final. :func:`~leoflow.db.stores.runs.endings.finish_runs` records the body's verdict in
``dag_runs.body_state`` (a compare-and-set on NULL) and the caller creates the exit rows with
:func:`create_exit_tasks` **in the same fenced transaction**: a leader killed between the two
commits neither, and the next leader's step (or the completion sweep) finds the body ended again
and does both. The insert is an upsert on ``(run_pk, task_id)``, so rows left by an earlier round
(the body was cleared after its exit tasks ran) start over with a fresh retry budget instead of
being created twice — the same reset a clear makes, ``cancelling`` while an old try of theirs
may still run (ADR 0015).

A clear or mark of a body task reopens the body (:func:`reopen_body`): its verdict is forgotten
and the exit tasks still active are cancelled, so they run again, once, after the body's new end.
A run deadline fails the body, not the run (:func:`fail_bodies`): the body's unfinished tasks are
cancelled, its verdict is ``failed`` and the exit tasks run, under their own timeouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.fragments import ACTIVE_TASKS_SQL, LIVE_TRIES_SQL
from leoflow.db.queued_tries import cancel_live_tries_sql
from leoflow.db.stores.task_instances.transitions import ReadyTask
from leoflow.model.spec.fairness import DEFAULT_POOL, MAX_PRIORITY, MIN_PRIORITY

#: Why an exit task waits in ``cancelling`` (shown by the API until its old try is gone).
WAITING_REASON = "waiting for the previous try to stop"


async def create_exit_tasks(conn: AsyncConnection, run_pks: Sequence[int], now: datetime,
                            term: int) -> list[ReadyTask]:
    """The exit tasks of ``run_pks`` (whose body just ended) as ``pending`` rows; returns the ready ones.

    ``is_leaf`` is false on every exit row: the body's verdict reads the leaves, and exit tasks
    are judged apart. Priorities and pools as :func:`~leoflow.db.stores.runs.lifecycle.start_runs`.
    """
    if not run_pks:
        return []
    rows = await conn.execute(text(f"""
        WITH runs AS (
            SELECT r.id, r.dag_id, r.run_id, r.dag_version_id FROM dag_runs r
            WHERE r.id = ANY(CAST(:ids AS bigint[])) AND r.state = 'running'
        ), created AS (
            INSERT INTO task_instances AS ti (run_pk, task_id, state, max_tries, pending_upstreams, is_leaf, term,
                                              updated_at, pool, priority)
            SELECT r.id, e.t->>'id', 'pending', coalesce((e.t->>'retries')::int, 0) + 1,
                   jsonb_array_length(coalesce(e.t->'depends_on', '[]'::jsonb)), false, :term, :now,
                   CASE WHEN e.t->>'kind' = 'empty' THEN NULL
                        ELSE left(coalesce(e.t->>'pool', :default_pool), 50) END,
                   CASE WHEN jsonb_typeof(e.t->'priority') = 'number'
                        THEN least(greatest((e.t->>'priority')::numeric, :min_priority), :max_priority)::int
                        ELSE 0 END
            FROM runs r
            JOIN dag_versions v ON v.id = r.dag_version_id
            CROSS JOIN LATERAL jsonb_array_elements(coalesce(v.spec->'on_exit', '[]'::jsonb))
                WITH ORDINALITY AS e(t, ord)
            ORDER BY r.id, e.ord
            ON CONFLICT (run_pk, task_id, map_index) DO UPDATE SET
                state = CASE WHEN EXISTS (SELECT 1 FROM task_tries lt WHERE lt.task_instance_id = ti.id
                                                                      AND lt.state IN {LIVE_TRIES_SQL})
                             THEN 'cancelling' ELSE 'pending' END,
                max_tries = ti.try_number + excluded.max_tries, pending_upstreams = excluded.pending_upstreams,
                upstream_successes = 0, upstream_failures = 0, upstream_skips = 0, is_leaf = false,
                queued_at = NULL, started_at = NULL, ended_at = NULL, timeout_at = NULL, next_try_at = NULL,
                retry_deadline_at = NULL,
                reason = CASE WHEN EXISTS (SELECT 1 FROM task_tries lt WHERE lt.task_instance_id = ti.id
                                                                       AND lt.state IN {LIVE_TRIES_SQL})
                              THEN :waiting END,
                updated_at = excluded.updated_at, term = excluded.term
            WHERE ti.state NOT IN {ACTIVE_TASKS_SQL}
            RETURNING ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries, ti.pending_upstreams
        )
        SELECT c.id, c.run_pk, c.task_id, c.state, c.try_number, c.max_tries, r.dag_id, r.run_id,
               r.dag_version_id AS version_id
        FROM created c JOIN runs r ON r.id = c.run_pk
        WHERE c.state = 'pending' AND c.pending_upstreams = 0
        ORDER BY c.id
    """), {"ids": list(run_pks), "now": now, "term": term, "default_pool": DEFAULT_POOL,
           "min_priority": MIN_PRIORITY, "max_priority": MAX_PRIORITY, "waiting": WAITING_REASON})
    return [ReadyTask(id=int(r.id), run_pk=int(r.run_pk), task_id=r.task_id, state=r.state,
                      try_number=int(r.try_number), max_tries=int(r.max_tries), dag_id=r.dag_id, run_id=r.run_id,
                      version_id=int(r.version_id)) for r in rows]


async def reopen_body(conn: AsyncConnection, run_pk: int, exit_tasks: Sequence[str], reason: str, now: datetime,
                      term: int) -> list[str]:
    """A body task was cleared or marked: forget the body's verdict and cancel the run's active exit
    tasks (their live tries flagged ``cancelling``). Returns the exit task ids cancelled."""
    rows = await conn.execute(text(f"""
        WITH run AS (
            UPDATE dag_runs SET body_state = NULL, body_reason = NULL, updated_at = :now, term = :term
            WHERE id = :run AND body_state IS NOT NULL
        ), changed AS (
            UPDATE task_instances ti SET state = 'cancelled', reason = :reason, ended_at = :now, timeout_at = NULL,
                   next_try_at = NULL, updated_at = :now, term = :term
            WHERE ti.run_pk = :run AND ti.task_id = ANY(CAST(:exits AS text[])) AND ti.state IN {ACTIVE_TASKS_SQL}
            RETURNING ti.id, ti.task_id
        ), {cancel_live_tries_sql("changed", ":reason")}
        SELECT task_id FROM changed ORDER BY task_id
    """), {"run": run_pk, "exits": list(exit_tasks), "reason": reason, "now": now, "term": term})
    return [r.task_id for r in rows]


async def fail_bodies(conn: AsyncConnection, failures: Sequence[tuple[int, str]], now: datetime,
                      term: int) -> list[int]:
    """Running runs (run_pk, reason) that have exit tasks and whose body has not ended: the body's
    unfinished task instances ``cancelled`` (``run failed: …``, live tries flagged ``cancelling``),
    its verdict ``failed`` with ``reason``, the run's deadline spent. Returns the runs whose exit
    tasks the caller must create now (:func:`create_exit_tasks`); the others are left as they were."""
    if not failures:
        return []
    rows = await conn.execute(text(f"""
        WITH c AS (
            SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:reasons AS text[])) AS c(id, reason)
        ), failed AS (
            UPDATE dag_runs r SET body_state = 'failed', body_reason = c.reason, deadline_at = NULL,
                   updated_at = :now, term = :term
            FROM c, dag_versions v
            WHERE r.id = c.id AND r.state = 'running' AND r.body_state IS NULL AND v.id = r.dag_version_id
              AND jsonb_array_length(coalesce(v.spec->'on_exit', '[]'::jsonb)) > 0
            RETURNING r.id, c.reason
        ), tasks AS (
            UPDATE task_instances ti SET state = 'cancelled', reason = left('run failed: ' || f.reason, 500),
                   ended_at = :now, updated_at = :now, timeout_at = NULL, next_try_at = NULL, term = :term
            FROM failed f WHERE ti.run_pk = f.id AND ti.state IN {ACTIVE_TASKS_SQL}
            RETURNING ti.id
        ), {cancel_live_tries_sql("tasks", "'run failed'")}
        SELECT id FROM failed ORDER BY id
    """), {"ids": [f[0] for f in failures], "reasons": [f[1] for f in failures], "now": now, "term": term})
    return [int(r.id) for r in rows]
