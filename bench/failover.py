"""Leader failover: crash and graceful handover times among 3 ``leoflow serve`` replicas.

    python bench/failover.py                       # 30 SIGKILLs + 30 SIGTERMs (60 kill/restart cycles)
    python bench/failover.py --kills 50 --terms 50  # the 100-cycle soak of issue 3
    python bench/failover.py --kills 5 --terms 5 --window 30

A private PostgreSQL (embedded, ``pg_stat_statements`` preloaded) and three replicas with the
production election timings (poll 5 s, keepalive 1 s, lease 10 s) plus a fenced probe writer
(``tests/election/probe_replica.py``) next to the real scheduler. For each iteration the leader
is killed (SIGKILL) or stopped (SIGTERM), a new leader is awaited, and the victim is restarted.

Measured (all on one host, so client and server clocks agree):

- **lock handover**: old session gone → new holder granted the lock. Crash: from the SIGKILL
  to the new leader's ``granted_at``; graceful: from the ``leader_released`` event (written just
  before ``pg_advisory_unlock``) to ``granted_at``.
- **work resumed**: same origin → the new term's ``scheduler_started`` event (first scheduler
  tick of the new leader).
- **election queries per follower per minute**: ``pg_stat_statements`` calls of the follower's
  statements (blocking ``pg_advisory_lock`` and the stale-holder check) over ``--window`` seconds
  with two followers.

Invariants checked over the whole run (a violation makes the script exit 1): terms strictly
increase, leadership intervals in ``leader_terms`` never overlap, and no fenced probe write of an
older term commits after a newer term's. Prints one JSON object as the last line; saves a PNG.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import itertools  # noqa: E402

import psycopg  # noqa: E402

from leoflow.db import migrations  # noqa: E402
from leoflow.settings import declared  # noqa: E402
from tests.election.cluster import Cluster, wait_for  # noqa: E402
from tests.harness.postgres import private_server  # noqa: E402

#: The product's defaults, from the one place they are declared (leoflow.settings.declared).
PRODUCTION_TIMINGS = {**{v.name: v.default_text for v in declared.PRODUCTION_TIMINGS}, "LEOFLOW_LOG_LEVEL": "warning"}


def percentiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def pct(p: float) -> float:  # nearest rank
        index = min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))
        return round(ordered[index] * 1000, 1)

    return {"n": len(ordered), "p50_ms": pct(50), "p90_ms": pct(90), "p99_ms": pct(99),
            "max_ms": round(ordered[-1] * 1000, 1), "mean_ms": round(statistics.fmean(ordered) * 1000, 1)}


def _event(cluster: Cluster, kind: str, term: int, timeout: float = 60) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(lambda: cluster.event(kind, term), timeout, f"{kind} of term {term}",
                                     interval=0.05)
    return found


def measure_queries(cluster: Cluster, window: float) -> float:
    """Follower election statements per follower per minute over ``window`` seconds.

    ``pg_stat_statements`` does not count statements that end in an error, and a follower's
    ``pg_advisory_lock`` normally ends in ``lock_timeout``; those waits are counted by sampling
    ``pg_stat_activity`` (each wait lasts a whole poll interval, so 100 ms sampling sees all).
    """
    waits: set[tuple[int, object]] = set()
    done = threading.Event()

    def sample() -> None:
        with psycopg.connect(cluster.database_url, autocommit=True) as conn:
            while not done.is_set():
                rows = conn.execute("SELECT pid, query_start FROM pg_stat_activity WHERE application_name LIKE"
                                    " 'leoflow-lock:%%' AND query LIKE '%%pg_advisory_lock(%%'"
                                    " AND wait_event_type = 'Lock'").fetchall()
                waits.update((int(r[0]), r[1]) for r in rows)
                time.sleep(0.1)

    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    time.sleep(window)
    done.set()
    sampler.join(5)
    with psycopg.connect(cluster.database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT query, calls FROM pg_stat_statements WHERE query LIKE %s",
                            ("%coalesce(a.state_change%",)).fetchall()
    calls = sum(int(r[1]) for r in rows) + len(waits)
    followers = len(cluster.replicas) - 1
    return round(calls / followers / (window / 60), 2)


def run_iteration(cluster: Cluster, sig: int) -> dict[str, Any]:
    leader, term = cluster.wait_leader(timeout=60)
    victim = cluster.replicas[leader]
    for r in cluster.replicas.values():  # every other replica is a blocked follower again
        cluster.wait_healthy(r)
    time.sleep(0.5)
    sent = datetime.now().astimezone()
    victim.signal(sig)
    new_leader, new_term = cluster.wait_leader(not_node=leader, min_term=term, timeout=60)
    elected = _event(cluster, "leader_elected", new_term)
    granted = datetime.fromisoformat(elected["details"]["granted_at"])
    origin = sent if sig == signal.SIGKILL else _event(cluster, "leader_released", term)["ts"]
    started = _event(cluster, "scheduler_started", new_term)["ts"]
    victim.proc.wait(60)
    cluster.start(victim.node, wait=False)
    return {"signal": "SIGKILL" if sig == signal.SIGKILL else "SIGTERM", "old": [leader, term],
            "new": [new_leader, new_term], "handover_s": (granted - origin).total_seconds(),
            "resumed_s": (started - origin).total_seconds()}


def check_invariants(cluster: Cluster) -> dict[str, Any]:
    history = cluster.terms()
    terms = [t["term"] for t in history]
    acquired = [t["acquired_at"] for t in history]
    overlaps = [(a["term"], b["term"]) for a, b in itertools.pairwise(history)
                if a["ended_at"] is None or a["ended_at"] > b["acquired_at"]]
    probe = [e["term"] for e in cluster.events(("probe_write",))]
    late = sum(1 for a, b in itertools.pairwise(probe) if b < a)
    increasing = terms == sorted(set(terms)) and acquired == sorted(acquired)
    return {"terms": len(terms), "terms_strictly_increasing": increasing,
            "overlapping_intervals": overlaps, "fenced_writes": len(probe), "late_old_term_writes": late}


def plot(result: dict[str, Any], samples: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in ((axes[0], "handover_s", "lock handover"), (axes[1], "resumed_s", "work resumed")):
        for sig, marker in (("SIGKILL", "o"), ("SIGTERM", "s")):
            ys = [s[key] * 1000 for s in samples if s["signal"] == sig]
            ax.plot(range(1, len(ys) + 1), ys, marker=marker, linestyle="-", label=sig, alpha=0.8)
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"Leoflow failover, 3 replicas — crash p99 {result['crash']['handover'].get('p99_ms')} ms, "
                 f"graceful p99 {result['graceful']['handover'].get('p99_ms')} ms")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=30, help="SIGKILL iterations (default 30)")
    parser.add_argument("--terms", type=int, default=30, help="SIGTERM iterations (default 30)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds to count follower queries")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "failover.png")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="leoflow-failover-"))
    load_before = os.getloadavg()[0]
    with private_server() as pg:
        with psycopg.connect(pg.url(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        pg.stop("fast")
        pg.start()
        pg.wait_ready()
        url = pg.create_database("leoflow")
        migrations.upgrade(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        cluster = Cluster(url, workdir, env=PRODUCTION_TIMINGS, services="real")
        samples: list[dict[str, Any]] = []
        try:
            for node in ("r1", "r2", "r3"):
                cluster.start(node, wait=False)
            for r in cluster.replicas.values():
                cluster.wait_healthy(r, timeout=120)
            cluster.wait_leader(timeout=60)
            queries = measure_queries(cluster, args.window)
            order = [signal.SIGKILL] * args.kills + [signal.SIGTERM] * args.terms
            for i, sig in enumerate(order):
                sample = run_iteration(cluster, sig)
                samples.append(sample)
                print(json.dumps({"iteration": i + 1, **sample}), file=sys.stderr, flush=True)
            for r in cluster.replicas.values():
                cluster.wait_healthy(r, timeout=120)
            invariants = check_invariants(cluster)
        finally:
            cluster.stop_all()
    crash = [s for s in samples if s["signal"] == "SIGKILL"]
    graceful = [s for s in samples if s["signal"] == "SIGTERM"]
    result: dict[str, Any] = {
        "benchmark": "failover", "replicas": 3, "timings": PRODUCTION_TIMINGS,
        "crash": {"handover": percentiles([s["handover_s"] for s in crash]),
                  "resumed": percentiles([s["resumed_s"] for s in crash])},
        "graceful": {"handover": percentiles([s["handover_s"] for s in graceful]),
                     "resumed": percentiles([s["resumed_s"] for s in graceful])},
        "election_queries_per_follower_per_minute": queries,
        "invariants": invariants,
        "targets": {"crash_handover_p99_ms": 500, "graceful_handover_p99_ms": 200},
        "host": {"cpus": os.cpu_count(), "loadavg_1m_start": round(load_before, 1),
                 "loadavg_1m_end": round(os.getloadavg()[0], 1)},
        "png": str(args.png),
    }
    plot(result, samples, args.png)
    ok = (invariants["terms_strictly_increasing"] and not invariants["overlapping_intervals"]
          and invariants["late_old_term_writes"] == 0)
    result["invariants_ok"] = ok
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
