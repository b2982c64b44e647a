"""Datasets benchmark (issue 40): how soon data arriving starts the runs waiting on it, and what a burst costs.

Against one real ``leoflow serve`` replica (memory executor: a task ends as soon as it is handed
over, so what is measured is the scheduler's part) on a private embedded PostgreSQL (or
``--database-url``, an empty database). Four phases:

1. **producer → consumer**: ``--pairs`` (50) DAG pairs, ``p<i>`` whose task ``produces`` a URI and
   ``c<i>`` whose schedule is ``{datasets: {any: [that URI]}}``; each producer triggered alone.
   Measured from the producer's task success (``task_instances.ended_at``, stamped by the step that
   recorded it) to the consumer's first task queued (its ``queued_at``); p50/p99 (target p99 < 100 ms).
   Both stamps are the start of the leader's step that wrote them, so the figure is "success step
   began → queueing step began"; the wall-clock from the producer's trigger request until the
   consumer's task is seen queued (polling every 2 ms) is beside it as an upper bound.
2. **outside event → run queued**: ``--pairs`` DAGs waiting on their own URI; ``POST
   /api/v2/datasets/events`` for each, one at a time, wall clock from sending the request until the
   run row is seen (polling every 2 ms; target p99 < 100 ms), and the database's view
   (``dag_runs.created_at - dataset_events.created_at``).
3. **fan-in**: ``--fan`` (1,000) DAGs each waiting on one of as many URIs; one event each, recorded
   in one transaction (an outside batch); from its commit until every run was created and until
   every run has started (left ``queued``; target < 5 s). The scheduler's tick p99 (from the
   replica's ``leoflow_scheduler_tick_duration_seconds`` histogram, the bucket bound) is read over
   an idle window before the DAGs exist, an idle window with them waiting, and the burst.
4. **burst**: ``--burst-events`` (100,000) events of one URI three DAGs wait on, sent with ``wrk``
   at ``--burst-rate`` (1,700/s, 100,000 in a minute) through the API, while a probe reads ``GET
   /api/v2/dags`` and ``GET /api/v2/datasets`` one request at a time (p50/p99 beside the same probe
   without the burst). Afterwards: the events recorded, the queue rows of the URI (coalesced: one per
   consumer), the runs each consumer got, and the replica's RSS before and after.

Prints one JSON object as the last line and saves a PNG (``--png``, default bench/datasets.png).

    python bench/datasets.py                       # everything (~3 min on a quiet 2-core host)
    python bench/datasets.py --burst-events 0      # without the burst
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from bench.api import AUTH, TOKEN, database, replica, wait_for  # noqa: E402
from bench.chain import refuse_below_one  # noqa: E402
from bench.plots import paired_bars  # noqa: E402
from bench.scheduler import percentile, rss_kb  # noqa: E402
from leoflow.db import migrations  # noqa: E402
from leoflow.standalone.embedded import free_port  # noqa: E402

#: The issue's targets.
LATENCY_P99_S = 0.100
FAN_ALL_STARTED_S = 5.0
#: Seconds each idle window of phase 3 lasts (the leader ticks once a second when idle).
IDLE_WINDOW_S = 6.0


def task(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], **fields}


def waiting_on(dag_id: str, uri: str) -> dict[str, Any]:
    return {"dag_id": dag_id, "schedule": {"datasets": {"any": [uri]}}, "tasks": [task("first")]}


def apply(client: httpx.Client, spec: dict[str, Any]) -> None:
    answer = client.post("/api/v2/dags", json=spec, headers=AUTH)
    if answer.status_code not in (200, 201):
        raise SystemExit(f"bench/datasets.py: applying {spec['dag_id']}: {answer.status_code} {answer.text[:300]}")


def poll(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """``check()`` every 2 ms until it is truthy; its value."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.002)
    raise SystemExit(f"bench/datasets.py: timed out waiting for {what}")


def scalar(db: psycopg.Connection[Any], sql: str, *params: Any) -> Any:
    """The first column of the first row (None without one)."""
    row = db.execute(sql, params).fetchone()
    return None if row is None else row[0]


def summary(seconds: list[float]) -> dict[str, Any]:
    ordered = sorted(seconds)
    if not ordered:
        return {"n": 0}
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered) * 1000, 1),
            "p99_ms": round((percentile(ordered, 0.99) or 0.0) * 1000, 1)}


def phase_producer(client: httpx.Client, db: psycopg.Connection[Any], pairs: int) -> dict[str, Any]:
    for i in range(pairs):
        apply(client, {"dag_id": f"p{i}", "tasks": [task("load", produces=[f"s3://bench/p/{i}"])]})
        apply(client, waiting_on(f"c{i}", f"s3://bench/p/{i}"))
    time.sleep(1.0)
    stamped: list[float] = []
    wall: list[float] = []
    for i in range(pairs):
        started = time.perf_counter()
        client.post(f"/api/v2/dags/p{i}/runs", json={}, headers=AUTH).raise_for_status()
        consumer = f"c{i}"
        poll(partial(scalar, db, "SELECT 1 FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk "
                     "WHERE r.dag_id = %s AND ti.queued_at IS NOT NULL", consumer), f"the consumer {consumer}'s task")
        wall.append(time.perf_counter() - started)
        [(seconds,)] = db.execute("""
            SELECT extract(epoch FROM c.queued_at - p.ended_at)
            FROM task_instances p JOIN dag_runs pr ON pr.id = p.run_pk,
                 task_instances c JOIN dag_runs cr ON cr.id = c.run_pk
            WHERE pr.dag_id = %s AND cr.dag_id = %s""", (f"p{i}", f"c{i}")).fetchall()
        stamped.append(float(seconds))
    return {"success_to_first_task_queued": summary(stamped), "trigger_to_seen_queued_wall": summary(wall),
            "target_p99<100ms": (summary(stamped)["p99_ms"] or 0) < LATENCY_P99_S * 1000}


def phase_outside(client: httpx.Client, db: psycopg.Connection[Any], pairs: int) -> dict[str, Any]:
    for i in range(pairs):
        apply(client, waiting_on(f"e{i}", f"s3://bench/e/{i}"))
    time.sleep(1.0)
    wall: list[float] = []
    for i in range(pairs):
        started = time.perf_counter()
        client.post("/api/v2/datasets/events", json={"uri": f"s3://bench/e/{i}"}, headers=AUTH).raise_for_status()
        waiting = f"e{i}"
        poll(partial(scalar, db, "SELECT 1 FROM dag_runs WHERE dag_id = %s", waiting), f"the run of {waiting}")
        wall.append(time.perf_counter() - started)
    stamped = [float(s) for (s,) in db.execute("""
        SELECT extract(epoch FROM r.created_at - e.created_at)
        FROM dataset_events e JOIN dag_runs r ON r.dag_id = 'e' || substr(e.uri, length('s3://bench/e/') + 1)
        WHERE e.uri LIKE 's3://bench/e/%%'""").fetchall()]
    return {"request_to_run_seen_wall": summary(wall), "event_to_run_created_db": summary(stamped),
            "target_p99<100ms": (summary(wall)["p99_ms"] or 0) < LATENCY_P99_S * 1000}


def tick_histogram(client: httpx.Client) -> dict[float, float]:
    """The replica's tick-duration histogram: cumulative count per bucket bound."""
    text = client.get("/metrics", headers=AUTH).text
    out: dict[float, float] = {}
    for match in re.finditer(r'^leoflow_scheduler_tick_duration_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M):
        out[float(match.group(1))] = float(match.group(2))
    return out


def tick_p99(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """The bucket bound below which 99 % of the ticks between two scrapes fell, and how many ticked."""
    bounds = sorted(after)
    deltas = [after[b] - before.get(b, 0.0) for b in bounds]
    total = deltas[-1] if deltas else 0.0
    if not total:
        return {"ticks": 0, "p99_bucket_s": None}
    bound = next(b for b, d in zip(bounds, deltas, strict=True) if d >= 0.99 * total)
    return {"ticks": int(total), "p99_bucket_s": bound}


async def record_batch(url: str, uris: list[str]) -> float:
    """Record one event of each URI in one transaction (as the API's statement does); its commit time."""
    from leoflow.clock import SystemClock
    from leoflow.db.connection.engine import make_async_engine
    from leoflow.db.stores.datasets.events import record_api_event
    from leoflow.settings import DatabaseSettings

    engine = make_async_engine(DatabaseSettings(url=url), pool_size=1)
    try:
        async with engine.begin() as conn:
            for uri in uris:
                await record_api_event(conn, uri, {}, created_by="bench", now=SystemClock().now())
        return time.perf_counter()
    finally:
        await engine.dispose()


def phase_fan(client: httpx.Client, db: psycopg.Connection[Any], url: str, fan: int) -> dict[str, Any]:
    first = tick_histogram(client)
    time.sleep(IDLE_WINDOW_S)
    before_dags = tick_p99(first, tick_histogram(client))
    for i in range(fan):
        apply(client, waiting_on(f"f{i:04d}", f"s3://bench/f/{i:04d}"))
    time.sleep(1.0)
    second = tick_histogram(client)
    time.sleep(IDLE_WINDOW_S)
    third = tick_histogram(client)
    waiting = tick_p99(second, third)
    committed = asyncio.run(record_batch(url, [f"s3://bench/f/{i:04d}" for i in range(fan)]))
    count = "SELECT count(*) FROM dag_runs WHERE dag_id LIKE 'f%%' AND run_type = 'dataset'"
    poll(lambda: scalar(db, count) >= fan, "every fan-in run created", timeout=60)
    created = time.perf_counter() - committed
    poll(lambda: scalar(db, count + " AND state <> 'queued'") >= fan, "every fan-in run started", timeout=60)
    started = time.perf_counter() - committed
    time.sleep(1.0)
    burst = tick_p99(third, tick_histogram(client))
    return {"dags": fan, "all_runs_created_s": round(created, 3), "all_runs_started_s": round(started, 3),
            "tick_p99_without_dataset_dags": before_dags, "tick_p99_with_dags_waiting": waiting,
            "tick_p99_over_the_burst": burst, "target_all_started<5s": started < FAN_ALL_STARTED_S,
            # Unchanged: 1,000 DAGs waiting on datasets do not raise the idle tick's p99 bucket.
            "target_idle_tick_p99_unchanged": (waiting["p99_bucket_s"] or 0) <= (before_dags["p99_bucket_s"] or 0)}


WRK_POST = """
wrk.method = "POST"
wrk.body = '{"uri": "s3://bench/hot", "extra": {"rows": 1}}'
wrk.headers["Content-Type"] = "application/json"
function delay() return %d end
done = function(summary, latency, requests)
  io.write(string.format('WRKJSON {"requests":%%d,"duration_us":%%d,"non_2xx":%%d,"p99_us":%%d}\\n',
    summary.requests, summary.duration, summary.errors.status, latency:percentile(99)))
end
"""


def probe(base: str, stop: threading.Event, out: dict[str, list[float]]) -> None:
    """Read the DAG list and the dataset list one request at a time until ``stop``."""
    with httpx.Client(base_url=base, timeout=30) as client:
        while not stop.is_set():
            for path in ("/api/v2/dags?limit=50", "/api/v2/datasets?limit=50"):
                started = time.perf_counter()
                client.get(path, headers=AUTH).raise_for_status()
                out.setdefault(path, []).append(time.perf_counter() - started)
            time.sleep(0.02)


def probed(base: str, seconds: float, during: Callable[[], Any] | None = None) -> tuple[dict[str, Any], Any]:
    stop = threading.Event()
    samples: dict[str, list[float]] = {}
    thread = threading.Thread(target=probe, args=(base, stop, samples), daemon=True)
    thread.start()
    value = None
    if during is not None:
        value = during()
    else:
        time.sleep(seconds)
    stop.set()
    thread.join()
    return {path: summary(s) for path, s in samples.items()}, value


def phase_burst(client: httpx.Client, db: psycopg.Connection[Any], base: str, pid: int, events: int,
                rate: int, connections: int) -> dict[str, Any]:
    consumers = ("hot-a", "hot-b", "hot-c")
    for dag_id in consumers:
        apply(client, waiting_on(dag_id, "s3://bench/hot"))
    for dag_id in consumers:  # paused: the whole burst stays queued, so the coalescing is what is seen
        client.patch(f"/api/v2/dags/{dag_id}", json={"paused": True}, headers=AUTH).raise_for_status()
    rss_before = rss_kb(pid)[0]
    quiet, _ = probed(base, 10.0)
    seconds = max(1, round(events / rate))
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text(WRK_POST % max(0, round(1000 * connections / rate)))

    def send() -> dict[str, Any]:
        done = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
                               "-H", f"Authorization: Bearer {TOKEN}", "-s", str(script),
                               f"{base}/api/v2/datasets/events"], capture_output=True, text=True,
                              timeout=seconds + 120)
        match = re.search(r"^WRKJSON (.*)$", done.stdout, re.M)
        if not match:
            raise SystemExit(f"bench/datasets.py: wrk failed: {done.stdout}{done.stderr}")
        return dict(json.loads(match.group(1)))

    try:
        loaded, sent = probed(base, 0, send)
    finally:
        script.unlink()
    rss_after = rss_kb(pid)[0]
    recorded = scalar(db, "SELECT count(*) FROM dataset_events WHERE uri = 's3://bench/hot'")
    queue = db.execute("SELECT dag_id, events FROM dataset_queue WHERE uri = 's3://bench/hot' "
                       "ORDER BY dag_id").fetchall()
    for dag_id in consumers:
        client.patch(f"/api/v2/dags/{dag_id}", json={"paused": False}, headers=AUTH).raise_for_status()
    runs_sql = "SELECT count(*) FROM dag_runs WHERE dag_id = %s"
    for dag_id in consumers:
        poll(partial(scalar, db, runs_sql, dag_id), f"the run of {dag_id}")
    time.sleep(2.0)
    runs = {dag_id: scalar(db, runs_sql, dag_id) for dag_id in consumers}
    wall = sent["duration_us"] / 1e6
    probe_p99 = max(s["p99_ms"] for s in loaded.values())

    def reads(probed: dict[str, Any]) -> dict[str, Any]:
        return {path.split("?")[0].rsplit("/", 1)[1]: f"{s['p50_ms']} / {s['p99_ms']}" for path, s in probed.items()}

    return {"events_sent": sent["requests"], "events_recorded": recorded, "non_2xx": sent["non_2xx"],
            "seconds": round(wall, 1), "events_per_s": round(sent["requests"] / wall, 1),
            "post_p99_ms": round(sent["p99_us"] / 1000, 1), "queue_rows": {d: n for d, n in queue},
            "runs_per_consumer": runs, "replica_rss_mb_before": round(rss_before / 1024, 1),
            "replica_rss_mb_after": round(rss_after / 1024, 1),
            "target_coalesced": len(queue) == len(consumers) and all(n == 1 for n in runs.values()),
            "read_p50_p99_ms_quiet": reads(quiet), "read_p50_p99_ms_during_burst": reads(loaded),
            "target_read_p99<40ms_during_burst": probe_p99 < 40}


def plot(result: dict[str, Any], png: Path) -> None:
    labels = ["success → task queued", "API event → run"]
    p50 = [result["producer"]["success_to_first_task_queued"]["p50_ms"],
           result["outside"]["request_to_run_seen_wall"]["p50_ms"]]
    p99 = [result["producer"]["success_to_first_task_queued"]["p99_ms"],
           result["outside"]["request_to_run_seen_wall"]["p99_ms"]]
    if result.get("fan"):
        labels.append(f"{result['fan']['dags']:,} events → all started")
        p50.append(result["fan"]["all_runs_started_s"] * 1000)
        p99.append(result["fan"]["all_runs_started_s"] * 1000)
    paired_bars(png, labels, {"p50": p50, "p99": p99}, xlabel="from data arriving", ylabel="ms",
                title="Datasets: data arriving → runs started")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=50)
    parser.add_argument("--fan", type=int, default=1000, help="0 skips the fan-in phase")
    parser.add_argument("--burst-events", type=int, default=100_000, help="0 skips the burst phase")
    parser.add_argument("--burst-rate", type=int, default=1_700)
    parser.add_argument("--burst-connections", type=int, default=16)
    parser.add_argument("--database-url", default=None, help="an empty database (default: a private server)")
    parser.add_argument("--png", type=Path, default=Path(__file__).with_name("datasets.png"))
    args = parser.parse_args(argv)
    refuse_below_one(parser, args, ["pairs", "burst_rate", "burst_connections"])
    if args.fan < 0 or args.burst_events < 0:
        parser.error("--fan and --burst-events: 0 or more")
    return args


def main() -> int:
    args = parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with database(args.database_url) as url:
        migrations.upgrade(url)
        with replica(url, port, {}) as proc, \
                httpx.Client(base_url=base, timeout=30) as client, psycopg.connect(url, autocommit=True) as db:
            wait_for(lambda: client.get("/api/v2/cluster/leader", headers=AUTH).status_code == 200, "a leader")
            result: dict[str, Any] = {"producer": phase_producer(client, db, args.pairs),
                                      "outside": phase_outside(client, db, args.pairs)}
            if args.fan:
                result["fan"] = phase_fan(client, db, url, args.fan)
            if args.burst_events:
                result["burst"] = phase_burst(client, db, base, proc.pid, args.burst_events, args.burst_rate,
                                              args.burst_connections)
    plot(result, args.png)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
