"""Which queued runs may start, and when the next scheduled run falls due: the leader's reads for many DAGs.

**Starting runs** (:func:`startable_runs`): a queued run may start when its DAG's running runs
and its own older queued runs leave room under ``max_active_runs`` (of the DAG's current
version). The oldest queued runs are read in id order from ``ix_dag_runs_queued`` and each is
judged by one bounded probe of ``ix_dag_runs_active`` (at most ``max_active_runs`` entries of its
DAG), so a call costs what it returns, however many DAGs have a queued run: 10,000 DAGs due at
one minute made the walk over every such DAG (:func:`~leoflow.db.stores.runs.lifecycle.startable_runs`)
~160 ms, several times a step. That walk stays as the answer when the window of oldest runs is
full of runs that cannot start (a backlog of one DAG over its ``max_active_runs`` hides the
other DAGs' runs behind it), so the result is the same set either way.

**The next boundary** (:func:`next_due_at`): the earliest ``next_run_at`` after a time among DAGs
that can run, one probe of ``ix_dags_due``, so the leader's loop wakes at the boundary itself
instead of up to one interval after it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.connection.plans import RESTORED, plan_with_indexes_only
from leoflow.db.fragments import sql_list
from leoflow.db.stores.runs.lifecycle import _MAX_ACTIVE_RUNS, StartableRun
from leoflow.db.stores.runs.lifecycle import startable_runs as startable_by_dag
from leoflow.model.states import ACTIVE_RUN_STATES

#: The states ``ix_dag_runs_active`` holds. A DAG's older queued runs are counted through it, not
#: through ``ix_dag_runs_queued`` (which would walk every older queued run of every DAG): the
#: condition names them by ``state IN`` this list and ``state = q.state``, which implies the first
#: index's predicate and not the second's.
_ACTIVE = sql_list(ACTIVE_RUN_STATES)

#: Oldest queued runs read per call, in units of the runs asked for: room for the runs of DAGs at
#: their limit among them, small enough that a full window of such runs costs a few milliseconds
#: before the walk by DAG takes over.
WINDOW = 4


async def startable_runs(conn: AsyncConnection, limit: int) -> list[StartableRun]:
    """Queued runs that ``max_active_runs`` lets start, oldest first, at most ``limit`` (see the module docstring)."""
    window = max(1, limit) * WINDOW
    restore = await plan_with_indexes_only(conn)  # a fresh install's statistics would plan a scan per probe
    rows = [r for r in (await conn.execute(_STARTABLE, {"window": window, "limit": limit, **restore}))
            if r.id is not None]
    startable = [StartableRun(int(r.id), int(r.dag_version_id)) for r in rows if r.ok]
    # Fewer than asked for out of a full window: runs of other DAGs may wait behind it.
    if len(startable) < limit and any(r.n >= window for r in rows):
        return await startable_by_dag(conn, limit)
    return startable


#: One queued run after another in id order, each one probe of ``ix_dag_runs_queued`` (a
#: recursive step reading ``dag_runs`` alone with ``ORDER BY id LIMIT 1``: the ordered partial index
#: answers it at the cost of one row under any statistics, where a join in the same step let a
#: planner that believed ``dag_runs`` empty hash-join ``dags`` with the whole queue and sort it, per
#: run: ~41,000 rows of work for 300 queued runs), judged by the room left in its DAG: the limit of
#: its DAG's current version (a primary-key probe of ``dags`` and ``dag_versions``; no current
#: version, no start), its running runs and its older queued runs, two ranges of
#: ``ix_dag_runs_active`` each counted only up to the limit (a DAG with 100,000 queued runs costs as
#: much as one with a few). It stops at ``limit`` startable runs or ``window`` runs read, whichever
#: comes first.
_STARTABLE = text(f"""
    WITH RECURSIVE w(id, dag_id, dag_version_id, ok, n, taken) AS (
        SELECT 0::bigint, ''::text, 0::bigint, false, 0, 0
        UNION ALL
        SELECT x.id, x.dag_id, x.dag_version_id, x.ok, w.n + 1, w.taken + x.ok::int
        FROM w CROSS JOIN LATERAL (
            SELECT q.id, q.dag_id, q.dag_version_id, coalesce(
                   (SELECT count(*) FROM (
                        SELECT 1 FROM dag_runs a WHERE a.dag_id = q.dag_id AND a.state = 'running'
                        LIMIT m.lim) running)
                   + (SELECT count(*) FROM (
                        SELECT 1 FROM dag_runs a WHERE a.dag_id = q.dag_id AND a.state IN {_ACTIVE}
                          AND a.state = q.state AND a.id < q.id
                        LIMIT m.lim) older) < m.lim, false) AS ok
            FROM (SELECT r.id, r.dag_id, r.dag_version_id, r.state FROM dag_runs r
                  WHERE r.state = 'queued' AND r.id > w.id
                  ORDER BY r.id
                  LIMIT 1) q
            LEFT JOIN LATERAL (
                SELECT {_MAX_ACTIVE_RUNS} AS lim
                FROM dags d JOIN dag_versions v ON v.id = d.current_version_id
                WHERE d.dag_id = q.dag_id) m ON true
            OFFSET 0) x
        WHERE w.n < :window AND w.taken < :limit
    )
    SELECT w.id, w.dag_version_id, w.ok, w.n
    FROM {RESTORED} LEFT JOIN w ON w.ok OR w.n >= :window
    ORDER BY w.id
""")


async def next_due_at(conn: AsyncConnection, after: datetime) -> datetime | None:
    """The earliest ``next_run_at`` later than ``after`` of a DAG that can run (None: none is scheduled)."""
    row = (await conn.execute(text("""
        SELECT min(next_run_at) AS at FROM dags
        WHERE NOT paused AND NOT deleted AND next_run_at > :after AND schedule IS NOT NULL
    """), {"after": after})).one()
    at: datetime | None = row.at
    return at


async def versions_due_before(conn: AsyncConnection, until: datetime, limit: int) -> list[int]:
    """The current versions of the DAGs that can run and are due by ``until``, soonest first (at most
    ``limit``): what a new leader compiles before the boundary that needs them."""
    rows = await conn.execute(text("""
        SELECT current_version_id FROM dags
        WHERE NOT paused AND NOT deleted AND next_run_at <= :until AND schedule IS NOT NULL
          AND current_version_id IS NOT NULL
        ORDER BY next_run_at LIMIT :limit
    """), {"until": until, "limit": limit})
    return [int(r.current_version_id) for r in rows]
