"""The per-DAG metric tables, read for ``/metrics`` by every replica, already folded.

Folding happens in SQL so a scrape transfers at most ``max_dags`` times states + a few rows and
``max_tasks`` + a few rows, however many DAGs and tasks the history holds (see
:mod:`leoflow.model.dag_metrics` for the rule). Deleted DAGs are left out: their series
disappear instead of alerting forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.model.dag_metrics import DURATION_BUCKETS, OTHER


@dataclass(frozen=True)
class RunStats:
    dag_id: str
    state: str
    runs: int
    duration_sum: float
    bins: list[int]
    last_ended_at: datetime | None


#: The histogram's bins (one per bound, and one above the last) summed element by element: one
#: aggregate per bin, so folding reads each row once. (Unnesting every row's bins and joining the
#: sums back per label took longer than a scrape may wait — 2 s — at 10,000 DAGs.)
_SUMMED_BINS = "ARRAY[" + ", ".join(f"sum(bins[{i}])" for i in range(1, len(DURATION_BUCKETS) + 2)) + "]::bigint[]"

_FOLDED_RUN_STATS = text(f"""
    WITH ranked AS (
        SELECT s.*, dense_rank() OVER (ORDER BY s.dag_id) AS dag_rank
        FROM dag_run_stats s JOIN dags d ON d.dag_id = s.dag_id AND NOT d.deleted
    )
    SELECT dag_id, state, runs, duration_sum, last_ended_at, bins FROM ranked WHERE dag_rank <= :max_dags
    UNION ALL
    SELECT :other, state, sum(runs)::bigint, sum(duration_sum)::float8, max(last_ended_at), {_SUMMED_BINS}
    FROM ranked WHERE dag_rank > :max_dags GROUP BY state
    ORDER BY 1, 2
""")


async def folded_run_stats(conn: AsyncConnection, max_dags: int) -> list[RunStats]:
    """One row per (DAG, state) of the first ``max_dags`` DAGs by id, one per state for the rest."""
    rows = await conn.execute(_FOLDED_RUN_STATS, {"max_dags": max_dags, "other": OTHER})
    return [RunStats(**r._mapping) for r in rows]


async def folded_task_failures(conn: AsyncConnection, max_dags: int, max_tasks: int) -> list[tuple[str, str, int]]:
    rows = await conn.execute(text("""
        WITH ranked AS (
            SELECT c.dag_id, c.task_id, c.failures,
                   dense_rank() OVER (ORDER BY c.dag_id) AS dag_rank,
                   row_number() OVER (ORDER BY c.dag_id, c.task_id) AS pair_rank
            FROM task_failure_counts c JOIN dags d ON d.dag_id = c.dag_id AND NOT d.deleted
        )
        SELECT CASE WHEN dag_rank <= :max_dags THEN dag_id ELSE :other END AS dag_id,
               CASE WHEN dag_rank <= :max_dags AND pair_rank <= :max_tasks THEN task_id ELSE :other END AS task_id,
               sum(failures)::bigint AS failures
        FROM ranked GROUP BY 1, 2 ORDER BY 1, 2
    """), {"max_dags": max_dags, "max_tasks": max_tasks, "other": OTHER})
    return [(r.dag_id, r.task_id, int(r.failures)) for r in rows]
