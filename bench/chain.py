"""Chain and completion latency (issue 21): how fast a step follows its upstream, and a run its last task.

Against one real ``leoflow serve`` replica (local executor, ``LEOFLOW_HOME`` in a temp dir) on
a private embedded PostgreSQL (or ``--database-url``), measured as a user would, through the
HTTP API (polling the run every 10 ms):

1. **empty chain**: a chain of ``--empty-steps`` (100) ``kind: empty`` tasks, trigger → run
   ``success``; ``--repeats`` (10) runs one after the other; p50 (target < 0.2 s). Also the
   database's own view (``dag_runs.ended_at - created_at``): a scheduler step stamps what it
   writes with its start time, so a chain resolved in one step shows how soon that step began,
   not how long it ran (the API's figure includes both).
2. **true chain**: a chain of ``--true-steps`` (40) tasks running ``true`` with the local
   executor; p50 over ``--true-repeats`` (5) runs (target < 1.0 s) and the time per step. Beside it
   the same chain whose argv holds ``{{ run.id }}`` and ``{{ run.logical_date }}`` (rendered by the
   leader at each launch): its p50 and its overhead over the plain chain (target < 10 %).
3. **completion**: last task ends → run terminal, from the database's timestamps
   (``dag_runs.ended_at - max(task_instances.ended_at)``) over DAG shapes that end every way:
   a success chain, a failing leaf, the issue's ``fetch → [ok (sleeps 0.8 s), fails] → report``
   (the last task to end is not a leaf: its downstream is already ``upstream_failed``), an empty
   leaf, a retry that fails again, and a cancelled run (cancel while its task runs; measured
   from the cancel request). ``--shape-repeats`` (5) each; p99 (target < 50 ms).
4. **under load**: ``bench/scheduler.py`` with ``--load-args`` (default: the 1,000 x 100 load at
   parallelism 2,048, batch 2,000, as in its full run) — upstream success → downstream handed
   to the executor, p99 (target < 0.1 s) and tasks/s (not lower than before), ``--load-repeats``
   (3) times: the figures are the median run's (by p99), with every run's p99 and tasks/s beside
   them. One run's p99 is where its slowest one or two of about 62 bursts committed (1,568 tasks
   queued at once): on the shared 2-core host of 2026-11-28, 32 runs of the same code ranged
   from 0.085 to 0.131 s (median 0.109 s; one stalled run 0.266 s). The other rows are medians
   over repeats for the same reason. ``--no-load`` skips it.

Prints one JSON object as the last line and saves a PNG (``--png``, default bench/chain.png).

    python bench/chain.py                   # everything (~3 min on a quiet 2-core host)
    python bench/chain.py --no-load         # the chains and completion only (~1 min)
    python bench/chain.py --no-load --archive   # the same with every try's output archived (file://)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402
import psycopg  # noqa: E402

from bench.api import AUTH, database, replica, wait_for  # noqa: E402
from leoflow.db import migrations  # noqa: E402
from leoflow.standalone.embedded import free_port  # noqa: E402

POLL = 0.01  # the issue measured with a 10 ms poll
TARGETS = {"empty_chain_p50_s": 0.2, "true_chain_p50_s": 1.0, "completion_p99_ms": 50.0,
           "load_latency_p99_s": 0.1}
DEFAULT_LOAD_ARGS = "--runs 1000 --tasks 100 --parallelism 2048 --batch-size 2000 --waiting 0"


def task(task_id: str, deps: list[str], *, command: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": task_id, "depends_on": deps, **extra}
    if command is None:
        body["kind"] = "empty"
    else:
        body.update(image="local", command=command)
    return body


def chain(dag_id: str, steps: int, command: list[str] | None) -> dict[str, Any]:
    return {"dag_id": dag_id, "max_active_runs": 1,
            "tasks": [task(f"s{i:03d}", [f"s{i - 1:03d}"] if i else [], command=command) for i in range(steps)]}


SH = ["sh", "-c"]
SHAPES: dict[str, dict[str, Any]] = {
    "success-chain": {"tasks": [task("a", [], command=["true"]), task("b", ["a"], command=["true"])]},
    "failing-leaf": {"tasks": [task("a", [], command=["true"]), task("b", ["a"], command=["false"])]},
    "sibling-outlives-failure": {"tasks": [
        task("fetch", [], command=["true"]), task("ok", ["fetch"], command=[*SH, "sleep 0.8"]),
        task("fails", ["fetch"], command=[*SH, "exit 1"]), task("report", ["ok", "fails"], command=["true"])]},
    "empty-leaf": {"tasks": [task("a", [], command=["true"]), task("done", ["a"])]},
    "retry-then-fail": {"tasks": [task("a", [], command=["false"], retries=1, retry_delay_seconds=0)]},
    "cancelled": {"tasks": [task("a", [], command=[*SH, "sleep 30"]), task("b", ["a"], command=["true"])]},
}


class Client:
    """The API as a user drives it, plus the database for its timestamps."""

    def __init__(self, http: httpx.Client, database_url: str) -> None:
        self.http = http
        self.db = psycopg.connect(database_url, autocommit=True)

    def apply(self, spec: dict[str, Any]) -> None:
        self.http.post("/api/v2/dags", json=spec, headers=AUTH).raise_for_status()

    def trigger(self, dag_id: str) -> str:
        answer = self.http.post(f"/api/v2/dags/{dag_id}/runs", json={}, headers=AUTH)
        answer.raise_for_status()
        return str(answer.json()["run_id"])

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        answer = self.http.get(f"/api/v2/dags/{dag_id}/runs/{run_id}", headers=AUTH)
        answer.raise_for_status()
        return dict(answer.json())

    def wait_terminal(self, dag_id: str, run_id: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run(dag_id, run_id)["state"]
            if state in ("success", "failed", "cancelled"):
                return str(state)
            time.sleep(POLL)
        raise SystemExit(f"bench/chain.py: run {dag_id}/{run_id} not terminal after {timeout}s")

    def wait_until(self, what: str, probe: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not probe():
            if time.monotonic() > deadline:
                raise SystemExit(f"bench/chain.py: timed out waiting for {what}")
            time.sleep(POLL)

    def db_seconds(self, dag_id: str, run_id: str) -> float:
        row = self.db.execute("SELECT extract(epoch FROM ended_at - created_at) FROM dag_runs "
                              "WHERE dag_id = %s AND run_id = %s", (dag_id, run_id)).fetchone()
        return float(row[0]) if row and row[0] is not None else float("nan")

    def completion_gap_ms(self, dag_id: str, run_id: str) -> float:
        """Run ended_at minus the last task instance's ended_at (the completion delay)."""
        row = self.db.execute("""
            SELECT extract(epoch FROM r.ended_at - max(ti.ended_at)) * 1000
            FROM dag_runs r JOIN task_instances ti ON ti.run_pk = r.id
            WHERE r.dag_id = %s AND r.run_id = %s GROUP BY r.ended_at
        """, (dag_id, run_id)).fetchone()
        return float(row[0]) if row and row[0] is not None else float("nan")


def step_breakdown_ms(client: Client, dag_id: str, runs: int) -> dict[str, float]:
    """Where a chain step's time goes, median over the steps of the last ``runs`` runs, from the
    database's timestamps: the upstream try's end → the scheduler step that queued the next one
    (report, wake-up, the step's start: its ``queued_at``), queued → the process started (the
    step's work and commit, the hand-over, the executor's claim and spawn), and the process itself."""
    rows = client.db.execute("""
        SELECT extract(epoch FROM tt.queued_at - lag(tt.ended_at) OVER w) * 1000,
               extract(epoch FROM tt.started_at - tt.queued_at) * 1000,
               extract(epoch FROM tt.ended_at - tt.started_at) * 1000
        FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id
        JOIN (SELECT id FROM dag_runs WHERE dag_id = %s ORDER BY id DESC LIMIT %s) r ON r.id = ti.run_pk
        WINDOW w AS (PARTITION BY ti.run_pk ORDER BY ti.task_id)
    """, (dag_id, runs)).fetchall()
    parts = ("upstream_end_to_queued", "queued_to_process_start", "process")
    return {name: round(statistics.median(float(r[i]) for r in rows if r[i] is not None), 1)
            for i, name in enumerate(parts)}


def timed_chain(client: Client, dag_id: str, repeats: int) -> dict[str, Any]:
    walls: list[float] = []
    dbs: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        run_id = client.trigger(dag_id)
        state = client.wait_terminal(dag_id, run_id)
        walls.append(time.perf_counter() - started)
        if state != "success":
            raise SystemExit(f"bench/chain.py: {dag_id} ended {state}")
        dbs.append(client.db_seconds(dag_id, run_id))
    return {"repeats": repeats, "p50_s": round(statistics.median(walls), 3), "min_s": round(min(walls), 3),
            "max_s": round(max(walls), 3), "db_p50_s": round(statistics.median(dbs), 3), "_walls": walls}


def completion(client: Client, repeats: int) -> dict[str, Any]:
    gaps: dict[str, list[float]] = {}
    for shape, body in SHAPES.items():
        dag_id = f"shape-{shape}"
        client.apply({"dag_id": dag_id, "max_active_runs": 1, **body})
        for _ in range(repeats):
            run_id = client.trigger(dag_id)
            if shape == "cancelled":
                def running(d: str = dag_id, r: str = run_id) -> bool:
                    return any(t["state"] == "running" for t in client.run(d, r)["tasks"])

                client.wait_until("the task to run", running)
                started = time.perf_counter()
                client.http.post(f"/api/v2/dags/{dag_id}/runs/{run_id}/cancel", headers=AUTH).raise_for_status()
                client.wait_terminal(dag_id, run_id)
                gaps.setdefault(shape, []).append((time.perf_counter() - started) * 1000)
                continue
            client.wait_terminal(dag_id, run_id)
            gaps.setdefault(shape, []).append(client.completion_gap_ms(dag_id, run_id))
    every = sorted(g for values in gaps.values() for g in values)
    return {"shape_repeats": repeats, "samples": len(every),
            "p50_ms": round(every[len(every) // 2], 1), "p99_ms": round(every[min(len(every) - 1,
                                                                                   int(len(every) * 0.99))], 1),
            "max_ms": round(every[-1], 1),
            "by_shape_max_ms": {shape: round(max(values), 1) for shape, values in gaps.items()},
            "_gaps": gaps}


def under_load(load_args: str, repeats: int) -> dict[str, Any]:
    """The load ``repeats`` times: the median run's figures (by p99; the upper one of an even
    count), and every run's p99 and tasks/s."""
    runs = [load_run(load_args) for _ in range(repeats)]
    return median_run(load_args, runs)


def load_run(load_args: str) -> dict[str, Any]:
    png = Path(tempfile.gettempdir()) / "leoflow-bench-chain-load.png"
    cmd = [sys.executable, str(ROOT / "bench" / "scheduler.py"), *shlex.split(load_args), "--png", str(png)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"bench/chain.py: bench/scheduler.py failed: {done.stderr[-2000:]}")
    tp = json.loads(done.stdout.strip().splitlines()[-1])["throughput"]
    return {"latency_p50_s": tp["latency_p50_seconds"], "latency_p99_s": tp["latency_p99_seconds"],
            "join_latency_p50_s": tp["join_latency_p50_seconds"], "join_latency_p99_s": tp["join_latency_p99_seconds"],
            "tasks_per_second": tp["tasks_per_second"], "wall_seconds": tp["wall_seconds"]}


def median_run(load_args: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    by_p99 = sorted(runs, key=lambda run: run["latency_p99_s"])
    return {"args": load_args, "repeats": len(runs), **by_p99[len(by_p99) // 2],
            "each_latency_p99_s": [run["latency_p99_s"] for run in runs],
            "each_tasks_per_second": [run["tasks_per_second"] for run in runs]}


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, key, title, target in ((axes[0], "empty_chain", "empty chain", TARGETS["empty_chain_p50_s"]),
                                   (axes[1], "true_chain", "`true` chain (local executor)",
                                    TARGETS["true_chain_p50_s"])):
        walls = result[key].pop("_walls")
        ax.bar(range(1, len(walls) + 1), walls)
        ax.axhline(target, color="red", linestyle="--", label=f"p50 target {target} s")
        ax.set(title=f"{result[key]['steps']}-step {title}: trigger → success\np50 {result[key]['p50_s']} s",
               xlabel="run", ylabel="s")
        ax.legend()
    gaps = result["completion"].pop("_gaps")
    names = list(gaps)
    axes[2].boxplot([gaps[n] for n in names], orientation="horizontal")
    axes[2].set_yticks(range(1, len(names) + 1), names)
    axes[2].axvline(TARGETS["completion_p99_ms"], color="red", linestyle="--", label="p99 target 50 ms")
    axes[2].set(title=f"Last task ends → run terminal (cancel: request → terminal)\n"
                f"p99 {result['completion']['p99_ms']} ms", xlabel="ms")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--empty-steps", type=int, default=100)
    parser.add_argument("--true-steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=10, help="runs of the empty chain (default 10)")
    parser.add_argument("--true-repeats", type=int, default=5, help="runs of the `true` chain (default 5)")
    parser.add_argument("--shape-repeats", type=int, default=5, help="runs per completion shape (default 5)")
    parser.add_argument("--load-args", default=DEFAULT_LOAD_ARGS, help="arguments of bench/scheduler.py")
    parser.add_argument("--load-repeats", type=int, default=3, help="runs of the load (default 3)")
    parser.add_argument("--no-load", action="store_true", help="skip the run under bench/scheduler.py's load")
    parser.add_argument("--database-url", help="use this database instead of a private embedded one")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "chain.png")
    parser.add_argument("--archive", action="store_true",
                        help="archive every try's output (LEOFLOW_LOG_ARCHIVE_URL=file:// under the replica's "
                        "home): run with and without it to measure the log archive's overhead on the chains")
    args = parser.parse_args(argv)
    refuse_below_one(parser, args, ("empty_steps", "true_steps", "repeats", "true_repeats", "shape_repeats",
                                    "load_repeats"))
    return args


def refuse_below_one(parser: argparse.ArgumentParser, args: argparse.Namespace, names: Sequence[str]) -> None:
    """Exit (code 2, naming the flag) if a count among ``names`` is below 1: a run of none measures nothing."""
    for name in names:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")


def main() -> int:
    args = parse_args()

    home = Path(tempfile.mkdtemp(prefix="leoflow-bench-chain-"))
    result: dict[str, Any] = {"benchmark": "chain"}
    with database(args.database_url) as url:
        migrations.upgrade(url)
        port = free_port()
        env = {"LEOFLOW_EXECUTOR": "local", "LEOFLOW_HOME": str(home), "LEOFLOW_LOCAL_PARALLELISM": "8",
               "LEOFLOW_LOG_ARCHIVE_URL": (home / "archive").as_uri() if args.archive else "off"}
        result["archive"] = env["LEOFLOW_LOG_ARCHIVE_URL"]
        result["load_before"] = round(os.getloadavg()[0], 1)
        with replica(url, port, env) as served, \
                httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            wait_for(lambda: http.get("/readyz").status_code == 200, "the replica to be ready")
            client = Client(http, url)
            client.apply(chain("empty-chain", args.empty_steps, None))
            client.apply(chain("true-chain", args.true_steps, ["true"]))
            timed_chain(client, "empty-chain", 1)  # warm-up: first-run caches, page faults
            result["empty_chain"] = {"steps": args.empty_steps, **timed_chain(client, "empty-chain", args.repeats)}
            timed_chain(client, "true-chain", 1)
            true_chain = timed_chain(client, "true-chain", args.true_repeats)
            true_chain["per_step_ms"] = round(1000 * true_chain["p50_s"] / args.true_steps, 1)
            true_chain["step_breakdown_ms"] = step_breakdown_ms(client, "true-chain", args.true_repeats)
            result["true_chain"] = {"steps": args.true_steps, **true_chain}
            # The same chain with templates in every step's argv: each launch is rendered by the leader
            # (one read per step of what the references need); measured beside the plain chain.
            templated_argv = ["true", "{{ run.id }}", "at={{ run.logical_date }}"]
            client.apply(chain("templated-chain", args.true_steps, templated_argv))
            timed_chain(client, "templated-chain", 1)
            templated = timed_chain(client, "templated-chain", args.true_repeats)
            templated["overhead_pct"] = round(100 * (templated["p50_s"] / true_chain["p50_s"] - 1), 1)
            templated.pop("_walls")
            result["templated_chain"] = {"steps": args.true_steps, **templated}
            result["completion"] = completion(client, args.shape_repeats)
            # The replica's CPU over the same work, archive on or off: unlike the wall clock, it does
            # not grow with the host's load (the archive's cost is in the replica's process).
            used = psutil.Process(served.pid).cpu_times()
            result["replica_cpu_s"] = round(used.user + used.system, 2)
            client.db.close()
    if not args.no_load:
        result["under_load"] = under_load(args.load_args, args.load_repeats)
    result["targets"] = {
        "empty_chain_p50<0.2s": result["empty_chain"]["p50_s"] < TARGETS["empty_chain_p50_s"],
        "true_chain_p50<1.0s": result["true_chain"]["p50_s"] < TARGETS["true_chain_p50_s"],
        "completion_p99<50ms": result["completion"]["p99_ms"] < TARGETS["completion_p99_ms"],
        "load_latency_p99<0.1s": (result["under_load"]["latency_p99_s"] < TARGETS["load_latency_p99_s"]
                                  if "under_load" in result else None),
    }
    plot(result, args.png)
    result["png"] = str(args.png)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
