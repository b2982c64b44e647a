"""Retention benchmark: how fast old history goes, how long each batch holds its locks, and what
scheduling notices meanwhile.

Against a private embedded PostgreSQL (or ``--database-url``):

1. **Seed** ``--runs`` finished runs (default 20,000) of a DAG with ``--tasks`` tasks (default 20),
   each task with one try and a ~225-byte log, ending evenly over the last 60 days
   (``generate_series``, not through the API). Reports the bytes of history per run (tables and
   indexes) — the figure behind the sizing advice in docs/operations.md.
2. **Baseline**: for ``--seconds`` a leader's scheduler (in this process, memory executor,
   10 ms tries) runs a 3-task chain triggered every 100 ms; records each run's latency
   (created → ended).
3. **Purge under load**: the same workload while retention purges everything that ended more
   than 30 days ago, with the product's batch sizes and pauses (the leader's code path, fenced).
   Records each batch transaction's duration (what a lock can be held for at most), the rows
   deleted per second, and the run latencies during the purge.
4. **After**: the workload alone again for ``--seconds``, so a slower machine is told apart from
   the purge's own cost.

Prints one JSON object as the last line and saves ``bench/retention.png`` (or ``--png``).

    python bench/retention.py                         # 20,000 runs x 20 tasks
    python bench/retention.py --runs 2000 --seconds 10  # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.private_database import benchmark_database  # noqa: E402
from leoflow.clock import SystemClock  # noqa: E402
from leoflow.db.connection.database import Connection, Database  # noqa: E402
from leoflow.db.connection.engine import make_async_engine  # noqa: E402
from leoflow.db.stores import dags as dag_store  # noqa: E402
from leoflow.db.stores.runs import lifecycle as run_store  # noqa: E402
from leoflow.executor.memory import MemoryExecutor  # noqa: E402
from leoflow.housekeeping import retention  # noqa: E402
from leoflow.leadership import LeaderContext  # noqa: E402
from leoflow.model.spec.dag import parse_dag_spec  # noqa: E402
from leoflow.scheduler.service import SchedulerService  # noqa: E402
from leoflow.settings import SchedulerSettings, load_settings  # noqa: E402

HISTORY_TABLES = ("dag_runs", "task_instances", "task_tries", "task_logs")
CHAIN = {"dag_id": "live", "max_active_runs": 1000, "tasks": [
    {"id": "a", "image": "x", "command": ["true"]},
    {"id": "b", "image": "x", "command": ["true"], "depends_on": ["a"]},
    {"id": "c", "image": "x", "command": ["true"], "depends_on": ["b"]}]}


def seed(url: str, runs: int, tasks: int) -> dict[str, Any]:
    started = time.monotonic()
    spec = parse_dag_spec({"dag_id": "history", "tasks": [
        {"id": f"t{i}", "image": "x", "command": ["true"]} for i in range(tasks)]})
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO dags (dag_id) VALUES ('history')")
        vid = conn.execute("INSERT INTO dag_versions (dag_id, version, spec, spec_hash) "
                           "VALUES ('history', 1, %s, %s) RETURNING id",
                           (json.dumps(spec.to_canonical()), spec.spec_hash())).fetchone()[0]  # type: ignore[index]
        conn.execute("UPDATE dags SET current_version_id = %s", (vid,))
        conn.execute("""
            INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, created_at, started_at, ended_at)
            SELECT 'history', 'r' || g, %s, 'manual', 'success', e - interval '5 minutes', e - interval '5 minutes', e
            FROM (SELECT g, now() - g * (interval '60 days' / %s) AS e FROM generate_series(1, %s) g) s
        """, (vid, runs, runs))
        conn.execute("""
            INSERT INTO task_instances (run_pk, task_id, state, try_number, ended_at)
            SELECT r.id, 't' || t, 'success', 1, r.ended_at
            FROM dag_runs r CROSS JOIN generate_series(0, %s - 1) t WHERE r.dag_id = 'history'
        """, (tasks,))
        conn.execute("""
            INSERT INTO task_tries (task_instance_id, try_number, state, term, executor_ref, claimed_by,
                                    ended_at, logs_shipped_at, resource_deleted_at)
            SELECT ti.id, 1, 'success', 1, 'pod-' || ti.id, 'default/n1', ti.ended_at, ti.ended_at, ti.ended_at
            FROM task_instances ti
        """)
        conn.execute("INSERT INTO task_logs (task_try_id, content, size_bytes) "
                     "SELECT id, repeat('log line ', 25), 225 FROM task_tries")
        conn.execute("VACUUM ANALYZE")
        size = sum(conn.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0]  # type: ignore[index]
                   for t in HISTORY_TABLES)
    return {"runs": runs, "tasks_per_run": tasks, "seconds": round(time.monotonic() - started, 1),
            "history_bytes": size, "bytes_per_run": round(size / runs),
            "bytes_per_task_try": round(size / (runs * tasks))}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float], scale: float = 1000.0) -> dict[str, Any]:
    return {"n": len(values), "p50_ms": _ms(percentile(values, 0.5), scale),
            "p99_ms": _ms(percentile(values, 0.99), scale), "max_ms": _ms(max(values) if values else None, scale),
            "mean_ms": _ms(statistics.fmean(values) if values else None, scale)}


def _ms(value: float | None, scale: float) -> float | None:
    return None if value is None else round(value * scale, 1)


async def workload(engine: Any, stop: asyncio.Event, latencies: list[tuple[float, float]], started: float) -> None:
    """Trigger a chain run every 100 ms; record (time, created → ended) of each finished run."""
    pending: dict[str, float] = {}
    clock = SystemClock()
    while not stop.is_set() or pending:
        if not stop.is_set():
            async with engine.begin() as conn:
                run_id = await run_store.trigger_run(conn, "live", run_id=None, conf={}, clock=clock)
            pending[run_id] = time.monotonic()
        async with engine.connect() as conn:
            from sqlalchemy import text

            done = (await conn.execute(text("SELECT run_id, EXTRACT(EPOCH FROM ended_at - created_at) FROM dag_runs "
                                            "WHERE dag_id = 'live' AND run_id = ANY(:ids) AND ended_at IS NOT NULL"),
                                       {"ids": list(pending)})).all()
        for run_id, seconds in done:
            latencies.append((pending.pop(run_id) - started, float(seconds)))
        await asyncio.sleep(0.1)


async def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    settings = load_settings({"LEOFLOW_DATABASE_URL": url, "LEOFLOW_LOG_LEVEL": "warning"})
    settings = settings.replace(scheduler=SchedulerSettings(interval=0.2))
    engine = make_async_engine(settings.database, pool_size=8, application_name="bench-retention")
    from sqlalchemy import text

    async with engine.begin() as conn:
        await dag_store.apply_dag(conn, parse_dag_spec(CHAIN), clock=SystemClock())
        await conn.execute(text("INSERT INTO cluster_leadership (cluster, term, node_id) "
                                "VALUES ('default', 1, 'bench')"))
    db = Database(engine)
    ctx = LeaderContext(term=1, settings=settings, db=db, clock=SystemClock())
    executor = MemoryExecutor(delay=0.01)
    scheduler = SchedulerService(executor)
    sched_task = asyncio.create_task(scheduler.run(ctx), name="bench-scheduler")
    started = time.monotonic()
    baseline: list[tuple[float, float]] = []
    during: list[tuple[float, float]] = []
    after: list[tuple[float, float]] = []
    batches: list[tuple[float, float]] = []  # (start offset, duration) of each batch transaction

    original = retention._batch

    @contextlib.asynccontextmanager
    async def timed_batch(db_: Database, fence: Any) -> AsyncIterator[Connection]:
        begun = time.monotonic()
        async with original(db_, fence) as conn:
            yield conn
        batches.append((begun - started, time.monotonic() - begun))

    retention._batch = timed_batch  # type: ignore[assignment]
    try:
        stop = asyncio.Event()
        feeder = asyncio.create_task(workload(engine, stop, baseline, started))
        await asyncio.sleep(args.seconds)
        stop.set()
        await feeder

        stop = asyncio.Event()
        feeder = asyncio.create_task(workload(engine, stop, during, started))
        purge_started = time.monotonic()
        now = datetime.now(UTC)
        counts = await retention.purge(db, retention.policy_for(now - timedelta(days=30), "kubernetes"),
                                       fence=("default", 1))
        purge_seconds = time.monotonic() - purge_started
        stop.set()
        await feeder

        # The same workload afterwards: tells the purge's cost apart from the machine's mood.
        stop = asyncio.Event()
        feeder = asyncio.create_task(workload(engine, stop, after, started))
        after_started = time.monotonic()
        await asyncio.sleep(args.seconds)
        stop.set()
        await feeder
    finally:
        retention._batch = original
        sched_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sched_task
        await executor.stop()
        await engine.dispose()
    rows = sum(n for _, n in counts.items())
    return {
        "purged": dict(counts.items()),
        "purge_seconds": round(purge_seconds, 2),
        "rows_per_second": round(rows / purge_seconds),
        "runs_per_second": round(counts.dag_runs / purge_seconds),
        "batch_transaction": summary([d for _, d in batches]),
        "run_latency_baseline": summary([s for _, s in baseline]),
        "run_latency_during_purge": summary([s for _, s in during]),
        "run_latency_after": summary([s for _, s in after]),
        "_series": {"batches": batches, "baseline": baseline, "during": during, "after": after,
                    "purge_started": purge_started - started, "after_started": after_started - started},
    }


def plot(result: dict[str, Any], png: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    series = result.pop("_series")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.scatter([t for t, _ in series["batches"]], [d * 1000 for _, d in series["batches"]], s=4)
    top.set_ylabel("batch transaction (ms)")
    top.set_title(f"retention: {result['purged']['dag_runs']:,} runs, {result['rows_per_second']:,} rows/s")
    for name, colour, label in (("baseline", "tab:green", "before"), ("during", "tab:red", "while purging"),
                                ("after", "tab:blue", "after")):
        points = series[name]
        bottom.scatter([t for t, _ in points], [s * 1000 for _, s in points], s=4, c=colour,
                       label=f"run latency {label}")
    bottom.axvline(series["purge_started"], color="grey", linestyle=":")
    bottom.axvline(series["after_started"], color="grey", linestyle=":")
    bottom.set_ylabel("created → ended (ms)")
    bottom.set_xlabel("seconds")
    bottom.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="use this empty database instead of a private server")
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the baseline phase")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "retention.png")
    args = parser.parse_args()

    with benchmark_database(args.database_url, prefix="leoflow-bench-retention-") as url:
        result: dict[str, Any] = {"benchmark": "retention", "cpus": os.cpu_count(),
                                  "seed": seed(url, args.runs, args.tasks)}
        result.update(asyncio.run(run(url, args)))
    plot(result, args.png)
    result.pop("_series", None)
    result["png"] = str(args.png)
    print(json.dumps(result))

if __name__ == "__main__":
    main()
