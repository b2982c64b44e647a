"""What tracing costs the leader: a chain of ``true`` tasks with OTLP export on and off.

Against one real ``leoflow serve`` replica at a time (local executor, ``LEOFLOW_HOME`` in a temp
dir) on a private embedded PostgreSQL (or ``--database-url``): a chain of ``--steps`` (40) tasks
running ``true``, ``--repeats`` (3) runs one after the other, first with tracing off, then with
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at an OTLP/HTTP collector this script runs (the tests'
collector, decoding the real protocol), then off and on again (``--rounds``, 2: drift on a shared
host hits both alike), polling each run once a second. Reported per mode: the replica's own CPU
seconds per run (user + system from ``/proc``: independent of other load on the host, the figure
to compare), the wall time per run (trigger → ``success`` through the API, noisy under load), and
the spans the collector received per run. The host's load average is printed beside them.
Last, the CPU one span costs in this process, export included (``cpu_us_per_span``), and from it
the overhead on the replica's CPU per run (``estimated_cpu_overhead_pct``): the steadier figure.

Prints one JSON object as the last line and saves a PNG (``--png``, default bench/tracing.png).

    python bench/tracing.py                 # ~3 min on a quiet 2-core host
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.api import AUTH, database, process_cpu_seconds, replica, wait_for  # noqa: E402
from bench.plots import paired_bars  # noqa: E402
from leoflow.db import migrations  # noqa: E402
from leoflow.standalone.embedded import free_port  # noqa: E402
from tests.tracing.collector import Collector  # noqa: E402

#: Seconds between polls of a run: each poll is an API request (a span of its own with tracing on),
#: so polling fast would measure the API's spans rather than the scheduler's.
POLL = 1.0


def chain(dag_id: str, steps: int) -> dict[str, Any]:
    return {"dag_id": dag_id, "schedule": None, "max_active_runs": 1,
            "tasks": [{"id": f"t{i:03d}", "image": "busybox", "command": ["true"],
                       **({"depends_on": [f"t{i - 1:03d}"]} if i else {})} for i in range(steps)]}


def measure(url: str, mode: str, round_: int, args: argparse.Namespace, collector: Collector) -> dict[str, Any]:
    port = free_port()
    home = tempfile.mkdtemp(prefix="leoflow-bench-tracing-")
    env = {"LEOFLOW_EXECUTOR": "local", "LEOFLOW_HOME": home, "LEOFLOW_SCHEDULER_INTERVAL": "0.2"}
    if mode == "on":
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}  # the SDK's defaults: a batch every 5 s
    dag_id = f"chain-{mode}-{round_}"
    with replica(url, port, env) as proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        wait_for(lambda: http.get("/api/v2/cluster/leader", headers=AUTH).status_code == 200, "a leader")
        http.post("/api/v2/dags", json=chain(dag_id, args.steps), headers=AUTH).raise_for_status()
        spans_before = len(collector.spans)
        cpu, wall = [], []
        for i in range(args.repeats):
            cpu_before, started = process_cpu_seconds(proc.pid), time.monotonic()
            http.post(f"/api/v2/dags/{dag_id}/runs", json={"run_id": f"r{i}"}, headers=AUTH).raise_for_status()
            while http.get(f"/api/v2/dags/{dag_id}/runs/r{i}", headers=AUTH).json()["state"] != "success":
                time.sleep(POLL)
            wall.append(time.monotonic() - started)
            cpu.append(process_cpu_seconds(proc.pid) - cpu_before)
        time.sleep(6.0)  # the last batch of spans (exported every 5 s)
    return {"cpu": cpu, "wall": wall, "spans": len(collector.spans) - spans_before}


def cpu_per_span(collector: Collector, spans: int = 20_000) -> float:
    """CPU µs per span in this process, export to ``collector`` included (a try's span, as a leader emits it).

    The end-to-end figures above swing by tens of percent between runs on a shared host; this one
    is steadier: spans per run times CPU per span, over the replica's CPU per run, is the overhead.
    """
    from datetime import UTC, datetime

    from leoflow import tracing
    from leoflow.model.tries import TryKey

    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.endpoint
    os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = str(spans)  # none dropped: every span is exported and counted
    tracing.configure(os.environ, node_id="bench")
    before = time.process_time()
    for i in range(spans):
        now = datetime.now(UTC)
        tracing.try_ended(TryKey("bench", "r1", f"t{i}", 1), "success", now, now)
    tracing.shutdown()
    return (time.process_time() - before) / spans * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--database-url")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "tracing.png")
    args = parser.parse_args()
    if min(args.steps, args.repeats, args.rounds) < 1:
        parser.error("--steps, --repeats and --rounds must be at least 1")
    collector = Collector().start()
    runs: dict[str, dict[str, list[float]]] = {"off": {"cpu": [], "wall": []}, "on": {"cpu": [], "wall": []}}
    spans = 0
    load_before = os.getloadavg()
    try:
        with database(args.database_url) as url:
            migrations.upgrade(url)
            for round_ in range(args.rounds):
                for mode in ("off", "on"):
                    got = measure(url, mode, round_, args, collector)
                    runs[mode]["cpu"] += got["cpu"]
                    runs[mode]["wall"] += got["wall"]
                    spans += got["spans"] if mode == "on" else 0
                    if mode == "off" and got["spans"]:
                        raise SystemExit("bench/tracing.py: spans arrived with tracing off")
        span_us = cpu_per_span(collector)
    finally:
        collector.stop()
    summary: dict[str, dict[str, Any]] = {mode: {"cpu_s_per_run_median": round(statistics.median(r["cpu"]), 3),
                      "wall_s_per_run_median": round(statistics.median(r["wall"]), 3),
                      "cpu_s_per_run": [round(x, 3) for x in r["cpu"]]} for mode, r in runs.items()}
    result = {
        "benchmark": "tracing", "steps": args.steps, "runs_per_mode": args.repeats * args.rounds,
        **summary,
        "cpu_overhead_pct": round(100 * (summary["on"]["cpu_s_per_run_median"]
                                         / summary["off"]["cpu_s_per_run_median"] - 1), 1),
        "wall_overhead_pct": round(100 * (summary["on"]["wall_s_per_run_median"]
                                          / summary["off"]["wall_s_per_run_median"] - 1), 1),
        "spans_per_run": round(spans / (args.repeats * args.rounds), 1),
        "cpu_us_per_span": round(span_us, 1),
        "estimated_cpu_overhead_pct": round(100 * spans / (args.repeats * args.rounds) * span_us / 1e6
                                            / summary["off"]["cpu_s_per_run_median"], 2),
        "load_average_before": [round(x, 1) for x in load_before],
        "load_average_after": [round(x, 1) for x in os.getloadavg()],
    }
    paired_bars(args.png, ["replica CPU s / run", "wall s / run"],
                {"tracing off": [summary["off"]["cpu_s_per_run_median"], summary["off"]["wall_s_per_run_median"]],
                 "tracing on": [summary["on"]["cpu_s_per_run_median"], summary["on"]["wall_s_per_run_median"]]},
                xlabel=f"a {args.steps}-step chain of `true` tasks (median of {args.repeats * args.rounds} runs)",
                ylabel="seconds", title="Tracing on (OTLP) vs off")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
