"""10,000 tasks waiting at once (``wait_for``): what they cost the leader while nothing changes.

Airflow's sensors hold a worker slot each (or, deferred, a triggerer coroutine); Leoflow's waits are
rows the leader judges when what they wait on changes, and otherwise at their own moment or on a
five-minute net. This measures the issue's target — 10,000 tasks in ``wait_for`` at once, leader
CPU < 5 % of one core while nothing changes — on one real ``leoflow serve`` replica:

1. a private embedded PostgreSQL; ``--dags`` DAGs of ``--tasks`` ``kind: empty`` tasks, each waiting
   for an approval, and ``--runs`` runs of each (10 x 1,000 x 1 = 10,000 waiting tasks by default);
2. the replica leads, starts the runs and parks every task (``waiting``); the seconds that took;
3. the five-minute net spread as in steady state (each wait's next check at a random moment in the
   next five minutes, so about 33 are re-judged a second), ``--settle`` seconds, then the replica's
   CPU (user + system, ``/proc``) over ``--seconds``;
4. one approval through the API: the seconds until that task has succeeded (the leader is woken).

    python bench/waits.py                    # 10,000 waiting tasks, 60 s measured (~2 min)

Prints one JSON object as the last line and saves a PNG (``--png``, default bench/waits.png).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from bench.api import AUTH, database, replica, wait_for  # noqa: E402
from bench.many_dags import process_cpu_seconds  # noqa: E402
from leoflow.db import migrations  # noqa: E402
from leoflow.standalone.embedded import free_port  # noqa: E402

TARGET_CPU_PERCENT = 5.0


def spec(dag_id: str, tasks: int) -> dict[str, Any]:
    return {"dag_id": dag_id, "max_active_runs": 1000,
            "tasks": [{"id": f"t{i}", "kind": "empty", "wait_for": [{"approval": {"message": "go?"}}]}
                      for i in range(tasks)]}


def waiting(db: psycopg.Connection[Any]) -> int:
    return int(db.execute("SELECT count(*) FROM task_instances WHERE state = 'waiting'").fetchone()[0])  # type: ignore[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dags", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--png", type=Path, default=Path(__file__).with_name("waits.png"))
    args = parser.parse_args()
    total = args.dags * args.tasks * args.runs
    with database(None) as url:
        migrations.upgrade(url)
        port = free_port()
        with replica(url, port, {"LEOFLOW_EXECUTOR": "memory"}) as proc, \
                httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http, \
                psycopg.connect(url, autocommit=True) as db:
            wait_for(lambda: http.get("/readyz").status_code == 200, "the replica to be ready")
            wait_for(lambda: http.get("/api/v2/cluster/leader", headers=AUTH).status_code == 200, "a leader")
            began = time.monotonic()
            for d in range(args.dags):
                http.post("/api/v2/dags", json=spec(f"gates-{d}", args.tasks), headers=AUTH).raise_for_status()
                for r in range(args.runs):
                    http.post(f"/api/v2/dags/gates-{d}/runs", json={"run_id": f"r{r}"}, headers=AUTH).raise_for_status()
            wait_for(lambda: waiting(db) >= total, f"{total:,} waiting tasks", timeout=600)
            parked_s = time.monotonic() - began
            db.execute("UPDATE task_waits SET check_at = now() + random() * interval '300 seconds'")
            time.sleep(args.settle)
            load_before = os.getloadavg()
            cpu_before, started = process_cpu_seconds(proc.pid), time.monotonic()
            time.sleep(args.seconds)
            cpu = process_cpu_seconds(proc.pid) - cpu_before
            wall = time.monotonic() - started
            still = waiting(db)
            print(f"measured: {cpu:.2f} s CPU over {wall:.1f} s ({100 * cpu / wall:.2f} %), parked in {parked_s:.1f} s",
                  file=sys.stderr)
            asked = time.monotonic()
            http.post("/api/v2/dags/gates-0/runs/r0/tasks/t0/approval", json={"decision": "approve"},
                      headers=AUTH).raise_for_status()
            wait_for(lambda: db.execute("SELECT ti.state FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk "
                                        "WHERE r.dag_id = 'gates-0' AND r.run_id = 'r0' AND ti.task_id = 't0'"
                                        ).fetchone()[0] == "success", "the approved task to succeed")  # type: ignore[index]
            approved_s = time.monotonic() - asked
    percent = 100 * cpu / wall
    out = {"benchmark": "waits", "waiting_tasks": total, "parked_seconds": round(parked_s, 1),
           "still_waiting_after": still, "seconds": round(wall, 1), "leader_cpu_seconds": round(cpu, 2),
           "leader_cpu_percent": round(percent, 2), "approval_to_success_s": round(approved_s, 3),
           "cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
           "load_average_after": [round(x, 2) for x in os.getloadavg()],
           "targets": {f"{total}_waiting_leader_cpu<{TARGET_CPU_PERCENT:g}%": percent < TARGET_CPU_PERCENT}}
    plot(out, args.png)
    print(json.dumps(out))
    return 0


def plot(result: dict[str, Any], png: Path) -> None:
    """The leader's CPU while every task waits, beside the target (percent of one core)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [f"{result['waiting_tasks']:,} tasks waiting", "target"]
    ax.bar(labels, [result["leader_cpu_percent"], TARGET_CPU_PERCENT], color=["tab:blue", "tab:gray"])
    ax.set_ylabel("leader CPU, % of one core")
    load = result["load_average_before"][0]
    ax.set_title(f"Waits: leader CPU while nothing changes (load {load:g})")
    fig.tight_layout()
    fig.savefig(png)


if __name__ == "__main__":
    sys.exit(main())
