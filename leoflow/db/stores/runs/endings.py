"""How runs end: finished when their task instances are all final, failed past a deadline or by the scheduler.

A run whose task instances are all final is finished **in the same transaction** as the
transition that made it so (:func:`finish_runs`; a partial index makes "is anything still
active?" one probe per run); its ``reason`` names the first failed task. Runs the scheduler
could not handle (:mod:`leoflow.scheduler.containment`) are failed durably with their reason
(:func:`fail_runs`), so no later leader treats them as work again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.fragments import ACTIVE_RUNS_SQL, ACTIVE_TASKS_SQL
from leoflow.db.queued_tries import cancel_live_tries_sql


@dataclass(frozen=True)
class FinishedRun:
    run_pk: int
    dag_id: str
    run_id: str
    state: str



async def finish_runs(conn: AsyncConnection, run_pks: Sequence[int], now: datetime, term: int) -> list[FinishedRun]:
    """running → success/failed for those of ``run_pks`` whose task instances are all final.

    The verdict is the leaves' (Airflow's rule): ``success`` when every leaf task (one nothing
    depends on) succeeded or was skipped, ``failed`` otherwise — so an ``all_done`` cleanup leaf
    that succeeds after a failure makes the run a success. A run with a task instance in an
    active state costs one probe of ``ix_task_instances_run_active``; only runs that do finish
    read their task instances, once. A failed run's ``reason`` names its first failed task
    (``task 'load' failed: exit code 1``), a failed task before an ``upstream_failed`` one.
    """
    if not run_pks:
        return []
    rows = await conn.execute(text(f"""
        WITH done AS (
            SELECT r.id FROM dag_runs r
            WHERE r.id = ANY(CAST(:ids AS bigint[])) AND r.state = 'running'
              AND NOT EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_pk = r.id AND ti.state IN {ACTIVE_TASKS_SQL})
              AND EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_pk = r.id)
        ), verdict AS (
            SELECT done.id, f.task_id, f.state, f.reason FROM done
            LEFT JOIN LATERAL (
                SELECT ti.task_id, ti.state, ti.reason FROM task_instances ti
                WHERE ti.run_pk = done.id AND ti.state NOT IN ('success', 'skipped')
                  AND EXISTS (SELECT 1 FROM task_instances leaf WHERE leaf.run_pk = done.id AND leaf.is_leaf
                              AND leaf.state NOT IN ('success', 'skipped'))
                ORDER BY ti.state = 'upstream_failed', ti.ended_at NULLS LAST, ti.id LIMIT 1) f ON true
        )
        UPDATE dag_runs r SET state = CASE WHEN v.task_id IS NULL THEN 'success' ELSE 'failed' END,
               reason = CASE WHEN v.task_id IS NULL THEN NULL
                             ELSE left(format('task %L %s: %s', v.task_id, v.state, coalesce(v.reason, v.state)), 500)
                        END,
               ended_at = :now, updated_at = :now, term = :term
        FROM verdict v
        WHERE r.id = v.id AND r.state = 'running'
        RETURNING r.id, r.dag_id, r.run_id, r.state
    """), {"ids": list(run_pks), "now": now, "term": term})
    return [FinishedRun(int(r.id), r.dag_id, r.run_id, r.state) for r in rows]


async def runs_past_deadline(conn: AsyncConnection, limit: int) -> list[int]:
    """Running runs whose ``deadline_at`` passed on the database's clock, soonest first."""
    rows = await conn.execute(text("""
        SELECT id FROM dag_runs WHERE state = 'running' AND deadline_at IS NOT NULL AND deadline_at <= now()
        ORDER BY deadline_at, id LIMIT :limit
    """), {"limit": limit})
    return [int(r.id) for r in rows]


async def active_task_counts(conn: AsyncConnection, run_pks: Sequence[int]) -> dict[int, int]:
    """Unfinished task instances per run (what failing the run would cancel); runs without any are absent."""
    if not run_pks:
        return {}
    rows = await conn.execute(text(f"""
        SELECT run_pk, count(*) AS n FROM task_instances
        WHERE run_pk = ANY(CAST(:ids AS bigint[])) AND state IN {ACTIVE_TASKS_SQL} GROUP BY run_pk
    """), {"ids": list(run_pks)})
    return {int(r.run_pk): int(r.n) for r in rows}


async def running_runs_after(conn: AsyncConnection, after_id: int, limit: int) -> list[int]:
    """Keyset page of running runs (the periodic completion sweep)."""
    rows = await conn.execute(text("""
        SELECT id FROM dag_runs WHERE state = 'running' AND id > :after ORDER BY id LIMIT :limit
    """), {"after": after_id, "limit": limit})
    return [int(r.id) for r in rows]



async def fail_runs(conn: AsyncConnection, failures: Sequence[tuple[int, str]], now: datetime,
                    term: int) -> list[FinishedRun]:
    """Queued or running runs (run_pk, reason) → ``failed``; their unfinished task instances are
    ``cancelled`` (reason ``run failed: …``) and their live tries flagged ``cancelling``."""
    if not failures:
        return []
    rows = await conn.execute(text(f"""
        WITH c AS (
            SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:reasons AS text[])) AS c(id, reason)
        ), failed AS (
            UPDATE dag_runs r SET state = 'failed', reason = c.reason, ended_at = :now, updated_at = :now, term = :term
            FROM c WHERE r.id = c.id AND r.state IN {ACTIVE_RUNS_SQL}
            RETURNING r.id, r.dag_id, r.run_id, c.reason
        ), tasks AS (
            UPDATE task_instances ti SET state = 'cancelled', reason = left('run failed: ' || f.reason, 500),
                   ended_at = :now, updated_at = :now, timeout_at = NULL, next_try_at = NULL, term = :term
            FROM failed f WHERE ti.run_pk = f.id AND ti.state IN {ACTIVE_TASKS_SQL}
            RETURNING ti.id
        ), {cancel_live_tries_sql("tasks", "'run failed'")}
        SELECT id, dag_id, run_id FROM failed
    """), {"ids": [f[0] for f in failures], "reasons": [f[1] for f in failures], "now": now, "term": term})
    return [FinishedRun(int(r.id), r.dag_id, r.run_id, "failed") for r in rows]
