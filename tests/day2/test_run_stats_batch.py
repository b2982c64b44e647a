"""The observer's per-DAG run statistics: one statement per batch of endings, exact either way.

10,000 DAGs' runs ending at one minute boundary reach the observer as batches of 500 endings, 500
(DAG, state) deltas each; they were written one ``INSERT … ON CONFLICT`` per delta (10,000 round
trips, ~1 s of database time beside the scheduler's). Now one statement per batch, and the sums
are the same as adding each delta on its own: new rows inserted, existing ones added to bin by bin.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy import event

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.observed_endings import RunStatsDelta, add_run_stats
from leoflow.model.dag_metrics import DURATION_BUCKETS
from leoflow.settings import DatabaseSettings

BINS = len(DURATION_BUCKETS) + 1
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def delta(dag: str, state: str, runs: int, hour: int) -> RunStatsDelta:
    bins = [0] * BINS
    bins[runs % BINS] = runs
    return RunStatsDelta(dag_id=dag, state=state, runs=runs, duration_sum=runs * 1.5, bins=bins,
                         last_ended_at=T0 + timedelta(hours=hour))


def write(url: str, batches: list[list[RunStatsDelta]]) -> list[tuple[str, bool]]:
    """Each batch through ``add_run_stats`` in its own transaction; the statements sent (and
    whether each was an ``executemany``: one round trip per parameter set)."""
    statements: list[tuple[str, bool]] = []

    async def go() -> None:
        engine = make_async_engine(DatabaseSettings(url=url), pool_size=1)

        def sent(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
            statements.append((statement, many))

        event.listen(engine.sync_engine, "before_cursor_execute", sent)
        try:
            for batch in batches:
                async with engine.begin() as conn:
                    await add_run_stats(conn, batch)
        finally:
            await engine.dispose()
    asyncio.run(go())
    return [(s, many) for s, many in statements if "dag_run_stats" in s]


def test_a_batch_of_deltas_is_one_statement_with_the_same_sums(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        for i in range(300):  # the rows reference DAGs
            conn.execute("INSERT INTO dags (dag_id) VALUES (%s) ON CONFLICT DO NOTHING", (f"d{i:03d}",))
    first = [delta(f"d{i:03d}", state, i % 7 + 1, 1) for i in range(300) for state in ("success", "failed")]
    second = [delta(f"d{i:03d}", "success", 2, 3 if i % 2 else 0) for i in range(0, 300, 3)]
    statements = write(database_url, [list(reversed(first)), second])
    # One statement per batch, not one per delta (700 round trips through executemany).
    assert [many for _, many in statements] == [False, False], statements

    expected: dict[tuple[str, str], tuple[int, float, list[int], datetime]] = {}
    for d in first + second:
        runs, total, bins, last = expected.get((d.dag_id, d.state), (0, 0.0, [0] * BINS, d.last_ended_at))
        expected[(d.dag_id, d.state)] = (runs + d.runs, total + d.duration_sum,
                                         [a + b for a, b in zip(bins, d.bins, strict=True)], max(last, d.last_ended_at))
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT dag_id, state, runs, duration_sum, bins, last_ended_at "
                            "FROM dag_run_stats").fetchall()
    got = {(r[0], r[1]): (int(r[2]), float(r[3]), [int(b) for b in r[4]], r[5]) for r in rows}
    assert got == expected
