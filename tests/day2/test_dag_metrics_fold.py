"""The per-DAG metric tables folded for a scrape: exact, element by element, in one pass.

The fold reads each ``dag_run_stats`` row once (the bins summed with one aggregate per bin): it
used to unnest every row's bins and join the sums back per label, which took longer than a scrape
may wait (2 s) at 10,000 DAGs, and the scrape then served no per-DAG series at all.
"""

from __future__ import annotations

import asyncio
import time

import psycopg

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.dag_metrics import RunStats, folded_run_stats
from leoflow.model.dag_metrics import DURATION_BUCKETS
from leoflow.settings import DatabaseSettings

BINS = len(DURATION_BUCKETS) + 1


def fold(url: str, max_dags: int) -> list[RunStats]:
    async def read() -> list[RunStats]:
        engine = make_async_engine(DatabaseSettings(url=url), pool_size=1)
        try:
            async with engine.connect() as conn:
                return await folded_run_stats(conn, max_dags)
        finally:
            await engine.dispose()
    return asyncio.run(read())


def test_the_rest_is_summed_bin_by_bin(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("INSERT INTO dags (dag_id, deleted) VALUES ('a', false), ('b', false), ('c', false), "
                   "('d', false), ('gone', true)")
        for dag_id, state, runs, bins in (("a", "success", 2, [1, 1]), ("b", "success", 3, [0, 3]),
                                          ("c", "success", 4, [4, 0]), ("c", "failed", 1, [0, 1]),
                                          ("d", "success", 5, [2, 3]), ("gone", "success", 9, [9, 0])):
            db.execute("INSERT INTO dag_run_stats (dag_id, state, runs, duration_sum, bins, last_ended_at) "
                       "VALUES (%s, %s, %s, %s, %s, now() - make_interval(hours => %s))",
                       (dag_id, state, runs, float(runs), bins + [0] * (BINS - 2), runs))
    rows = {(r.dag_id, r.state): r for r in fold(database_url, 2)}
    assert set(rows) == {("a", "success"), ("b", "success"), ("_other", "success"), ("_other", "failed")}
    other = rows[("_other", "success")]
    assert (other.runs, other.duration_sum, other.bins) == (9, 9.0, [6, 3] + [0] * (BINS - 2))
    assert rows[("b", "success")].bins == [0, 3] + [0] * (BINS - 2)
    assert rows[("_other", "failed")].bins == [0, 1] + [0] * (BINS - 2)
    every = {(r.dag_id, r.state): r for r in fold(database_url, 10)}
    assert set(every) == {("a", "success"), ("b", "success"), ("c", "success"), ("c", "failed"), ("d", "success")}
    # The latest end of c's (4 h ago) and d's (5 h ago); the deleted DAG's (9 h ago) is left out.
    assert other.last_ended_at == every[("c", "success")].last_ended_at != every[("d", "success")].last_ended_at


def test_ten_thousand_dags_fold_well_within_a_scrape(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("INSERT INTO dags (dag_id) SELECT 'dag-' || lpad(i::text, 5, '0') FROM generate_series(1, 10000) i")
        db.execute("INSERT INTO dag_run_stats (dag_id, state, runs, duration_sum, bins, last_ended_at) "
                   "SELECT dag_id, s, 1, 1.0, %s, now() FROM dags, unnest(ARRAY['success', 'failed', 'cancelled']) s",
                   ([1] + [0] * (BINS - 1),))
        db.execute("ANALYZE dag_run_stats")
    for max_dags, expected in ((200, 603), (10_000, 30_000)):
        started = time.monotonic()
        rows = fold(database_url, max_dags)
        # The old statement took minutes for every DAG's series (a join per label over all sums).
        assert time.monotonic() - started < 5.0
        assert len(rows) == expected
        assert sum(r.runs for r in rows) == 30_000 and sum(sum(r.bins) for r in rows) == 30_000
