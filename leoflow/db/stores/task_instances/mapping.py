"""Expanding a mapped task into its instances, in the step's fenced transaction (ADR 0014, decision 3).

A mapped task has one row until it is ready (``map_index`` -1, ``map_count`` NULL), so its
upstreams count one task as they always did. When the leader resolves its source to N items,
one statement:

1. turns that row into instance 0 (``map_index`` 0, ``map_count`` N, the task's ``max_parallel``),
   a compare-and-set on ``map_count IS NULL`` and ``pending``: a second leader replaying the step,
   or a clear that came first, makes it a no-op;
2. inserts instances 1..N-1 as copies of it (``generate_series``): ready, with the same upstream
   counters, pool, priority, tries allowed and leaf flag;
3. adds N-1 to ``pending_upstreams`` of the task's direct downstream rows that still wait (not one
   a rule released early): they
   counted the task as one upstream, and now wait for each instance's end, which the ordinary
   counting (:mod:`leoflow.db.stores.task_instances.downstream`) reports one by one.

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
    WITH first AS (
        UPDATE task_instances ti
        SET map_index = 0, map_count = :n, max_parallel = :max_parallel, updated_at = :now, term = :term
        FROM dag_runs r
        WHERE ti.id = :id AND r.id = ti.run_pk AND ti.map_count IS NULL AND ti.map_index = -1
          AND ti.state = 'pending'
        RETURNING ti.*, r.dag_id, r.run_id, r.dag_version_id
    ), others AS (
        INSERT INTO task_instances (run_pk, task_id, state, try_number, max_tries, pending_upstreams,
                                    upstream_successes, upstream_failures, upstream_skips, is_leaf, updated_at,
                                    term, pool, priority, map_index, map_count, max_parallel)
        SELECT f.run_pk, f.task_id, 'pending', 0, f.max_tries, 0, f.upstream_successes, f.upstream_failures,
               f.upstream_skips, f.is_leaf, :now, :term, f.pool, f.priority, g, :n, :max_parallel
        FROM first f CROSS JOIN generate_series(1, :n - 1) AS g
        RETURNING id, map_index
    ), downstream AS (
        UPDATE task_instances d SET pending_upstreams = d.pending_upstreams + (:n - 1), updated_at = :now
        FROM first f
        WHERE d.run_pk = f.run_pk AND d.task_id = ANY(CAST(:downstream AS text[])) AND d.state = 'pending'
          AND d.pending_upstreams > 0 AND :n > 1
        RETURNING d.id
    )
    SELECT f.id, f.map_index, f.run_pk, f.task_id, f.state, f.try_number, f.max_tries, f.dag_id, f.run_id,
           f.dag_version_id AS version_id, f.upstream_successes, f.upstream_failures, f.upstream_skips,
           f.pool IS NOT NULL AS classified, (SELECT count(*) FROM downstream) AS waiting
    FROM first f
    UNION ALL
    SELECT o.id, o.map_index, f.run_pk, f.task_id, 'pending', 0, f.max_tries, f.dag_id, f.run_id, f.dag_version_id,
           f.upstream_successes, f.upstream_failures, f.upstream_skips, f.pool IS NOT NULL, 0
    FROM others o CROSS JOIN first f
    ORDER BY map_index
""")


async def expand(conn: AsyncConnection, ti_id: int, count: int, max_parallel: int | None,
                 downstream: Sequence[str], now: datetime, term: int) -> list[ReadyTask]:
    """Expand ready task instance ``ti_id`` into ``count`` (≥ 1) instances; returns them in index
    order, or ``[]`` when the row is no longer a ready, unexpanded one (nothing written)."""
    rows = (await conn.execute(_EXPAND, {"id": ti_id, "n": count, "max_parallel": max_parallel, "now": now,
                                         "term": term, "downstream": sorted(downstream)})).all()
    return [ReadyTask(int(r.id), int(r.run_pk), r.task_id, r.state, int(r.try_number), int(r.max_tries), r.dag_id,
                      r.run_id, int(r.version_id), int(r.upstream_successes), int(r.upstream_failures),
                      int(r.upstream_skips), bool(r.classified), map_index=int(r.map_index), map_count=count)
            for r in rows]


async def mark_expanded_empty(conn: AsyncConnection, ids: Sequence[int]) -> None:
    """The rows of mapped tasks whose source was empty (already ``skipped``): ``map_count`` 0, so
    readers show "expanded to nothing" and a downstream reads their outputs as ``[]``."""
    if ids:
        await conn.execute(text("UPDATE task_instances SET map_count = 0 WHERE id = ANY(CAST(:ids AS bigint[]))"),
                           {"ids": list(ids)})
