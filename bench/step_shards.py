"""What splitting a scheduler step's one write over concurrent transactions would gain (ADR 0012).

The scheduling latency target under load (upstream success → downstream handed over, p99 < 0.1 s under
the 1,000 x 100 load of ``bench/scheduler.py``) is set by one statement: the burst step's
:func:`~leoflow.db.stores.task_instances.queueing.count_and_queue`, which counts 16 roots' successes and queues
their 1,568 children in one transaction. A middle task waits for all of it. This measures that
statement as the burst runs it, on a database shaped like the benchmark's mid-run (3,000
finished runs, 16 running), once whole and then split by run into ``--shards`` parts run side by
side on as many connections (each its own transaction, rolled back after). The figure is the
wall time until every part has returned, as the scheduler would wait for it.

It measures the statement alone, as the design was measured before it was built; the whole
effect on the latency is ``bench/scheduler.py``'s (the ADR quotes both).

    python bench/step_shards.py                  # 1, 2 and 3 shards, 25 repetitions (~1 min)
    python bench/step_shards.py --shards 1 2 --reps 50

Prints one JSON object as the last line and saves a PNG (``--png``, default bench/step_shards.png).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.plots import paired_bars
from bench.private_database import benchmark_database
from bench.scheduler import DAG_ID, apply_spec, insert_runs, reset

MIDDLES = 98
ACTIVE_RUNS = 16
FINISHED_RUNS = 3000


def shape(url: str) -> list[int]:
    """The benchmark's database mid-run: finished runs' rows, and 16 runs whose roots just ended."""
    apply_spec(url, MIDDLES + 2, ACTIVE_RUNS)
    with psycopg.connect(url, autocommit=True) as c:
        reset(c)
        insert_runs(c, DAG_ID, ("success", FINISHED_RUNS), ("running", ACTIVE_RUNS))
        c.execute("""
            INSERT INTO task_instances (run_pk, task_id, state, try_number, max_tries, pending_upstreams, pool, is_leaf)
            SELECT r.id, t.task_id,
                   CASE WHEN r.state = 'success' OR t.task_id = 'root' THEN 'success' ELSE 'pending' END,
                   CASE WHEN r.state = 'success' OR t.task_id = 'root' THEN 1 ELSE 0 END, 1,
                   CASE WHEN r.state = 'success' THEN 0 ELSE t.ups END, 'default', t.task_id = 'join'
            FROM dag_runs r, (SELECT 'root' AS task_id, 0 AS ups
                              UNION ALL SELECT 'm' || i, 1 FROM generate_series(0, %s) i
                              UNION ALL SELECT 'join', %s) t""", (MIDDLES - 1, MIDDLES))
        c.execute("""
            INSERT INTO task_tries (task_instance_id, try_number, state, term, queued_at, ended_at)
            SELECT id, 1, 'success', 1, now(), now() FROM task_instances WHERE state = 'success'""")
        c.execute("VACUUM ANALYZE")
        return [int(r[0]) for r in c.execute("SELECT id FROM dag_runs WHERE state = 'running' ORDER BY id")]


async def measure(url: str, runs: list[int], shard_counts: list[int], reps: int) -> dict[int, list[float]]:
    from leoflow.db.connection.engine import make_async_engine
    from leoflow.db.stores.task_instances import queueing as queue_store
    from leoflow.db.stores.task_instances.queueing import QueueRoom
    from leoflow.settings import DatabaseSettings

    engine = make_async_engine(DatabaseSettings(url=url), pool_size=max(shard_counts))

    async def write(part: list[int]) -> int:
        outcomes = [(run, f"m{i}", "success") for run in part for i in range(MIDDLES)]
        async with engine.connect() as conn:
            tx = await conn.begin()
            done = await queue_store.count_and_queue(conn, outcomes, [True] * len(outcomes), datetime.now(UTC), 1,
                                                     QueueRoom(parallelism=2048, limit=10_000))
            await tx.rollback()
        return len(done.queued)

    times: dict[int, list[float]] = {k: [] for k in shard_counts}
    try:
        async with engine.connect() as warm:  # every connection of the pool opened before timing
            await warm.close()
        for _ in range(reps):
            for k in shard_counts:  # alternating, so the host's drift hits every count alike
                parts = [runs[i::k] for i in range(k)]
                started = time.perf_counter()
                queued = await asyncio.gather(*(write(p) for p in parts))
                times[k].append((time.perf_counter() - started) * 1000)
                assert sum(queued) == len(runs) * MIDDLES, queued
    finally:
        await engine.dispose()
    return times


def plot(summary: dict[str, Any], png: Path) -> None:
    rows = summary["shards"]
    paired_bars(png, [str(r["shards"]) for r in rows],
                {"median": [r["median_ms"] for r in rows], "min": [r["min_ms"] for r in rows]},
                xlabel="transactions the burst's write is split over (by run)", ylabel="ms until every part returned",
                title=f"count_and_queue of one burst ({summary['queued']} tasks queued)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--database-url", default=None, help="an empty database (default: a private server)")
    parser.add_argument("--png", type=Path, default=Path(__file__).with_name("step_shards.png"))
    args = parser.parse_args()
    if any(k < 1 or k > ACTIVE_RUNS for k in args.shards):
        parser.error(f"--shards: each count must be 1..{ACTIVE_RUNS}")
    with benchmark_database(args.database_url, prefix="leoflow-bench-shards-") as url:
        runs = shape(url)
        times = asyncio.run(measure(url, runs, args.shards, args.reps))
    summary = {"queued": len(runs) * MIDDLES, "reps": args.reps, "shards": [
        {"shards": k, "median_ms": round(statistics.median(t), 1), "min_ms": round(min(t), 1),
         "p90_ms": round(sorted(t)[int(len(t) * 0.9)], 1)} for k, t in times.items()]}
    plot(summary, args.png)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
