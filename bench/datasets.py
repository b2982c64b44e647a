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
3. **fan-in**: ``--fan`` (1,000) DAGs each waiting on one of as many URIs; one event each, sent
   as one request of the list form (one transaction); from its answer until every run was created
   and until every run has started (left ``queued``; target < 5 s). The scheduler's tick p99 (from
   the replica's ``leoflow_scheduler_tick_duration_seconds`` histogram, the bucket bound) is read
   over an idle window before the DAGs exist, an idle window with them waiting, and the burst.
4. **burst**: ``--burst-events`` (100,000) events of one URI three DAGs wait on, sent through the
   API in the list form, ``--burst-per-request`` (200) events a request, on a fixed schedule at
   ``--burst-rate`` (1,700/s, 100,000 in a minute; open loop, at most ``--burst-connections`` in
   flight), while a probe reads ``GET /api/v2/dags`` and
   ``GET /api/v2/datasets`` one request at a time (p50/p99 beside the same probe without the
   burst). Afterwards: the events recorded and audited, the queue rows of the URI (coalesced: one
   per consumer), the runs each consumer got, the replica's CPU per event and RSS before and after.
5. **single form**: ``--single-seconds`` (10) of one event a request from ``--single-connections``
   (64) clients as fast as the replica answers: its rate and CPU per event, beside the list form's.

Every phase carries the 1-minute load average of the host it ran on.

Prints one JSON object as the last line and saves a PNG (``--png``, default bench/datasets.png).

    python bench/datasets.py                       # everything (~3 min on a quiet 2-core host)
    python bench/datasets.py --burst-events 0      # without the burst
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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

from bench.api import AUTH, TOKEN, database, process_cpu_seconds, replica, wait_for  # noqa: E402
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
    to_event: list[float] = []
    to_run: list[float] = []
    run_to_queued: list[float] = []
    wall: list[float] = []
    for i in range(pairs):
        started = time.perf_counter()
        client.post(f"/api/v2/dags/p{i}/runs", json={}, headers=AUTH).raise_for_status()
        consumer = f"c{i}"
        poll(partial(scalar, db, "SELECT 1 FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk "
                     "WHERE r.dag_id = %s AND ti.queued_at IS NOT NULL", consumer), f"the consumer {consumer}'s task")
        wall.append(time.perf_counter() - started)
        [(seconds, recorded, made, queued)] = db.execute("""
            SELECT extract(epoch FROM c.queued_at - p.ended_at), extract(epoch FROM e.created_at - p.ended_at),
                   extract(epoch FROM cr.created_at - e.created_at), extract(epoch FROM c.queued_at - cr.created_at)
            FROM task_instances p JOIN dag_runs pr ON pr.id = p.run_pk
                 JOIN dataset_events e ON e.dag_id = pr.dag_id AND e.run_id = pr.run_id,
                 task_instances c JOIN dag_runs cr ON cr.id = c.run_pk
            WHERE pr.dag_id = %s AND cr.dag_id = %s""", (f"p{i}", f"c{i}")).fetchall()
        stamped.append(float(seconds))
        to_event.append(float(recorded))
        to_run.append(float(made))
        run_to_queued.append(float(queued))
    return {"success_to_first_task_queued": summary(stamped), "load_avg_1m": round(os.getloadavg()[0], 1),
            # Where the time goes: the try's end (the executor's stamp) to the step recording the success
            # and its event, to the step creating the consumer's run, to the step queueing its task.
            "ended_to_event_recorded": summary(to_event), "event_to_run_created": summary(to_run),
            "run_created_to_task_queued": summary(run_to_queued),
            "trigger_to_seen_queued_wall": summary(wall),
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
            "load_avg_1m": round(os.getloadavg()[0], 1),
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


def record_list(client: httpx.Client, uris: list[str]) -> float:
    """Record one event of each URI through the API's list form (one request, one transaction); the
    moment its 201 arrived (the answer follows the commit)."""
    answer = client.post("/api/v2/datasets/events", json={"events": [{"uri": uri} for uri in uris]}, headers=AUTH)
    answer.raise_for_status()
    return time.perf_counter()


def phase_fan(client: httpx.Client, db: psycopg.Connection[Any], fan: int) -> dict[str, Any]:
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
    committed = record_list(client, [f"s3://bench/f/{i:04d}" for i in range(fan)])
    count = "SELECT count(*) FROM dag_runs WHERE dag_id LIKE 'f%%' AND run_type = 'dataset'"
    poll(lambda: scalar(db, count) >= fan, "every fan-in run created", timeout=60)
    created = time.perf_counter() - committed
    poll(lambda: scalar(db, count + " AND state <> 'queued'") >= fan, "every fan-in run started", timeout=60)
    started = time.perf_counter() - committed
    time.sleep(1.0)
    burst = tick_p99(third, tick_histogram(client))
    return {"dags": fan, "load_avg_1m": round(os.getloadavg()[0], 1),
            "all_runs_created_s": round(created, 3), "all_runs_started_s": round(started, 3),
            "tick_p99_without_dataset_dags": before_dags, "tick_p99_with_dags_waiting": waiting,
            "tick_p99_over_the_burst": burst, "target_all_started<5s": started < FAN_ALL_STARTED_S,
            # Unchanged: 1,000 DAGs waiting on datasets do not raise the idle tick's p99 bucket.
            "target_idle_tick_p99_unchanged": (waiting["p99_bucket_s"] or 0) <= (before_dags["p99_bucket_s"] or 0)}


WRK_POST = """
wrk.method = "POST"
wrk.body = [[%s]]
wrk.headers["Content-Type"] = "application/json"
function delay() return %d end
done = function(summary, latency, requests)
  io.write(string.format('WRKJSON {"requests":%%d,"duration_us":%%d,"non_2xx":%%d,"p99_us":%%d}\\n',
    summary.requests, summary.duration, summary.errors.status, latency:percentile(99)))
end
"""


def event_body(per_request: int) -> str:
    """One event (``per_request`` 1: the single form) or the list form of ``per_request`` events."""
    one = {"uri": "s3://bench/hot", "extra": {"rows": 1}}
    return json.dumps(one if per_request == 1 else {"events": [one] * per_request})


def send_events(base: str, seconds: int, connections: int, per_request: int, delay_ms: int) -> dict[str, Any]:
    """``wrk`` posting events for ``seconds``; its summary and the replica's answer."""
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text(WRK_POST % (event_body(per_request), delay_ms))
    try:
        done = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
                               "-H", f"Authorization: Bearer {TOKEN}", "-s", str(script),
                               f"{base}/api/v2/datasets/events"], capture_output=True, text=True,
                              timeout=seconds + 120)
    finally:
        script.unlink()
    match = re.search(r"^WRKJSON (.*)$", done.stdout, re.M)
    if not match:
        raise SystemExit(f"bench/datasets.py: wrk failed: {done.stdout}{done.stderr}")
    return dict(json.loads(match.group(1)))


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


async def _open_loop(base: str, body: bytes, requests: int, per_second: float, in_flight: int,
                     ) -> tuple[list[float], int, float]:
    """Send ``requests`` posts of ``body`` at ``per_second`` on a fixed schedule (open loop: a slow
    answer does not slow the sending, up to ``in_flight`` outstanding); latencies, non-201s, seconds."""
    headers = {**AUTH, "Content-Type": "application/json"}
    latencies: list[float] = []
    failed = 0
    gate = asyncio.Semaphore(in_flight)
    async with httpx.AsyncClient(base_url=base, timeout=60,
                                 limits=httpx.Limits(max_connections=in_flight)) as client:
        async def one() -> None:
            nonlocal failed
            async with gate:
                started = time.perf_counter()
                answer = await client.post("/api/v2/datasets/events", content=body, headers=headers)
                latencies.append(time.perf_counter() - started)
                failed += answer.status_code != 201

        begun = time.perf_counter()
        tasks = []
        for i in range(requests):
            await asyncio.sleep(max(0.0, begun + i / per_second - time.perf_counter()))
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        return latencies, failed, time.perf_counter() - begun


def phase_single(base: str, pid: int, seconds: int, connections: int) -> dict[str, Any]:
    """The single form (one event a request) as fast as ``connections`` clients send it: the
    replica's rate and CPU per event, beside the list form's."""
    cpu = process_cpu_seconds(pid)
    sent = send_events(base, seconds, connections, 1, 0)
    cpu = process_cpu_seconds(pid) - cpu
    wall = sent["duration_us"] / 1e6
    return {"connections": connections, "events_per_s": round(sent["requests"] / wall, 1),
            "post_p99_ms": round(sent["p99_us"] / 1000, 1), "non_2xx": sent["non_2xx"],
            "replica_cpu_ms_per_event": round(1000 * cpu / max(1, sent["requests"]), 3),
            "load_avg_1m": round(os.getloadavg()[0], 1)}


def phase_burst(client: httpx.Client, db: psycopg.Connection[Any], base: str, pid: int, args: argparse.Namespace,
                ) -> dict[str, Any]:
    consumers = ("hot-a", "hot-b", "hot-c")
    for dag_id in consumers:
        apply(client, waiting_on(dag_id, "s3://bench/hot"))
    for dag_id in consumers:  # paused: the whole burst stays queued, so the coalescing is what is seen
        client.patch(f"/api/v2/dags/{dag_id}", json={"paused": True}, headers=AUTH).raise_for_status()
    rss_before = rss_kb(pid)[0]
    quiet, _ = probed(base, 10.0)
    per = args.burst_per_request
    requests = max(1, args.burst_events // per)
    body = event_body(per).encode()
    cpu = process_cpu_seconds(pid)
    loaded, (latencies, failed, wall) = probed(base, 0, lambda: asyncio.run(
        _open_loop(base, body, requests, args.burst_rate / per, args.burst_connections)))
    cpu = process_cpu_seconds(pid) - cpu
    load = os.getloadavg()[0]
    rss_after = rss_kb(pid)[0]
    recorded = scalar(db, "SELECT count(*) FROM dataset_events WHERE uri = 's3://bench/hot'")
    audited = scalar(db, "SELECT count(*) FROM audit_events WHERE path = '/api/v2/datasets/events' AND status = 201 "
                         "AND details->>'uri' = 's3://bench/hot'")
    queue = db.execute("SELECT dag_id, events FROM dataset_queue WHERE uri = 's3://bench/hot' "
                       "ORDER BY dag_id").fetchall()
    for dag_id in consumers:
        client.patch(f"/api/v2/dags/{dag_id}", json={"paused": False}, headers=AUTH).raise_for_status()
    runs_sql = "SELECT count(*) FROM dag_runs WHERE dag_id = %s"
    for dag_id in consumers:
        poll(partial(scalar, db, runs_sql, dag_id), f"the run of {dag_id}")
    time.sleep(2.0)
    runs = {dag_id: scalar(db, runs_sql, dag_id) for dag_id in consumers}
    events = requests * per
    probe_p99 = max(s["p99_ms"] for s in loaded.values())

    def reads(probed: dict[str, Any]) -> dict[str, Any]:
        return {path.split("?")[0].rsplit("/", 1)[1]: f"{s['p50_ms']} / {s['p99_ms']}" for path, s in probed.items()}

    post = summary(latencies)
    return {"events_per_request": per, "requests": requests, "events_sent": events,
            "events_recorded": recorded, "events_audited": audited, "non_201": failed,
            "seconds": round(wall, 1), "events_per_s": round(events / wall, 1),
            "post_p50_ms": post.get("p50_ms"), "post_p99_ms": post.get("p99_ms"),
            "replica_cpu_ms_per_event": round(1000 * cpu / max(1, events), 3),
            "load_avg_1m": round(load, 1), "queue_rows": {d: n for d, n in queue},
            "runs_per_consumer": runs, "replica_rss_mb_before": round(rss_before / 1024, 1),
            "replica_rss_mb_after": round(rss_after / 1024, 1),
            "target_coalesced": len(queue) == len(consumers) and all(n == 1 for n in runs.values()),
            "target_every_event_recorded_and_audited": recorded == audited == events and not failed,
            "target_100000_in_a_minute": events >= 100_000 and wall <= 60.0 + 1.0 and recorded == events,
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
    parser.add_argument("--burst-connections", type=int, default=16, help="requests in flight at most")
    parser.add_argument("--burst-per-request", type=int, default=200,
                        help="events per request: 1 is the single form, more the list form (at most 1,000)")
    parser.add_argument("--single-seconds", type=int, default=10,
                        help="seconds of the single form at full speed beside the burst (0 skips it)")
    parser.add_argument("--single-connections", type=int, default=64)
    parser.add_argument("--database-url", default=None, help="an empty database (default: a private server)")
    parser.add_argument("--png", type=Path, default=Path(__file__).with_name("datasets.png"))
    args = parser.parse_args(argv)
    refuse_below_one(parser, args, ["pairs", "burst_rate", "burst_connections", "burst_per_request",
                                    "single_connections"])
    if args.burst_per_request > 1_000 or args.single_seconds < 0:
        parser.error("--burst-per-request: at most 1,000 (the list form's limit); --single-seconds: 0 or more")
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
                result["fan"] = phase_fan(client, db, args.fan)
            if args.burst_events:
                result["burst"] = phase_burst(client, db, base, proc.pid, args)
            if args.single_seconds:
                result["single_form"] = phase_single(base, proc.pid, args.single_seconds, args.single_connections)
    plot(result, args.png)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
