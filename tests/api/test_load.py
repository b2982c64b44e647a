"""A leader under saturating API load: 30 s of 64 keep-alive connections against its own API.

Real ``leoflow serve`` processes (a leader and a waiting follower, short 4 s lease) and a load
generator in its own process. While the leader's API is saturated:

- it keeps its lock: same leader, same term, no election event, the follower never takes over;
- its leader-only work is not stalled: a run triggered mid-load is scheduled and finishes;
- it stays within its connection budget: at most LEOFLOW_DB_POOL_SIZE connections plus the
  lock connection, sampled from ``pg_stat_activity`` every few milliseconds — and the API's
  share is fully in use, which is what shows the load really exceeded what the pool can serve;
- every request is answered 200 (no 5xx, no dropped connection).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psycopg

from leoflow.db.budget import ConnectionBudget
from tests.api.conftest import spec
from tests.election.cluster import Cluster, wait_for

POOL_SIZE = 6
LOAD_SECONDS = 30
CONNECTIONS = 64
REPO = Path(__file__).resolve().parents[2]


def _peak_connections(database_url: str, node: str, stop: threading.Event, peaks: dict[str, int]) -> None:
    """Track the most connections the node held at once, in total and per application name."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        while not stop.is_set():
            rows = conn.execute("SELECT application_name, count(*) FROM pg_stat_activity"
                                " WHERE application_name LIKE %s GROUP BY 1", (f"%:{node}",)).fetchall()
            counts = {name: int(n) for name, n in rows}
            peaks["total"] = max(peaks.get("total", 0), sum(counts.values()))
            for name, n in counts.items():
                peaks[name] = max(peaks.get(name, 0), n)
            time.sleep(0.005)


def test_a_saturated_leader_keeps_its_lock_its_budget_and_its_scheduler(database_url: str,
                                                                        tmp_path: Path) -> None:
    cluster = Cluster(database_url, tmp_path, name="load", probe=False,
                      env={"LEOFLOW_DB_POOL_SIZE": str(POOL_SIZE)})
    try:
        leader = cluster.start("leader")
        node, term = cluster.wait_leader()
        assert node == "leader"
        cluster.start("follower")
        with httpx.Client(base_url=leader.url, timeout=30) as client:
            assert client.post("/api/v2/dags", json=spec("busy"), headers={}).status_code == 201
            assert client.post("/api/v2/dags/busy/runs", json={"run_id": "warm"}).status_code == 201
            wait_for(lambda: client.get("/api/v2/dags/busy/runs/warm").json()["state"] == "success", 30,
                     "the warm-up run")
            wait_for(lambda: cluster.events(("node_joined",))[-1]["node_id"] == "follower", 30, "the follower")
            events_before = len(cluster.events())

            peaks: dict[str, int] = {}
            stop = threading.Event()
            sampler = threading.Thread(target=_peak_connections, args=(database_url, "leader", stop, peaks))
            sampler.start()
            load = subprocess.Popen(
                [sys.executable, "-m", "tests.harness.load", f"{leader.url}/api/v2/dags/busy/runs/warm",
                 "--connections", str(CONNECTIONS), "--duration", str(LOAD_SECONDS)],
                cwd=REPO, stdout=subprocess.PIPE, text=True)
            try:
                time.sleep(3)  # the load is on
                started = time.monotonic()
                assert client.post("/api/v2/dags/busy/runs", json={"run_id": "under-load"}).status_code == 201
                wait_for(lambda: client.get("/api/v2/dags/busy/runs/under-load").json()["state"] == "success",
                         LOAD_SECONDS - 5, "a run triggered under load to finish")
                mid_load = time.monotonic() - started
                output, _ = load.communicate(timeout=LOAD_SECONDS + 60)
            finally:
                if load.poll() is None:
                    load.kill()
                stop.set()
                sampler.join()
            result = json.loads(output.strip().splitlines()[-1])
            print(f"load: {result}; run under load finished in {mid_load:.1f}s; peak connections {peaks}")

            assert result["errors"] == {}, result
            assert set(result["statuses"]) == {"200"} and result["requests"] > CONNECTIONS, result
            assert cluster.db_leader() == (node, term)
            assert leader.leader_gauge() == 1
            # No lost, released or acquired lock, no scheduler restart, no member marked down.
            assert cluster.events()[events_before:] == []

        budget = ConnectionBudget.split(POOL_SIZE)
        assert peaks["total"] <= POOL_SIZE + 1, peaks
        assert peaks["leoflow-lock:leader"] == 1
        assert peaks["leoflow-api:leader"] == budget.api, peaks  # saturated: every API connection busy
        assert leader.alive() and cluster.replicas["follower"].alive()
    finally:
        cluster.stop_all()
