"""The DAG list at 100,000 DAGs and ``/metrics`` at 10,000 DAGs' series.

``GET /api/v2/dags`` must stay fast however many DAGs are stored (target: p99 < 20 ms for
``limit=100`` at 100,000 DAGs), with every filter: ``paused``, ``prefix`` (dense and sparse) and
``state`` (the last run's). This:

1. starts a private embedded PostgreSQL (or uses ``--database-url``, an empty database) and
   inserts ``--dags`` DAGs with SQL (one version each; ids ``dag-000000``…; every 100th paused),
   and runs for 80 % of them (the last run success 85 %, failed 10 %, running 3 %, queued 2 %),
   plus the per-DAG metric tables (``dag_run_stats``, ``task_failure_counts``) for the first
   ``--metrics-dags`` DAGs, as the outcome observer would have filled them;
2. starts the API alone (uvicorn; no elector, hence no scheduler: what a follower serves) and,
   per scenario, sends ``--requests`` sequential requests over one keep-alive connection after
   20 warm-up requests, reporting client-side p50/p99 and the items the page held;
3. scrapes ``/metrics`` ``--requests`` / 10 times with the default ``LEOFLOW_METRICS_MAX_DAGS``
   and ``--requests`` / 60 times on an API allowing every DAG its own series (seconds a scrape),
   counting the series that carry a ``dag_id`` label; the list is also read through the store
   alone, in this process, to tell the database's share from HTTP's. The host's load average
   is part of the result: on a shared host the figures move with it.

    python bench/dag_list.py                      # 100,000 DAGs (~2 min)

Prints one JSON object as the last line and saves a PNG (``--png``, default bench/dag_list.png).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from bench.api import AUTH, TOKEN, database, wait_for  # noqa: E402
from bench.scheduler import percentile  # noqa: E402
from leoflow.api.url_params import encode_cursor  # noqa: E402
from leoflow.db import migrations  # noqa: E402
from leoflow.model.dag_metrics import DURATION_BUCKETS  # noqa: E402
from leoflow.standalone.embedded import free_port  # noqa: E402

TARGET_P99_MS = 20.0
WARMUP = 20
SPEC = {"dag_id": "x", "schedule": None, "tasks": [{"id": "t", "kind": "empty"}]}


def scenarios(count: int) -> dict[str, dict[str, str]]:
    """Query parameters of each measured request (``limit=100`` is added)."""
    deep = f"dag-{count * 9 // 10:06d}"
    return {
        "first page": {},
        "deep page (90%)": {"cursor": encode_cursor("dags", deep)},
        "paused=true (1%)": {"paused": "true"},
        "paused=false": {"paused": "false"},
        "prefix, 10% match": {"prefix": "dag-01"},
        "prefix, 10 match": {"prefix": f"dag-{count // 2 // 10:05d}"},
        "prefix, none match": {"prefix": "nothing"},
        "state=success": {"state": "success"},
        "state=failed": {"state": "failed"},
        "state=running": {"state": "running"},
        "state=none (20%)": {"state": "none"},
        "paused+prefix+state": {"paused": "false", "prefix": "dag-01", "state": "failed"},
    }


def seed(url: str, count: int, metrics_dags: int) -> float:
    """Insert the DAGs, their versions, runs and metric rows; returns the seconds it took."""
    started = time.perf_counter()
    bins = "{" + ",".join("1" for _ in range(len(DURATION_BUCKETS) + 1)) + "}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("INSERT INTO dags (dag_id, paused) SELECT 'dag-' || lpad(i::text, 6, '0'), i %% 100 = 0 "
                   "FROM generate_series(0, %s - 1) AS i", (count,))
        db.execute("INSERT INTO dag_versions (dag_id, version, spec, spec_hash) SELECT dag_id, 1, %s, 'h' FROM dags",
                   (json.dumps(SPEC),))
        db.execute("UPDATE dags d SET current_version_id = v.id FROM dag_versions v WHERE v.dag_id = d.dag_id")
        # An older run for half of them, then the last run: hash buckets give the state shares.
        db.execute("""
            INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state)
            SELECT dag_id, 'old', current_version_id, 'manual', 'failed' FROM dags WHERE hashtext(dag_id) % 2 = 0""")
        db.execute("""
            INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state)
            SELECT dag_id, 'last', current_version_id, 'manual',
                   CASE WHEN b < 85 THEN 'success' WHEN b < 95 THEN 'failed' WHEN b < 98 THEN 'running'
                        ELSE 'queued' END
            FROM (SELECT dag_id, current_version_id, abs(hashtext(dag_id || 's')) % 100 AS b FROM dags
                  WHERE abs(hashtext(dag_id || 'r')) % 100 < 80) d""")
        db.execute("""
            INSERT INTO dag_run_stats (dag_id, state, runs, duration_sum, bins, last_ended_at)
            SELECT dag_id, s, 15, 150.0, %s::bigint[], now()
            FROM dags, unnest(ARRAY['success', 'failed', 'cancelled']) s
            WHERE dag_id < 'dag-' || lpad(%s::text, 6, '0')""", (bins, metrics_dags))
        db.execute("INSERT INTO task_failure_counts (dag_id, task_id, failures) SELECT dag_id, 't', 3 FROM dags "
                   "WHERE dag_id < 'dag-' || lpad(%s::text, 6, '0')", (metrics_dags,))
        db.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def measure(http: httpx.Client, path: str, params: dict[str, str], requests: int, *,
            warmup: int = WARMUP) -> dict[str, Any]:
    seconds: list[float] = []
    items = 0
    for i in range(warmup + requests):
        started = time.perf_counter()
        answer = http.get(path, params=params, headers=AUTH)
        elapsed = time.perf_counter() - started
        answer.raise_for_status()
        if i >= warmup:
            seconds.append(elapsed)
        if path.startswith("/api/v2/dags") and path.count("/") == 3:
            items = len(answer.json()["items"])
    seconds.sort()
    out = {"p50_ms": round(1000 * (percentile(seconds, 0.5) or 0), 2),
           "p99_ms": round(1000 * (percentile(seconds, 0.99) or 0), 2), "max_ms": round(1000 * seconds[-1], 2)}
    if path.startswith("/api/v2/dags") and path.count("/") == 3:
        out["items"] = items
    return out


def store_times(url: str, count: int, requests: int) -> dict[str, dict[str, float]]:
    """The same pages read by ``dag_store.list_dags`` in this process: the database's share."""
    import asyncio

    from leoflow.db.stores import dags as dag_store

    async def measure_all() -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        # A plain autocommit connection, as the API pool's raw ones the route reads through.
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for name, params in scenarios(count).items():
                where = dag_store.DagListFilter(
                    paused=None if "paused" not in params else params["paused"] == "true",
                    prefix=params.get("prefix"), last_run_state=params.get("state"))
                after = f"dag-{count * 9 // 10:06d}" if "cursor" in params else None
                seconds = []
                for i in range(WARMUP + requests):
                    started = time.perf_counter()
                    await dag_store.list_dags(conn, after=after, limit=100, where=where)
                    if i >= WARMUP:
                        seconds.append(time.perf_counter() - started)
                seconds.sort()
                out[name] = {"p50_ms": round(1000 * (percentile(seconds, 0.5) or 0), 2),
                             "p99_ms": round(1000 * (percentile(seconds, 0.99) or 0), 2)}
        return out

    return asyncio.run(measure_all())


def metrics_series(http: httpx.Client) -> dict[str, Any]:
    """Series (sample lines) of the scrape carrying a ``dag_id`` label, by family, and the distinct ids."""
    text = http.get("/metrics", headers=AUTH).text
    by_family: dict[str, int] = {}
    ids: set[str] = set()
    for line in text.splitlines():
        if line.startswith("#") or 'dag_id="' not in line:
            continue
        name = line.split("{", 1)[0]
        by_family[name] = by_family.get(name, 0) + 1
        ids.add(line.split('dag_id="', 1)[1].split('"', 1)[0])
    return {"series_with_dag_id": sum(by_family.values()), "by_sample_name": by_family, "dag_ids": len(ids),
            "scrape_bytes": len(text)}


#: The API without an elector, scheduler or executor: what a follower replica serves. The leader
#: would otherwise spend the host's two cores on the seeded runs (which have no tasks).
_API_ONLY = """
import uvicorn
from leoflow.api.app import create_app
from leoflow.settings import load_settings
uvicorn.run(create_app(load_settings()), host="127.0.0.1", port={port}, log_level="warning", access_log=False)
"""


@contextmanager
def api_process(url: str, port: int, extra_env: dict[str, str]) -> Iterator[None]:
    env = {**os.environ, "LEOFLOW_DATABASE_URL": url, "LEOFLOW_API_TOKENS": f"bench:admin:{TOKEN}",
           "LEOFLOW_NODE_ID": "bench-dag-list", "LEOFLOW_LOG_LEVEL": "warning", **extra_env}
    proc = subprocess.Popen([sys.executable, "-c", _API_ONLY.format(port=port)], env=env)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"benchmark": "dag_list", "dags": args.dags, "metrics_dags": args.metrics_dags,
                              "requests": args.requests, "cpus": os.cpu_count()}
    with database(args.database_url) as url:
        migrations.upgrade(url)
        result["seed_seconds"] = round(seed(url, args.dags, args.metrics_dags), 1)
        for max_dags, key in ((None, "metrics_default"), (args.metrics_dags, "metrics_every_dag")):
            port = free_port()
            extra = {} if max_dags is None else {"LEOFLOW_METRICS_MAX_DAGS": str(max_dags),
                                                 "LEOFLOW_METRICS_MAX_TASKS": str(max_dags)}
            with api_process(url, port, extra), httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                wait_for(lambda h=http: h.get("/readyz").status_code == 200, "the replica to be ready")
                if max_dags is None:
                    result["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
                    result["baseline"] = {"GET /healthz": measure(http, "/healthz", {}, args.requests),
                                          "GET /api/v2/dags/dag-000001": measure(
                                              http, "/api/v2/dags/dag-000001", {}, args.requests)}
                    result["list"] = {name: measure(http, "/api/v2/dags", {"limit": "100", **params}, args.requests)
                                      for name, params in scenarios(args.dags).items()}
                    result["list_store_only"] = store_times(url, args.dags, args.requests)
                scrapes = max(5, args.requests // (10 if max_dags is None else 60))
                result[key] = {"max_dags": max_dags or "default (200)",
                               **measure(http, "/metrics", {}, scrapes, warmup=2), **metrics_series(http)}
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    worst = max(v["p99_ms"] for v in result["list"].values())
    result["targets"] = {f"{args.dags}_dags_list_p99<{TARGET_P99_MS:g}ms": worst < TARGET_P99_MS}
    return result


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["list"])
    fig, ax = plt.subplots(figsize=(9, 4.8))
    ys = range(len(names))
    ax.barh([y + 0.2 for y in ys], [result["list"][n]["p50_ms"] for n in names], height=0.4, label="p50")
    ax.barh([y - 0.2 for y in ys], [result["list"][n]["p99_ms"] for n in names], height=0.4, label="p99")
    ax.set_yticks(list(ys), [f"{n} ({result['list'][n]['items']} items)" for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(TARGET_P99_MS, color="grey", linestyle=":", label=f"target p99 {TARGET_P99_MS:g} ms")
    ax.set(xlabel="ms per request (client side, one keep-alive connection)",
           title=f"GET /api/v2/dags?limit=100 at {result['dags']:,} DAGs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dags", type=int, default=100_000, help="DAGs stored (default 100,000)")
    parser.add_argument("--metrics-dags", type=int, default=10_000,
                        help="DAGs with per-DAG metric rows (default 10,000)")
    parser.add_argument("--requests", type=int, default=300, help="measured requests per scenario (default 300)")
    parser.add_argument("--database-url", help="use this (empty) database instead of a private embedded one")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "dag_list.png")
    args = parser.parse_args(argv)
    if not 1_000 <= args.dags <= 1_000_000:
        parser.error("--dags must be 1,000..1,000,000")
    if not 1 <= args.metrics_dags <= args.dags:
        parser.error("--metrics-dags must be 1..--dags")
    if args.requests < 10:
        parser.error("--requests must be at least 10")
    return args


def main() -> int:
    args = parse_args()
    result = run(args)
    plot(result, args.png)
    result["png"] = str(args.png)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
