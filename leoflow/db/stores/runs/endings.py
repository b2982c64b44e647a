"""How runs end: finished when their task instances are all final, failed past a deadline or by the scheduler.

A run whose task instances are all final is finished **in the same transaction** as the
transition that made it so (:func:`finish_runs`; a partial index makes "is anything still
active?" one probe per run); its ``reason`` names the failure that decided it. A run with exit
tasks (``on_exit``) ends its *body* first and its exit tasks are created then
(:mod:`leoflow.db.stores.runs.exits`); it ends when they have. Runs the scheduler
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
    #: When the run started (its trace span's start, leoflow.tracing); None where not read.
    started_at: datetime | None = None
    reason: str | None = None



@dataclass(frozen=True)
class RunEndings:
    """What :func:`finish_runs` did: runs it ended, and runs whose body ended while exit tasks wait."""

    finished: list[FinishedRun]
    #: Runs (still ``running``) whose ``body_state`` it recorded: their exit tasks are due now.
    bodies_ended: list[int]


#: The ids of a version's exit tasks (``v`` a ``dag_versions`` row), as a text array.
_EXIT_IDS = "ARRAY(SELECT e->>'id' FROM jsonb_array_elements(coalesce(v.spec->'on_exit', '[]'::jsonb)) AS e)"


async def finish_runs(conn: AsyncConnection, run_pks: Sequence[int], now: datetime, term: int) -> RunEndings:
    """For those of ``run_pks`` whose task instances are all final: end them, or end their body.

    The body's verdict is the leaves' (Airflow's rule): ``success`` when every leaf task (one
    nothing depends on) succeeded or was skipped, ``failed`` otherwise — so an ``all_done``
    cleanup leaf that succeeds after a failure makes the run a success. Its ``reason`` names the
    failure that decided it (ADR 0014, decision 7): the earliest-ended ``failed`` task among the
    failing leaves and their ancestors — a ``failed`` leaf, or what an ``upstream_failed`` leaf
    failed for — never a failure only a succeeding leaf saw (``task 'load' failed: exit code 1``);
    else the failing leaf itself (a ``cancelled`` one).

    A run whose version has ``on_exit`` tasks does not end with its body: the body's verdict is
    recorded (``body_state``/``body_reason``, a compare-and-set on NULL, so a step redone after a
    failover records it once) and the run is listed in :attr:`RunEndings.bodies_ended` for the
    caller to create the exit tasks in this same transaction. When those are final too, the run
    ends ``failed`` if one of them is ``failed`` or ``upstream_failed`` (its reason appended to
    the body's), else as its body did: an exit task can turn a success into a failure, never the
    reverse, and a skipped one changes nothing.

    A run with a task instance in an active state costs one probe of
    ``ix_task_instances_run_active``; only runs that do finish read their task instances, once.
    """
    if not run_pks:
        return RunEndings([], [])
    rows = await conn.execute(text(f"""
        WITH done AS MATERIALIZED (
            SELECT r.id, r.ctid AS row_at, r.dag_version_id, r.body_state, r.body_reason, {_EXIT_IDS} AS exits
            FROM dag_runs r
            JOIN dag_versions v ON v.id = r.dag_version_id
            -- A probe per run, never a scan: written as NOT EXISTS, stale statistics (the partial index
            -- was empty when analyzed: every boundary's first seconds) made it a scan of the whole
            -- index per run, 0.3 ms each at 10,000 runs; a LIMIT 1 lateral can only be probed by run.
            LEFT JOIN LATERAL (SELECT true AS busy FROM task_instances ti
                               WHERE ti.run_pk = r.id AND ti.state IN {ACTIVE_TASKS_SQL} LIMIT 1) active ON true
            WHERE r.id = ANY(CAST(:ids AS bigint[])) AND r.state = 'running' AND active.busy IS NULL
              AND EXISTS (SELECT 1 FROM task_instances ti WHERE ti.run_pk = r.id)
        ), verdict AS (
            SELECT done.id, done.row_at, done.body_state AS stored_state, done.body_reason AS stored_reason,
                   cardinality(done.exits) > 0 AS has_exits, f.task_id, f.state, f.reason,
                   x.task_id AS exit_task, x.state AS exit_state, x.reason AS exit_reason
            FROM done
            LEFT JOIN LATERAL (
                WITH RECURSIVE failing AS (  -- the leaves that make the body fail (exit rows are never leaves)
                    SELECT leaf.task_id::text AS task_id FROM task_instances leaf
                    WHERE done.body_state IS NULL AND leaf.run_pk = done.id AND leaf.is_leaf
                      AND leaf.state NOT IN ('success', 'skipped') AND NOT (leaf.task_id = ANY(done.exits))
                ), deps AS MATERIALIZED (
                    SELECT t->>'id' AS task_id, d.dep FROM dag_versions v
                    CROSS JOIN LATERAL jsonb_array_elements(v.spec->'tasks') AS t
                    CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(t->'depends_on', '[]'::jsonb)) AS d(dep)
                    WHERE v.id = done.dag_version_id AND EXISTS (SELECT 1 FROM failing)
                ), closure(task_id) AS (  -- those leaves and their ancestors
                    SELECT task_id FROM failing
                    UNION
                    SELECT deps.dep FROM closure JOIN deps ON deps.task_id = closure.task_id
                )
                SELECT ti.task_id, ti.state, ti.reason FROM task_instances ti
                WHERE ti.run_pk = done.id AND ti.task_id IN (SELECT task_id FROM closure)
                  AND (ti.state = 'failed' OR ti.task_id IN (SELECT task_id FROM failing))
                ORDER BY ti.state <> 'failed', ti.state = 'upstream_failed', ti.ended_at NULLS LAST, ti.id
                LIMIT 1) f ON true
            LEFT JOIN LATERAL (
                SELECT ti.task_id, ti.state, ti.reason FROM task_instances ti
                WHERE done.body_state IS NOT NULL AND ti.run_pk = done.id AND ti.task_id = ANY(done.exits)
                  AND ti.state IN ('failed', 'upstream_failed')
                ORDER BY ti.state = 'upstream_failed', ti.ended_at NULLS LAST, ti.id LIMIT 1) x ON true
        ), decided AS (
            SELECT v.*,
                   CASE WHEN v.stored_state IS NOT NULL THEN v.stored_state
                        WHEN v.task_id IS NULL THEN 'success' ELSE 'failed' END AS body,
                   CASE WHEN v.stored_state IS NOT NULL THEN v.stored_reason
                        WHEN v.task_id IS NULL THEN NULL
                        ELSE left(format('task %L %s: %s', v.task_id, v.state, coalesce(v.reason, v.state)), 500)
                   END AS why,
                   v.has_exits AND v.stored_state IS NULL AS body_ends
            FROM verdict v
        )
        UPDATE dag_runs r SET
               state = CASE WHEN d.body_ends THEN r.state WHEN d.exit_task IS NOT NULL THEN 'failed' ELSE d.body END,
               reason = CASE WHEN d.body_ends THEN r.reason
                             WHEN d.exit_task IS NOT NULL
                             THEN left(concat_ws('; ', d.why, format('on_exit task %L failed: %s', d.exit_task,
                                                                    coalesce(d.exit_reason, d.exit_state))), 500)
                             ELSE d.why END,
               body_state = CASE WHEN d.has_exits THEN d.body END,
               body_reason = CASE WHEN d.has_exits THEN d.why END,
               -- the exit tasks run under their own timeouts, never the run's deadline
               deadline_at = CASE WHEN d.body_ends THEN NULL ELSE r.deadline_at END,
               ended_at = CASE WHEN d.body_ends THEN r.ended_at ELSE :now END, updated_at = :now, term = :term
        FROM decided d
        -- The row the read found, by its address (a concurrent update is followed and the state
        -- checked again, as by id): stale statistics made the planner find it again by id and state
        -- on ix_dag_runs_active, which leads with dag_id, walking that index per run (0.5 ms each).
        WHERE r.ctid = d.row_at AND r.id = d.id AND r.state = 'running'
        RETURNING r.id, r.dag_id, r.run_id, r.state, d.body_ends, r.started_at, r.reason
    """), {"ids": list(run_pks), "now": now, "term": term})
    finished: list[FinishedRun] = []
    bodies: list[int] = []
    for r in rows:
        if r.body_ends:
            bodies.append(int(r.id))
        else:
            finished.append(FinishedRun(int(r.id), r.dag_id, r.run_id, r.state, r.started_at, r.reason))
    return RunEndings(finished, bodies)


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
            RETURNING r.id, r.dag_id, r.run_id, c.reason, r.started_at
        ), tasks AS (
            UPDATE task_instances ti SET state = 'cancelled', reason = left('run failed: ' || f.reason, 500),
                   ended_at = :now, updated_at = :now, timeout_at = NULL, next_try_at = NULL, term = :term
            FROM failed f WHERE ti.run_pk = f.id AND ti.state IN {ACTIVE_TASKS_SQL}
            RETURNING ti.id
        ), {cancel_live_tries_sql("tasks", "'run failed'")}
        SELECT id, dag_id, run_id, started_at, reason FROM failed
    """), {"ids": [f[0] for f in failures], "reasons": [f[1] for f in failures], "now": now, "term": term})
    return [FinishedRun(int(r.id), r.dag_id, r.run_id, "failed", r.started_at, r.reason) for r in rows]
