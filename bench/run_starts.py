"""Starting runs behind a backlog: does a call cost the same with 100 or 100,000 runs queued?

The leader asks which queued runs ``max_active_runs`` lets start on every tick that finished a
run (and every scheduling interval). That call, :func:`~leoflow.db.stores.runs.lifecycle.startable_runs`,
used to rank every queued run of every DAG: 0.65 s a call with 100,000 waiting (a catch-up, a
loop of triggers), so one DAG's backlog slowed scheduling for all. This seeds a DAG at its limit
(16 running) with ``--backlog`` queued runs, plus a second DAG with room for 4 of its 8 queued
runs, and times the call (``--reps`` calls per size, on one connection, as the leader makes it).

    python bench/run_starts.py                         # 0, 1,000, 10,000 and 100,000 queued (~10 s)
    python bench/run_starts.py --backlog 0 500000 --reps 50

Targets: the p50 at the largest backlog under 5 ms, and at most 2 ms above the p50 at the
smallest. Before the call read only what it starts, it took 2.3 ms with none queued and 291 ms
with 100,000 here (more for a larger spec, whose JSON it read once per queued run).
Prints one JSON object as the last line and saves a PNG (``--png``, default bench/run_starts.png).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chain import refuse_below_one
from bench.plots import paired_bars
from bench.private_database import benchmark_database
from bench.scheduler import apply_spec, insert_runs, percentile, reset

#: The DAG at its limit, whose backlog grows (``bench.scheduler``'s fan DAG, 16 runs at once).
FULL = "bench-fan"
FULL_RUNNING = 16
#: A DAG with room: 2 of its 6 running slots taken, 8 queued, so every call starts 4 runs.
ROOM, ROOM_LIMIT, ROOM_RUNNING, ROOM_QUEUED = "bench-room", 6, 2, 8
MAX_BACKLOG = 10_000_000


def seed(url: str, backlog: int) -> None:
    """Both DAGs' runs, anew: ``backlog`` queued behind the full DAG's 16 running."""
    with psycopg.connect(url, autocommit=True) as conn:
        reset(conn)
        for dag_id, running, queued in ((FULL, FULL_RUNNING, backlog), (ROOM, ROOM_RUNNING, ROOM_QUEUED)):
            insert_runs(conn, dag_id, ("running", running), ("queued", queued))
        conn.execute("VACUUM ANALYZE dag_runs")


async def time_calls(url: str, reps: int) -> list[float]:
    from leoflow.db.connection.engine import make_async_engine
    from leoflow.db.stores.runs import lifecycle as run_store
    from leoflow.settings import DatabaseSettings

    engine = make_async_engine(DatabaseSettings(url=url), pool_size=1)
    times: list[float] = []
    try:
        async with engine.connect() as conn:
            for _ in range(reps):
                started = time.perf_counter()
                runs = await run_store.startable_runs(conn, 2000)
                times.append((time.perf_counter() - started) * 1000)
                assert len(runs) == ROOM_LIMIT - ROOM_RUNNING, runs
    finally:
        await engine.dispose()
    return times


def plot(summary: dict[str, Any], png: Path) -> None:
    sizes = list(summary["p50_ms"])
    paired_bars(png, [f"{int(size.removeprefix('queued_')):,}" for size in sizes],
                {q: [summary[f"{q}_ms"][size] for size in sizes] for q in ("p50", "p99")},
                xlabel="queued runs behind a DAG at its max_active_runs", ylabel="ms per call",
                title="startable_runs: which queued runs may start")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, nargs="+", default=[0, 1_000, 10_000, 100_000])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--database-url", default=None, help="an empty database (default: a private server)")
    parser.add_argument("--png", type=Path, default=Path(__file__).with_name("run_starts.png"))
    args = parser.parse_args(argv)
    refuse_below_one(parser, args, ["reps"])
    if any(n < 0 or n > MAX_BACKLOG for n in args.backlog):
        parser.error(f"--backlog: each size must be 0..{MAX_BACKLOG:,}")
    return args


def measure(url: str, backlogs: list[int], reps: int) -> dict[str, Any]:
    """Per backlog size (``queued_<n>``), the call's p50 and p99 over ``reps`` calls; and the targets."""
    for dag_id, limit in ((FULL, FULL_RUNNING), (ROOM, ROOM_LIMIT)):  # three tasks each
        apply_spec(url, 3, limit, dag_id)
    p50: dict[str, float] = {}
    p99: dict[str, float] = {}
    for backlog in backlogs:
        seed(url, backlog)
        times = sorted(asyncio.run(time_calls(url, reps)))
        p50[f"queued_{backlog}"] = round(statistics.median(times), 2)
        p99[f"queued_{backlog}"] = round(percentile(times, 0.99) or 0.0, 2)
    base, top = p50[f"queued_{backlogs[0]}"], p50[f"queued_{backlogs[-1]}"]
    return {"reps": reps, "p50_ms": p50, "p99_ms": p99,
            "targets": {"largest_backlog_p50<5ms": top < 5,
                        "largest_backlog_p50_at_most_2ms_above_smallest": top - base <= 2}}


def main() -> int:
    args = parse_args()
    with benchmark_database(args.database_url, prefix="leoflow-bench-run-starts-") as url:
        summary = measure(url, args.backlog, args.reps)
    plot(summary, args.png)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
