"""Leoflow vs Apache Airflow 2.10.5, same machine, same PostgreSQL, same workloads.

Usage::

    python bench/vs_airflow.py [--rounds 2] [--runs 20] [--workdir bench/.work/vs_airflow]
    python bench/vs_airflow.py --chain [--rounds 2] [--repeats 3] [--true-repeats 1]   # ~6 min
    python bench/vs_airflow.py --map [--rounds 1] [--repeats 3] [--true-repeats 1]

What it does (every figure is measured here, nothing is quoted from elsewhere):

1. Installs ``apache-airflow==2.10.5`` + ``psycopg2-binary`` into its own virtualenv under the
   work dir (kept between runs, so only the first run pays for it).
2. Starts ONE private PostgreSQL for both systems (databases ``airflow`` and ``leoflow``).
3. Airflow: ``airflow db migrate`` then ``airflow scheduler`` with LocalExecutor, parallelism 64,
   max_active_runs_per_dag 100, max_active_tasks_per_dag 64, DAG-folder scan interval 5 s.
   Leoflow: ``leoflow db upgrade`` then one ``leoflow serve`` replica with the local executor and
   the same parallelism (64).
4. Workloads, alternating systems for ``--rounds`` rounds each:
   - ``bench_fan``: 100 *empty* tasks (root -> 98 in parallel -> join), ``--runs`` runs triggered
     at once (Airflow: ``trigger_dag()`` with distinct logical dates; Leoflow: its HTTP API).
   - ``bench_true``: the same shape where every task runs ``true`` (Airflow BashOperator; Leoflow
     local executor), 1 run.
   Measured: wall time from the first trigger to the last run's success, tasks/s, per-run
   latency (trigger -> run success), time to the first task's success, and the scheduler's peak
   memory over its whole process tree (PSS, sampled every 100 ms).
5. Prints a JSON table (both systems + ratios) as the last line and saves a bar chart PNG.

With ``--chain`` (issue 21) the workloads are bench/chain.py's two chains instead: ``--empty-steps``
(100) ``kind: empty`` tasks (Airflow: EmptyOperator, which its scheduler marks done without
running) and ``--true-steps`` (40) tasks running ``true`` (Airflow: BashOperator), one run at a
time, trigger -> run success polled every 10 ms; one warm-up run per chain and system, then
``--rounds`` rounds, the systems alternating which goes first, each running ``--repeats`` empty and
``--true-repeats`` ``true`` chains. Airflow gets the latency settings an operator would tune (its
idle loop sleep lowered to 0.05 s; see bench/airflow_chains.py, which also says what each
system's figure includes). Reported per chain: p50 over every repeat, per-step ms, the database's
own duration, and the ratio Airflow/Leoflow of the p50s.

With ``--map`` (mapped tasks) the workloads are bench/map.py's 1,000-item pipelines, ``list →
process (1,000 instances) → combine``, with ``kind: empty`` instances and with ``true`` instances
at most 32 at once, through Leoflow's ``map_over`` and Airflow's ``.partial().expand()``
(bench/airflow_maps.py says how each is written and what differs); timed as ``--chain`` times its
chains (``--repeats`` empty, ``--true-repeats`` ``true`` runs per system per round, after one
warm-up run each).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import airflow_chains, airflow_maps  # noqa: E402
from bench.chain import POLL, refuse_below_one, timed_chain  # noqa: E402
from bench.chain import Client as ChainClient  # noqa: E402
from bench.map import ITEMS as MAP_ITEMS  # noqa: E402
from leoflow.standalone.embedded import EmbeddedPostgres, free_port  # noqa: E402

AIRFLOW_VERSION = "2.10.5"
WIDTH = 98  # parallel tasks between root and join: 100 tasks per run
PARALLELISM = 64


# --------------------------------------------------------------------------- workload definitions

AIRFLOW_DAGS = textwrap.dedent(f'''
    from datetime import datetime
    from airflow import DAG
    from airflow.operators.empty import EmptyOperator
    from airflow.operators.bash import BashOperator

    def build(dag_id, make):
        with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
                 max_active_runs=100, max_active_tasks=64) as dag:
            root = make("root")
            join = make("join")
            for i in range({WIDTH}):
                root >> make(f"t{{i:03d}}") >> join
        return dag

    bench_fan = build("bench_fan", lambda tid: EmptyOperator(task_id=tid))
    bench_true = build("bench_true", lambda tid: BashOperator(task_id=tid, bash_command="true"))
''')

AIRFLOW_TRIGGER = textwrap.dedent('''
    import sys, time, json
    from datetime import datetime, timedelta, timezone
    from airflow.api.common.trigger_dag import trigger_dag
    dag_id, count, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    # Logical dates in the past (Airflow won't start future-dated triggered runs), distinct per run.
    base = datetime.now(timezone.utc) - timedelta(hours=1)
    first = time.time()
    for i in range(count):
        trigger_dag(dag_id, run_id=f"{tag}_{i}", execution_date=base + timedelta(milliseconds=i),
                    replace_microseconds=False)
    print(json.dumps({"first_trigger": first, "last_trigger": time.time()}))
''')


def leoflow_dag_id(workload: str) -> str:
    """Leoflow DAG ids are DNS-style (``[a-z0-9-]``): ``bench_fan`` → ``bench-fan``."""
    return workload.replace("_", "-")


def leoflow_spec(dag_id: str, *, empty: bool) -> dict[str, Any]:
    def task(task_id: str, deps: list[str]) -> dict[str, Any]:
        t: dict[str, Any] = {"id": task_id}
        if empty:
            t["kind"] = "empty"
        else:
            t.update(image="busybox", command=["true"])
        if deps:
            t["depends_on"] = deps
        return t

    middle = [f"t{i:03d}" for i in range(WIDTH)]
    tasks = [task("root", []), *[task(m, ["root"]) for m in middle], task("join", middle)]
    return {"dag_id": dag_id, "schedule": None, "max_active_runs": 100, "tasks": tasks}


# --------------------------------------------------------------------------- measurement helpers

class RssSampler:
    """Peak memory of a process and all its descendants, sampled every 100 ms.

    Summed as PSS (proportional set size): forked workers share their parent's pages
    copy-on-write, and summing plain RSS would count those pages once per worker (for Airflow's
    64 LocalExecutor workers that overstates memory several times over). Falls back to RSS where
    PSS is unavailable.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0  # PSS
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with suppress(psutil.Error):
                proc = psutil.Process(self.pid)
                total, rss = _pss(proc), proc.memory_info().rss
                for child in proc.children(recursive=True):
                    with suppress(psutil.Error):
                        total += _pss(child)
                        rss += child.memory_info().rss
                self.peak = max(self.peak, total)
                self.peak_rss = max(self.peak_rss, rss)
            self._stop.wait(0.1)

    def stop(self) -> tuple[int, int]:
        """(peak PSS, peak summed RSS) in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak, self.peak_rss


def _pss(proc: psutil.Process) -> int:
    try:
        return int(proc.memory_full_info().pss)
    except (AttributeError, psutil.AccessDenied):
        return int(proc.memory_info().rss)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def summarize(system: str, workload: str, runs: int, first_trigger: float,
              run_ends: list[float], first_task_success: float, peak: tuple[int, int]) -> dict[str, Any]:
    wall = max(run_ends) - first_trigger
    latencies = sorted(end - first_trigger for end in run_ends)
    return {
        "system": system, "workload": workload, "runs": runs, "tasks": runs * (WIDTH + 2),
        "wall_s": round(wall, 3),
        "tasks_per_s": round(runs * (WIDTH + 2) / wall, 1),
        "run_latency_p50_s": round(statistics.median(latencies), 3),
        "run_latency_max_s": round(latencies[-1], 3),
        "first_task_success_s": round(first_task_success - first_trigger, 3),
        "peak_pss_mb": round(peak[0] / 2**20, 1),
        "peak_rss_sum_mb": round(peak[1] / 2**20, 1),
    }


def query(db_url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """One short-lived connection per poll: both systems are measured the same way."""
    with psycopg.connect(db_url) as conn:
        return conn.execute(sql, params).fetchall()


def stop_process_group(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM a scheduler and its whole process group; SIGKILL after 30 s."""
    if proc is None or proc.poll() is not None:
        return
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _epoch(ts: datetime) -> float:
    return ts.timestamp()


# --------------------------------------------------------------------------- Airflow

class Airflow:
    def __init__(self, workdir: Path, db_url: str, settings: dict[str, str] | None = None) -> None:
        self.venv = workdir / "airflow-venv"
        self.home = workdir / "airflow-home"
        self.db_url = db_url
        self.settings = settings or {}  # AIRFLOW__* on top of the defaults below
        self.dag_ids: tuple[str, ...] = ()
        self.proc: subprocess.Popen[bytes] | None = None

    def install(self) -> None:
        python = self.venv / "bin" / "python"
        if python.exists() and subprocess.run(
                [str(python), "-c", f"import airflow; assert airflow.__version__ == '{AIRFLOW_VERSION}'"],
                capture_output=True, check=False).returncode == 0:
            return
        subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"apache-airflow=={AIRFLOW_VERSION}",
                        "psycopg2-binary"], check=True)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "LEOFLOW"))}
        env.update({
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url.replace("postgresql://", "postgresql+psycopg2://"),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
            "AIRFLOW__CORE__MAX_ACTIVE_RUNS_PER_DAG": "100",
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "64",
            "AIRFLOW__SCHEDULER__DAG_DIR_LIST_INTERVAL": "5",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.home / "dags"),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW__WEBSERVER__SECRET_KEY": "bench-only",
            **self.settings,
        })
        return env

    def start(self, dag_file: str = AIRFLOW_DAGS, dag_ids: Sequence[str] = ("bench_fan", "bench_true")) -> None:
        """Migrate, write ``dag_file`` as the only DAG file, start the scheduler, wait for ``dag_ids``."""
        self.dag_ids = tuple(dag_ids)
        (self.home / "dags").mkdir(parents=True, exist_ok=True)
        for old in (self.home / "dags").glob("*.py"):
            old.unlink()
        (self.home / "dags" / "bench_dags.py").write_text(dag_file)
        airflow = str(self.venv / "bin" / "airflow")
        subprocess.run([airflow, "db", "migrate"], env=self.env, check=True, capture_output=True)
        log = open(self.home / "scheduler.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen([airflow, "scheduler"], env=self.env, stdout=log, stderr=log,
                                     start_new_session=True)
        wait_for(self._dags_serialized, 180, "Airflow to parse the bench DAGs")

    def _dags_serialized(self) -> bool:
        try:
            rows = query(self.db_url, "SELECT count(*) FROM serialized_dag WHERE dag_id = ANY(%s)", list(self.dag_ids))
        except psycopg.Error:
            return False
        return bool(rows[0][0] == len(self.dag_ids))

    def run(self, dag_id: str, runs: int, tag: str) -> dict[str, Any]:
        assert self.proc is not None
        sampler = RssSampler(self.proc.pid)
        out = subprocess.run([str(self.venv / "bin" / "python"), "-c", AIRFLOW_TRIGGER, dag_id, str(runs), tag],
                             env=self.env, check=True, capture_output=True, text=True)
        first_trigger = json.loads(out.stdout.strip().splitlines()[-1])["first_trigger"]

        def done() -> bool:
            rows = query(self.db_url, "SELECT state FROM dag_run WHERE dag_id = %s AND run_id LIKE %s",
                         dag_id, f"{tag}_%")
            failed = [r for r in rows if r[0] == "failed"]
            if failed:
                raise RuntimeError(f"Airflow run failed: {dag_id} {tag}")
            return len(rows) == runs and all(r[0] == "success" for r in rows)

        wait_for(done, 900, f"Airflow {dag_id} runs")
        peak = sampler.stop()
        ends = [_epoch(r[0]) for r in query(self.db_url,
            "SELECT end_date FROM dag_run WHERE dag_id = %s AND run_id LIKE %s", dag_id, f"{tag}_%")]
        first_task = query(self.db_url,
            "SELECT min(end_date) FROM task_instance WHERE dag_id = %s AND run_id LIKE %s AND state = 'success'",
            dag_id, f"{tag}_%")[0][0]
        return summarize("airflow", dag_id, runs, first_trigger, ends, _epoch(first_task), peak)

    def run_chain(self, dag_id: str, repeats: int, tag: str, timeout: float = 600.0) -> tuple[list[float], list[float]]:
        """``repeats`` runs one after the other, trigger → success: (wall seconds, database seconds)."""
        out = subprocess.run([str(self.venv / "bin" / "python"), "-c", airflow_chains.AIRFLOW_CHAIN_RUNNER, dag_id,
                              str(repeats), tag, self.db_url, str(timeout)], env=self.env, capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise RuntimeError(f"Airflow chain {dag_id} {tag}: {out.stderr[-2000:]}")
        walls: list[float] = []
        dbs: list[float] = []
        for run_id, state, wall in json.loads(out.stdout.strip().splitlines()[-1])["runs"]:
            if state != "success":
                raise RuntimeError(f"Airflow run {dag_id}/{run_id} ended {state}")
            walls.append(wall)
            dbs.append(float(query(self.db_url, "SELECT extract(epoch FROM end_date - queued_at) FROM dag_run "
                                   "WHERE dag_id = %s AND run_id = %s", dag_id, run_id)[0][0]))
        return walls, dbs

    def stop(self) -> None:
        stop_process_group(self.proc)


# --------------------------------------------------------------------------- Leoflow

class Leoflow:
    def __init__(self, workdir: Path, db_url: str) -> None:
        self.home = workdir / "leoflow-home"
        self.db_url = db_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW")}
        env.update({
            "LEOFLOW_DATABASE_URL": self.db_url, "LEOFLOW_EXECUTOR": "local", "LEOFLOW_AUTH": "disabled",
            "LEOFLOW_PORT": str(self.port), "LEOFLOW_HOST": "127.0.0.1", "LEOFLOW_HOME": str(self.home),
            "LEOFLOW_PARALLELISM": str(PARALLELISM), "LEOFLOW_LOCAL_PARALLELISM": str(PARALLELISM),
            "LEOFLOW_NODE_ID": "bench", "LEOFLOW_LOG_LEVEL": "WARNING",
        })
        return env

    def start(self, specs: Sequence[dict[str, Any]] | None = None) -> None:
        """Migrate, start one replica, wait for its leadership, apply ``specs`` (default: the fan DAGs)."""
        if specs is None:
            specs = [leoflow_spec(leoflow_dag_id(workload), empty=empty)
                     for workload, empty in (("bench_fan", True), ("bench_true", False))]
        self.home.mkdir(parents=True, exist_ok=True)
        leoflow = [sys.executable, "-m", "leoflow"]
        subprocess.run([*leoflow, "db", "upgrade"], env=self.env, check=True, capture_output=True)
        log = open(self.home / "serve.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen([*leoflow, "serve"], env=self.env, stdout=log, stderr=log,
                                     start_new_session=True)
        wait_for(self._leading, 60, "Leoflow to elect itself")
        for spec in specs:
            r = httpx.post(f"{self.url}/api/v2/dags", json=spec, timeout=30)
            r.raise_for_status()

    def _leading(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/v2/cluster/leader", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def run(self, workload: str, runs: int, tag: str) -> dict[str, Any]:
        assert self.proc is not None
        dag_id = leoflow_dag_id(workload)
        sampler = RssSampler(self.proc.pid)
        with httpx.Client(base_url=self.url, timeout=30) as client:
            first_trigger = time.time()
            for i in range(runs):
                client.post(f"/api/v2/dags/{dag_id}/runs", json={"run_id": f"{tag}_{i}"}).raise_for_status()

        def done() -> bool:
            rows = query(self.db_url, "SELECT state FROM dag_runs WHERE dag_id = %s AND run_id LIKE %s",
                         dag_id, f"{tag}_%")
            if any(r[0] in ("failed", "cancelled") for r in rows):
                raise RuntimeError(f"Leoflow run failed: {dag_id} {tag}")
            return len(rows) == runs and all(r[0] == "success" for r in rows)

        wait_for(done, 900, f"Leoflow {dag_id} runs")
        peak = sampler.stop()
        ends = [_epoch(r[0]) for r in query(self.db_url,
            "SELECT ended_at FROM dag_runs WHERE dag_id = %s AND run_id LIKE %s", dag_id, f"{tag}_%")]
        first_task = query(self.db_url,
            "SELECT min(ti.ended_at) FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk "
            "WHERE r.dag_id = %s AND r.run_id LIKE %s AND ti.state = 'success'", dag_id, f"{tag}_%")[0][0]
        return summarize("leoflow", workload, runs, first_trigger, ends, _epoch(first_task), peak)

    def run_chain(self, dag_id: str, repeats: int, tag: str, timeout: float = 600.0) -> tuple[list[float], list[float]]:
        """``repeats`` runs one after the other through bench/chain.py's API client (trigger, GET
        every 10 ms): (wall seconds, database seconds). ``tag`` and ``timeout`` are unused: Leoflow
        names the runs, and bench/chain.py bounds its wait."""
        walls: list[float] = []
        dbs: list[float] = []
        with httpx.Client(base_url=self.url, timeout=30) as http:
            client = ChainClient(http, self.db_url)
            try:
                for _ in range(repeats):
                    one = timed_chain(client, dag_id, 1)
                    walls += one["_walls"]
                    dbs.append(one["db_p50_s"])
            finally:
                client.db.close()
        return walls, dbs

    def stop(self) -> None:
        stop_process_group(self.proc)


# --------------------------------------------------------------------------- report

def best(results: list[dict[str, Any]], system: str, workload: str) -> dict[str, Any]:
    """The median round by wall time (robust to one noisy round on a shared machine)."""
    rounds = sorted((r for r in results if r["system"] == system and r["workload"] == workload),
                    key=lambda r: r["wall_s"])
    return rounds[len(rounds) // 2]


def report(results: list[dict[str, Any]], plot: Path) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for workload in ("bench_fan", "bench_true"):
        a, lf = best(results, "airflow", workload), best(results, "leoflow", workload)
        table[workload] = {
            "airflow": a, "leoflow": lf,
            "ratio_tasks_per_s": round(lf["tasks_per_s"] / a["tasks_per_s"], 1),
            "ratio_wall": round(a["wall_s"] / lf["wall_s"], 1),
            "ratio_peak_memory": round(a["peak_pss_mb"] / lf["peak_pss_mb"], 1),
        }
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        for ax, (metric, label) in zip(axes, (("tasks_per_s", "tasks/s (higher is better)"),
                                              ("wall_s", "wall time s (lower is better)"),
                                              ("peak_pss_mb", "peak memory (PSS) MB, lower is better")), strict=True):
            xs = range(2)
            ax.bar([x - 0.2 for x in xs], [table[w]["airflow"][metric] for w in ("bench_fan", "bench_true")],
                   0.4, label="Airflow 2.10.5")
            ax.bar([x + 0.2 for x in xs], [table[w]["leoflow"][metric] for w in ("bench_fan", "bench_true")],
                   0.4, label="Leoflow")
            ax.set_xticks(list(xs), ["empty tasks (20 runs)", "`true` tasks (1 run)"])
            ax.set_title(label)
            ax.set_yscale("log" if metric == "tasks_per_s" else "linear")
        axes[0].legend()
        fig.tight_layout()
        plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(plot, dpi=100)
    except ImportError:
        print("matplotlib missing: pip install -e '.[bench]' for the plot", file=sys.stderr)
    return table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds, alternating which system goes first")
    parser.add_argument("--runs", type=int, default=20, help="bench_fan runs triggered at once")
    parser.add_argument("--chain", action="store_true",
                        help="instead of the fan workloads: bench/chain.py's two chains, trigger -> run success")
    parser.add_argument("--map", action="store_true",
                        help="instead of the fan workloads: bench/map.py's 1,000-item maps, .expand() in Airflow")
    parser.add_argument("--empty-steps", type=int, default=100, help="--chain: steps of the empty chain")
    parser.add_argument("--true-steps", type=int, default=40, help="--chain: steps of the `true` chain")
    parser.add_argument("--repeats", type=int, default=3, help="--chain: empty-chain runs per system per round")
    parser.add_argument("--true-repeats", type=int, default=1,
                        help="--chain: `true`-chain runs per system per round")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / ".work" / "vs_airflow")
    parser.add_argument("--plot", type=Path, default=None,
                        help="PNG path (default bench/results/vs_airflow.png, with --chain vs_airflow_chain.png)")
    args = parser.parse_args(argv)
    refuse_below_one(parser, args, ("rounds", "runs", "empty_steps", "true_steps", "repeats", "true_repeats"))
    if args.chain and args.map:
        parser.error("--chain and --map are two different comparisons: choose one")
    if args.plot is None:
        args.plot = ROOT / "bench" / "results" / ("vs_airflow_chain.png" if args.chain else
                                                  "vs_airflow_map.png" if args.map else "vs_airflow.png")
    return args


def fan_rounds(airflow: Airflow, leoflow: Leoflow, args: argparse.Namespace) -> dict[str, Any]:
    """The fan workloads, systems alternating per round; the report table (and the plot)."""
    airflow.start()
    leoflow.start()
    stamp = datetime.now(UTC).strftime("%H%M%S")
    results: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for system in (airflow, leoflow) if rnd % 2 == 0 else (leoflow, airflow):
            for dag_id, runs in (("bench_fan", args.runs), ("bench_true", 1)):
                tag = f"r{rnd}_{stamp}"
                result = system.run(dag_id, runs, tag)
                result["round"] = rnd
                print(json.dumps(result), file=sys.stderr)
                results.append(result)
    return report(results, args.plot)


def chain_rounds(airflow: Airflow, leoflow: Leoflow, args: argparse.Namespace) -> dict[str, Any]:
    """bench/chain.py's chains in both systems, alternating per round after one warm-up run each."""
    specs = airflow_chains.chain_specs(args.empty_steps, args.true_steps)
    airflow.start(airflow_chains.airflow_dag_file(specs), [spec["dag_id"] for spec in specs])
    leoflow.start(specs)
    plan = ((airflow_chains.EMPTY_CHAIN, args.repeats), (airflow_chains.TRUE_CHAIN, args.true_repeats))
    stamp = datetime.now(UTC).strftime("%H%M%S")
    systems: dict[str, Airflow | Leoflow] = {"airflow": airflow, "leoflow": leoflow}
    for name, system in systems.items():  # first-run caches, page faults: as bench/chain.py does
        for dag_id, _ in plan:
            system.run_chain(dag_id, 1, f"warmup_{stamp}")
            print(f"vs_airflow --chain: warmed up {name} {dag_id}", file=sys.stderr)
    timed: dict[str, dict[str, tuple[list[float], list[float]]]] = {
        dag_id: {name: ([], []) for name in systems} for dag_id, _ in plan}
    for rnd in range(args.rounds):
        for name in airflow_chains.SYSTEMS if rnd % 2 == 0 else airflow_chains.SYSTEMS[::-1]:
            for dag_id, repeats in plan:
                walls, dbs = systems[name].run_chain(dag_id, repeats, f"r{rnd}_{stamp}")
                timed[dag_id][name][0].extend(walls)
                timed[dag_id][name][1].extend(dbs)
                print(json.dumps({"round": rnd, "system": name, "chain": dag_id, "walls_s": walls}), file=sys.stderr)
    table = airflow_chains.side_by_side(timed, {spec["dag_id"]: len(spec["tasks"]) for spec in specs})
    airflow_chains.plot(table, args.plot)
    return {"airflow_settings": airflow_chains.AIRFLOW_LATENCY_SETTINGS, "poll_s": POLL, **table}


def map_rounds(airflow: Airflow, leoflow: Leoflow, args: argparse.Namespace) -> dict[str, Any]:
    """bench/map.py's 1,000-item pipelines in both systems, alternating per round after a warm-up each."""
    specs = airflow_maps.map_specs()
    airflow.start(airflow_maps.airflow_dag_file(), [spec["dag_id"] for spec in specs])
    leoflow.start(specs)
    plan = ((airflow_maps.EMPTY_MAP, args.repeats), (airflow_maps.TRUE_MAP, args.true_repeats))
    stamp = datetime.now(UTC).strftime("%H%M%S")
    systems: dict[str, Airflow | Leoflow] = {"airflow": airflow, "leoflow": leoflow}
    for name, system in systems.items():
        system.run_chain(airflow_maps.EMPTY_MAP, 1, f"warmup_{stamp}")
        print(f"vs_airflow --map: warmed up {name}", file=sys.stderr)
    timed: dict[str, dict[str, tuple[list[float], list[float]]]] = {
        dag_id: {name: ([], []) for name in systems} for dag_id, _ in plan}
    for rnd in range(args.rounds):
        for name in airflow_chains.SYSTEMS if rnd % 2 == 0 else airflow_chains.SYSTEMS[::-1]:
            for dag_id, repeats in plan:
                # Airflow's 1,000 `true` instances took over 600 s on the shared 2-core host (2026-11-29).
                walls, dbs = systems[name].run_chain(dag_id, repeats, f"r{rnd}_{stamp}", timeout=2400)
                timed[dag_id][name][0].extend(walls)
                timed[dag_id][name][1].extend(dbs)
                print(json.dumps({"round": rnd, "system": name, "map": dag_id, "walls_s": walls}), file=sys.stderr)
    table = airflow_chains.side_by_side(timed, {dag_id: MAP_ITEMS for dag_id, _ in plan})
    airflow_maps.plot(table, args.plot)
    return {"airflow_settings": airflow_chains.AIRFLOW_LATENCY_SETTINGS, "poll_s": POLL, **table}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds through the finally blocks, so no scheduler or PostgreSQL is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.workdir.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="vs-airflow-pg-") as tmp:
        Path(tmp).chmod(0o755)
        pg = EmbeddedPostgres(Path(tmp) / "data", port=free_port(), max_connections=300)
        pg.start()
        pg.wait_ready()
        airflow = Airflow(args.workdir, pg.create_database("airflow"),
                          airflow_chains.AIRFLOW_LATENCY_SETTINGS if args.chain or args.map else None)
        leoflow = Leoflow(args.workdir, pg.create_database("leoflow"))
        try:
            print("installing Airflow (cached after the first run)...", file=sys.stderr)
            airflow.install()
            table = (chain_rounds if args.chain else map_rounds if args.map else fan_rounds)(airflow, leoflow, args)
        finally:
            airflow.stop()
            leoflow.stop()
            pg.stop()
    machine = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "airflow": AIRFLOW_VERSION,
               "date": datetime.now(UTC).isoformat(timespec="seconds"), "load_1m": round(os.getloadavg()[0], 2)}
    mode = ({"benchmark": "vs_airflow_chain"} if args.chain else {"benchmark": "vs_airflow_map"} if args.map
            else {})
    print(json.dumps({**mode, "machine": machine, "rounds": args.rounds, "results": table, "plot": str(args.plot)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
