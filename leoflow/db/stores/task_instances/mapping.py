"""Expanding a mapped task into its instances, in the step's fenced transaction (ADR 0014, decision 3).

A mapped task has one row until it is ready (``map_index`` -1, ``map_count`` NULL), so its
upstreams count one task as they always did. When the leader resolves its source to N items,
one statement:

1. turns that row into instance 0 (``map_index`` 0, ``map_count`` N, the task's ``max_parallel``),
   a compare-and-set on every row of the task being ``pending`` with ``map_count IS NULL``: a second
   leader replaying the step, or a clear that came first, makes it a no-op;
2. inserts instances 1..N-1 as copies of it (``generate_series``): ready, with the same upstream
   counters, pool, priority, tries allowed and leaf flag;
3. adds N-1 to ``pending_upstreams`` of the task's direct downstream rows that still wait (not one
   a rule released early): they
   counted the task as one upstream, and now wait for each instance's end, which the ordinary
   counting (:mod:`leoflow.db.stores.task_instances.downstream`) reports one by one.

A cleared mapped task (:func:`leoflow.db.stores.commands.reset_task_instances` sets ``map_count``
back to NULL on every instance) expands again from its source's *current* value the same way,
reusing its rows in index order; rows past the new count are deleted with their tries (the clear's
audit event remains), missing ones inserted with new ids, so their pod names are new too
(:func:`leoflow.executor.naming.try_name`).

A leader killed before the commit leaves the ready, unexpanded row; the next leader's ready scan
expands it. There is no window between the upstream's success and the expansion in which a
downstream could run early.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.stores.task_instances.transitions import ReadyTask

_EXPAND = text("""
    WITH cur AS MATERIALIZED (
        SELECT ti.id, ti.map_index, ti.state, ti.map_count FROM task_instances ti
        WHERE ti.run_pk = :run AND ti.task_id = :task ORDER BY ti.map_index FOR UPDATE
    ), ok AS (  -- expandable only while every row of the task is pending and unexpanded
        SELECT count(*) AS rows FROM cur HAVING bool_and(state = 'pending' AND map_count IS NULL)
    ), renumbered AS (
        SELECT cur.id, row_number() OVER (ORDER BY cur.map_index) - 1 AS idx FROM cur, ok
    ), surplus AS (
        DELETE FROM task_instances d USING renumbered n WHERE d.id = n.id AND n.idx >= greatest(:n, 1)
        RETURNING d.id
    ), kept AS (
        UPDATE task_instances ti
        SET map_index = CASE WHEN :n = 0 THEN -1 ELSE n.idx END, map_count = CASE WHEN :n = 0 THEN NULL ELSE :n END,
            max_parallel = :max_parallel, updated_at = :now, term = :term
        FROM renumbered n WHERE ti.id = n.id AND n.idx < greatest(:n, 1)
        RETURNING ti.*
    ), added AS (
        INSERT INTO task_instances (run_pk, task_id, state, try_number, max_tries, pending_upstreams,
                                    upstream_successes, upstream_failures, upstream_skips, is_leaf, updated_at,
                                    term, pool, priority, map_index, map_count, max_parallel)
        SELECT f.run_pk, f.task_id, 'pending', 0, f.max_tries, 0, f.upstream_successes, f.upstream_failures,
               f.upstream_skips, f.is_leaf, :now, :term, f.pool, f.priority, g, :n, :max_parallel
        FROM (SELECT * FROM kept ORDER BY map_index LIMIT 1) f
        CROSS JOIN generate_series((SELECT rows FROM ok), :n - 1) AS g
        RETURNING *
    ), downstream AS (  -- they counted the task's rows as upstreams: now they count greatest(:n, 1)
        UPDATE task_instances d
        SET pending_upstreams = greatest(d.pending_upstreams + greatest(:n, 1) - (SELECT rows FROM ok), 0),
            updated_at = :now
        WHERE d.run_pk = :run AND d.task_id = ANY(CAST(:downstream AS text[])) AND d.state = 'pending'
          AND d.pending_upstreams > 0 AND greatest(:n, 1) <> (SELECT rows FROM ok)
        RETURNING d.id
    ), instances AS (
        SELECT id, map_index, run_pk, task_id, state, try_number, max_tries, upstream_successes, upstream_failures,
               upstream_skips, pool FROM kept
        UNION ALL
        SELECT id, map_index, run_pk, task_id, state, try_number, max_tries, upstream_successes, upstream_failures,
               upstream_skips, pool FROM added
    )
    SELECT i.*, r.dag_id, r.run_id, r.dag_version_id AS version_id, (SELECT count(*) FROM downstream) AS waiting,
           (SELECT count(*) FROM surplus) AS removed
    FROM instances i JOIN dag_runs r ON r.id = i.run_pk
    ORDER BY i.map_index
""")


async def expand(conn: AsyncConnection, run_pk: int, task_id: str, count: int, max_parallel: int | None,
                 downstream: Sequence[str], now: datetime, term: int) -> list[ReadyTask]:
    """Expand the ready task ``task_id`` of run ``run_pk`` into ``count`` instances; returns them in
    index order, or ``[]`` when the task is not ready and unexpanded as a whole (nothing written).

    The task's current rows are reused in index order: the one row of a task never expanded becomes
    instance 0; a cleared mapped task (rows 0..N-1, ``map_count`` NULL) keeps rows 0..min(N, count)-1,
    loses the others (with their tries) and gains the missing ones. ``count`` 0 collapses it to one
    row (index -1), which the caller ends ``skipped``.
    """
    rows = (await conn.execute(_EXPAND, {"run": run_pk, "task": task_id, "n": count, "max_parallel": max_parallel,
                                         "now": now, "term": term, "downstream": sorted(downstream)})).all()
    return [ReadyTask(int(r.id), int(r.run_pk), r.task_id, r.state, int(r.try_number), int(r.max_tries), r.dag_id,
                      r.run_id, int(r.version_id), int(r.upstream_successes), int(r.upstream_failures),
                      int(r.upstream_skips), r.pool is not None, map_index=int(r.map_index),
                      map_count=count if count else None)
            for r in rows]


async def mark_expanded_empty(conn: AsyncConnection, ids: Sequence[int]) -> None:
    """The rows of mapped tasks whose source was empty (already ``skipped``): ``map_count`` 0, so
    readers show "expanded to nothing" and a downstream reads their outputs as ``[]``."""
    if ids:
        await conn.execute(text("UPDATE task_instances SET map_count = 0 WHERE id = ANY(CAST(:ids AS bigint[]))"),
                           {"ids": list(ids)})
