"""Scheduler benchmark: throughput, dependency latency and leader memory (issue 4).

Two phases against a private embedded PostgreSQL (or ``--database-url``), each with the leader
running ``SchedulerService`` in a *separate process* (so its RSS is the leader's alone) and an
executor that completes every try instantly:

1. **Throughput/latency**: ``--runs`` runs (default 1,000) of a fan-out/fan-in DAG of
   ``--tasks`` tasks (default 100: root → tasks-2 in parallel → join), all triggered up front
   (bulk SQL). Reports tasks/s handed to the executor (ready → submitted, over the whole
   phase), p50/p99 latency from an upstream's success (the executor reporting it) to its
   downstream being handed to the executor (measured inside the executor, so it includes the
   scheduler's commit), wall time, and the leader's peak RSS. The joins' p50/p99 come apart too
   (one sample a run against 98 middles': the p99 of all samples is where the two meet).
2. **Memory at 1M**: ``--waiting`` task instances (default 1,000,000 = 10,000 running runs x 100)
   seeded with ``generate_series`` (not through the API), then the leader schedules for
   ``--memory-seconds``; its RSS is sampled throughout. Memory must stay flat.

3. **Fairness** (``--fairness``, issue 19): one run of a ``--catch-up-tasks`` (default 10,000)
   task DAG drains through the default pool while a high-priority DAG (one task, ``priority:
   10``) is triggered every ``--urgent-every`` seconds; reports the p50/p99/max wait of the
   urgent task for a slot (``queued_at - started_at`` of its run: ready at run start) and from
   the trigger (``queued_at - created_at``), the catch-up's drain rate, and the same for an
   identical DAG without priority (the control: oldest-first, what Leoflow did before pools).

Targets: >= 2,000 tasks/s, p99 < 1.5 s, peak RSS < 300 MB at 1M. Prints one JSON object as the
last line and saves ``bench/scheduler.png`` (or ``--png``).

``--parallelism`` is the leader's ``LEOFLOW_PARALLELISM`` (default 128, the product default). An
instantly-completing try still holds its slot from the queue transition until its report is
applied on the next tick, so the parallelism caps the tasks moved per tick; raising it (e.g.
``--parallelism 1024 --batch-size 1000``) measures the loop rather than the cap.

    python bench/scheduler.py                       # full run
    python bench/scheduler.py --runs 200 --waiting 200000 --memory-seconds 20   # quicker
    python bench/scheduler.py --runs 200 --waiting 0 --fairness                   # throughput + fairness
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import time
from array import array
from collections import Counter, deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.private_database import benchmark_database  # noqa: E402
from leoflow.clock import SystemClock  # noqa: E402
from leoflow.db.connection.database import Database  # noqa: E402
from leoflow.executor.base import Report  # noqa: E402
from leoflow.leadership import LeaderContext  # noqa: E402
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey  # noqa: E402
from leoflow.replica import event_loop_factory  # noqa: E402
from leoflow.settings import declared  # noqa: E402

DAG_ID = "bench-fan"


# --------------------------------------------------------------------------- leader process

class InstantExecutor:
    """Completes every try at once and measures, on the executor's side, how long after its
    upstreams' success each task was handed over. Memory: per-second counters, per-active-run
    timestamps and one float per task (an ``array``), nothing per try otherwise.
    """

    name = "instant"

    def __init__(self) -> None:
        self.submitted = 0
        self.first: float | None = None
        self.last: float | None = None
        self.per_second: Counter[int] = Counter()
        self.latencies = array("d")
        #: The joins' samples again: one per run, behind 98 middles, so the p99 of all samples
        #: sits where the joins' fastest and the middles' slowest meet (see latency_summary).
        self.join_latencies = array("d")
        self._root_done: dict[str, float] = {}
        self._middle_done: dict[str, float] = {}
        self._queue: deque[TryKey] = deque()
        self._event = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._report: Report | None = None
        self._clock = SystemClock()

    async def start(self, ctx: LeaderContext, report: Report) -> None:
        self._report = report
        self._pump = asyncio.create_task(self._deliver())

    async def submit(self, launch: TaskLaunch) -> None:
        now = time.monotonic()
        self.first = self.first or now
        self.last = now
        self.submitted += 1
        self.per_second[int(time.time())] += 1
        run, task = launch.key.run_id, launch.key.task_id
        if task == "join" and run in self._middle_done:
            self.latencies.append(now - self._middle_done.pop(run))
            self.join_latencies.append(self.latencies[-1])
            self._root_done.pop(run, None)
        elif task != "root" and run in self._root_done:
            self.latencies.append(now - self._root_done[run])
        self._queue.append(launch.key)
        self._event.set()

    async def cancel(self, key: TryKey) -> None:
        return None

    async def logs(self, key: TryKey) -> str | None:
        return None

    async def stop(self) -> None:
        if self._pump:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump

    async def _deliver(self) -> None:
        while True:
            await self._event.wait()
            self._event.clear()
            while self._queue:
                key = self._queue.popleft()
                assert self._report is not None
                done = time.monotonic()
                if key.task_id == "root":
                    self._root_done[key.run_id] = done
                elif key.task_id != "join":
                    self._middle_done[key.run_id] = done  # the last middle's success gates the join
                await self._report(StatusUpdate(key=key, state="success", at=self._clock.now(), exit_code=0))

    def latency_summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        if not ordered:
            return {"p50": None, "p99": None, "max": None, "samples": 0, "hist": []}
        hist = Counter(min(int(v * 10), 50) for v in ordered)
        joins = sorted(self.join_latencies)
        return {"p50": percentile(ordered, 0.5), "p99": percentile(ordered, 0.99),
                "max": ordered[-1], "samples": len(ordered), "hist": sorted(hist.items()),
                # The rest are the middles (their upstream is the root).
                "join_p50": percentile(joins, 0.5), "join_p99": percentile(joins, 0.99)}


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of sorted samples, by rank (as the summary always took it)."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else None


def rss_kb(pid: int | str = "self") -> tuple[int, int]:
    """(VmRSS, VmHWM) in kB from /proc."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            values[key] = int(value.split()[0])
    return values.get("VmRSS", 0), values.get("VmHWM", 0)


async def leader_main(args: argparse.Namespace) -> None:
    from leoflow.db.connection.engine import make_async_engine
    from leoflow.scheduler.service import SchedulerService
    from leoflow.settings import load_settings

    settings = load_settings({"LEOFLOW_DATABASE_URL": args.database_url, "LEOFLOW_PARALLELISM": str(args.parallelism),
                              "LEOFLOW_SCHEDULER_INTERVAL": "0.5", "LEOFLOW_NODE_ID": "bench-leader",
                              "LEOFLOW_LOG_LEVEL": "warning", "LEOFLOW_LOG_FORMAT": "text"})
    engine = make_async_engine(settings.database, pool_size=4, application_name="leoflow-bench-leader")
    executor = InstantExecutor()
    service = SchedulerService(executor, batch_size=args.batch_size)
    ctx = LeaderContext(term=1, settings=settings, db=Database(engine))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    # As a replica does once it has started (leoflow/replica.py): what start-up loaded lives as long
    # as the process, and the cyclic GC's full collections would scan it every time (63 ms each,
    # 0.44 s per 30,000 tasks here without this).
    gc.freeze()
    task = asyncio.create_task(service.run(ctx))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    task.cancel()  # a no-op if the service has ended by itself
    error: Exception | None = None
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception as exc:  # the service's own failure: reported below
        error = exc
    await executor.stop()
    await engine.dispose()
    if not stop.is_set():
        # The service ended by itself (it raised, or was fenced out): no run will progress, so say
        # why and exit, instead of waiting for a SIGTERM the driver sends only after --timeout.
        raise SystemExit("bench leader: the scheduler service ended before it was stopped: "
                         + (f"{type(error).__name__}: {error}" if error else "it returned (fenced out?)"))
    _, hwm = rss_kb()
    print(json.dumps({"submitted": executor.submitted, "first": executor.first, "last": executor.last,
                      "latency": executor.latency_summary(),
                      "per_second": sorted(executor.per_second.items()), "peak_rss_kb": hwm}), flush=True)


# --------------------------------------------------------------------------- orchestration

def fan_spec(tasks: int, max_active_runs: int, dag_id: str = DAG_ID) -> dict[str, Any]:
    middle = [f"m{i}" for i in range(tasks - 2)]
    step = {"image": "busybox", "command": ["true"]}
    return {"dag_id": dag_id, "max_active_runs": max_active_runs, "tasks": [
        {"id": "root", **step}, *({"id": m, **step, "depends_on": ["root"]} for m in middle),
        {"id": "join", **step, "depends_on": middle}]}


def apply_spec(url: str, tasks: int, max_active_runs: int, dag_id: str = DAG_ID) -> None:
    from leoflow.db.connection.engine import make_async_engine
    from leoflow.db.stores import dags as dag_store
    from leoflow.model.spec.dag import parse_dag_spec
    from leoflow.settings import DatabaseSettings

    async def main() -> None:
        engine = make_async_engine(DatabaseSettings(url=url), pool_size=1)
        async with engine.begin() as conn:
            await dag_store.apply_dag(conn, parse_dag_spec(fan_spec(tasks, max_active_runs, dag_id)),
                                      clock=SystemClock())
        await engine.dispose()
    asyncio.run(main())


def reset(conn: psycopg.Connection[Any]) -> None:
    conn.execute("TRUNCATE dag_runs, task_instances, task_tries, task_logs, cluster_leadership CASCADE")
    conn.execute("INSERT INTO cluster_leadership (cluster, term, node_id) VALUES ('default', 1, 'bench-leader')")


def insert_runs(conn: psycopg.Connection[Any], dag_id: str, first: tuple[str, int], then: tuple[str, int]) -> None:
    """Runs of ``dag_id`` at its current version: ``first`` = (state, count), then ``then`` (higher ids)."""
    conn.execute("""
        INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, started_at)
        SELECT %s, 'r-' || g, d.current_version_id, 'manual', now(),
               CASE WHEN g <= %s THEN %s ELSE %s END, now()
        FROM generate_series(1, %s) g, dags d WHERE d.dag_id = %s""",
                 (dag_id, first[1], first[0], then[0], first[1] + then[1], dag_id))


def start_leader(url: str, args: argparse.Namespace) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--leader", "--database-url", url, "--parallelism", str(args.parallelism),
           "--batch-size", str(args.batch_size)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)


def check_alive(proc: subprocess.Popen[str]) -> None:
    """Fail the benchmark at once if the leader process has exited (its error went to stderr)."""
    if proc.poll() is not None:
        raise SystemExit(f"bench/scheduler.py: the leader exited early (code {proc.returncode}); its error is above")


def stop_leader(proc: subprocess.Popen[str]) -> dict[str, Any]:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return summary


def phase_throughput(url: str, args: argparse.Namespace) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        reset(conn)
        conn.execute("""
            INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state)
            SELECT %s, 'bench-' || g, d.current_version_id, 'manual', now(), 'queued'
            FROM generate_series(1, %s) g, dags d WHERE d.dag_id = %s
        """, (DAG_ID, args.runs, DAG_ID))
        proc = start_leader(url, args)
        started = time.monotonic()
        samples: list[tuple[float, int]] = []
        deadline = started + args.timeout
        while time.monotonic() < deadline:
            check_alive(proc)
            left = conn.execute("SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running')").fetchone()
            samples.append((time.monotonic() - started, rss_kb(proc.pid)[0]))
            if left and left[0] == 0:
                break
            time.sleep(0.5)
        wall = time.monotonic() - started
        leader = stop_leader(proc)
        states: dict[str, int] = {str(state): int(n) for state, n in
                                  conn.execute("SELECT state, count(*) FROM dag_runs GROUP BY state").fetchall()}
    lat = leader["latency"]
    span = (leader["last"] or 0) - (leader["first"] or 0)
    return {
        "runs": args.runs, "tasks_per_run": args.tasks, "parallelism": args.parallelism,
        "max_active_runs": args.max_active_runs,
        "run_states": states, "wall_seconds": round(wall, 2),
        "tasks_submitted": leader["submitted"],
        "tasks_per_second": round(leader["submitted"] / span, 1) if span > 0 else None,
        "latency_p50_seconds": round(lat["p50"], 4), "latency_p99_seconds": round(lat["p99"], 4),
        "latency_max_seconds": round(lat["max"], 4), "latency_samples": lat["samples"],
        "join_latency_p50_seconds": round(lat["join_p50"], 4) if lat["join_p50"] is not None else None,
        "join_latency_p99_seconds": round(lat["join_p99"], 4) if lat["join_p99"] is not None else None,
        "leader_peak_rss_mb": round(leader["peak_rss_kb"] / 1024, 1),
        "_per_second": leader["per_second"], "_rss": samples, "_latency_hist": lat["hist"],
    }


def phase_memory(url: str, args: argparse.Namespace) -> dict[str, Any]:
    runs = args.waiting // args.tasks
    with psycopg.connect(url, autocommit=True) as conn:
        reset(conn)
        t0 = time.monotonic()
        conn.execute("""
            INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, started_at)
            SELECT %s, 'mem-' || g, d.current_version_id, 'manual', now(), 'running', now()
            FROM generate_series(1, %s) g, dags d WHERE d.dag_id = %s
        """, (DAG_ID, runs, DAG_ID))
        conn.execute("""
            INSERT INTO task_instances (run_pk, task_id, state, max_tries, pending_upstreams, pool)
            SELECT r.id, t.task_id, 'pending', 1, t.ups, 'default'
            FROM dag_runs r,
                 (SELECT 'root' AS task_id, 0 AS ups
                  UNION ALL SELECT 'm' || i, 1 FROM generate_series(0, %s - 3) i
                  UNION ALL SELECT 'join', %s - 2) t
        """, (args.tasks, args.tasks))
        conn.execute("VACUUM ANALYZE task_instances")
        conn.execute("VACUUM ANALYZE dag_runs")
        seeded = conn.execute("SELECT count(*) FROM task_instances").fetchone()
        seed_seconds = time.monotonic() - t0
        proc = start_leader(url, args)
        started = time.monotonic()
        samples: list[tuple[float, int]] = []
        while time.monotonic() - started < args.memory_seconds:
            check_alive(proc)
            samples.append((time.monotonic() - started, rss_kb(proc.pid)[0]))
            time.sleep(0.5)
        leader = stop_leader(proc)
        done = conn.execute("SELECT count(*) FROM task_instances WHERE state = 'success'").fetchone()
    assert seeded is not None and done is not None
    span = (leader["last"] or 0) - (leader["first"] or 0)
    steady = [kb for t, kb in samples if t >= args.memory_seconds / 3]
    return {
        "waiting_task_instances": int(seeded[0]), "seed_seconds": round(seed_seconds, 1),
        "seconds": args.memory_seconds, "tasks_done": int(done[0]), "tasks_submitted": leader["submitted"],
        "tasks_per_second": round(leader["submitted"] / span, 1) if span > 0 else None,
        "leader_peak_rss_mb": round(leader["peak_rss_kb"] / 1024, 1),
        "rss_first_third_max_mb": round(max((kb for t, kb in samples if t < args.memory_seconds / 3), default=0)
                                        / 1024, 1),
        "rss_rest_max_mb": round(max(steady, default=0) / 1024, 1),
        "_rss": samples,
    }


CATCH_UP, URGENT, PLAIN = "bench-catch-up", "bench-urgent", "bench-plain"


def apply_fairness_specs(url: str, tasks: int) -> None:
    from leoflow.db.connection.engine import make_async_engine
    from leoflow.db.stores import dags as dag_store
    from leoflow.model.spec.dag import parse_dag_spec
    from leoflow.settings import DatabaseSettings

    step = {"image": "busybox", "command": ["true"]}
    specs = [{"dag_id": CATCH_UP, "max_active_runs": 1, "tasks": [{"id": f"t{i}", **step} for i in range(tasks)]},
             {"dag_id": URGENT, "max_active_runs": 1000, "tasks": [{"id": "now", "priority": 10, **step}]},
             {"dag_id": PLAIN, "max_active_runs": 1000, "tasks": [{"id": "now", **step}]}]

    async def main() -> None:
        engine = make_async_engine(DatabaseSettings(url=url), pool_size=1)
        async with engine.begin() as conn:
            for spec in specs:
                await dag_store.apply_dag(conn, parse_dag_spec(spec), clock=SystemClock())
        await engine.dispose()
    asyncio.run(main())


def _percentiles(values: list[float]) -> dict[str, float | None]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": round(ordered[len(ordered) // 2], 4),
            "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 4), "max": round(ordered[-1], 4)}


def phase_fairness(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """A 10k-task catch-up drains while urgent (priority 10) and plain (priority 0) runs arrive."""
    apply_fairness_specs(url, args.catch_up_tasks)
    with psycopg.connect(url, autocommit=True) as conn:
        reset(conn)
        conn.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state) "
                     "SELECT dag_id, 'catch-up', current_version_id, 'manual', now(), 'queued' FROM dags "
                     "WHERE dag_id = %s", (CATCH_UP,))
        proc = start_leader(url, args)
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < args.timeout:
            check_alive(proc)
            state = conn.execute("SELECT state FROM dag_runs WHERE run_id = 'catch-up'").fetchone()
            if state and state[0] not in ("queued", "running"):
                break
            n += 1
            for dag_id in (URGENT, PLAIN):
                conn.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state) "
                             "SELECT dag_id, %s, current_version_id, 'manual', now(), 'queued' FROM dags "
                             "WHERE dag_id = %s", (f"arrival-{n}", dag_id))
            conn.execute("SELECT pg_notify('leoflow_wakeup', 'bench')")
            time.sleep(args.urgent_every)
        drained = time.monotonic() - started
        while time.monotonic() - started < args.timeout and conn.execute(
                "SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running')").fetchone() != (0,):
            check_alive(proc)
            time.sleep(0.2)
        stop_leader(proc)
        waits: dict[str, Any] = {}
        for dag_id in (URGENT, PLAIN):
            found = conn.execute("""
                SELECT extract(epoch FROM ti.queued_at - r.started_at), extract(epoch FROM ti.queued_at - r.created_at)
                FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk WHERE r.dag_id = %s
                  AND ti.queued_at IS NOT NULL AND r.created_at < (SELECT ended_at FROM dag_runs
                                                                   WHERE run_id = 'catch-up')""", (dag_id,)).fetchall()
            waits[dag_id] = {"samples": len(found), "wait_for_slot_seconds": _percentiles([float(a) for a, _ in found]),
                             "wait_from_trigger_seconds": _percentiles([float(b) for _, b in found])}
        [(span,)] = conn.execute("SELECT extract(epoch FROM ended_at - started_at) FROM dag_runs "
                                 "WHERE run_id = 'catch-up'").fetchall()
    return {"catch_up_tasks": args.catch_up_tasks, "parallelism": args.parallelism, "arrivals": n,
            "catch_up_drain_seconds": round(float(span), 2) if span is not None else None,
            "catch_up_tasks_per_second": round(args.catch_up_tasks / float(span), 1) if span else None,
            "wall_seconds": round(drained, 2), "urgent_priority_10": waits[URGENT], "plain_priority_0": waits[PLAIN]}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fair = result.get("fairness")
    fig, axes = plt.subplots(1, 4 if fair else 3, figsize=(21 if fair else 16, 4.5))
    tp = result["throughput"]
    per = tp.pop("_per_second")
    if per:
        t0 = per[0][0]
        axes[0].bar([s - t0 for s, _ in per], [n for _, n in per], width=1.0)
    axes[0].axhline(2000, color="red", linestyle="--", label="target 2,000/s")
    axes[0].set(title=f"Tasks handed to the executor per second\n{tp['runs']} runs x {tp['tasks_per_run']} tasks, "
                f"parallelism {tp['parallelism']}, max_active_runs {tp['max_active_runs']}",
                xlabel="s", ylabel="tasks/s")
    axes[0].legend()
    hist = tp.pop("_latency_hist")
    # Buckets of 0.1 s from 0 to 5 s; the last bar (at 5.05 s) counts everything slower.
    axes[1].bar([(b + 0.5) * 0.1 for b, _ in hist], [n for _, n in hist], width=0.1)
    axes[1].axvline(1.5, color="red", linestyle="--", label="p99 target 1.5 s")
    axes[1].set(title=f"Upstream success -> downstream handed to executor (last bar: >= 5 s)\n"
                f"p50 {tp['latency_p50_seconds']}s, p99 {tp['latency_p99_seconds']}s", xlabel="seconds",
                ylabel="tasks")
    axes[1].legend()
    for key, label in (("throughput", "phase 1"), ("memory", "phase 2 (1M waiting)")):
        samples = result[key].pop("_rss", [])
        if samples:
            axes[2].plot([t for t, _ in samples], [kb / 1024 for _, kb in samples], label=label)
    axes[2].axhline(300, color="red", linestyle="--", label="target 300 MB")
    axes[2].set(title="Leader RSS", xlabel="s", ylabel="MB", ylim=(0, None))
    axes[2].legend()
    if fair:
        groups = [("urgent_priority_10", "priority 10"), ("plain_priority_0", "priority 0 (oldest first)")]
        for offset, (key, label) in enumerate(groups):
            wait = fair[key]["wait_for_slot_seconds"]
            axes[3].bar([x + offset * 0.4 for x in range(3)], [wait["p50"] or 0, wait["p99"] or 0, wait["max"] or 0],
                        width=0.4, label=label)
        axes[3].set_xticks([0.2, 1.2, 2.2], ["p50", "p99", "max"])
        axes[3].set(title=f"Wait for a slot while a {fair['catch_up_tasks']:,}-task catch-up drains\n"
                    f"({fair['arrivals']} arrivals each, parallelism {fair['parallelism']})", ylabel="seconds")
        axes[3].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    result["throughput"].pop("_rss", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--leader", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--database-url",
                        help="use this (empty or leoflow-migrated) database instead of a private server")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--parallelism", type=int, default=declared.PARALLELISM.default,
                        help="LEOFLOW_PARALLELISM of the leader (default: the product default)")
    parser.add_argument("--max-active-runs", type=int, default=16, help="max_active_runs of the benchmark DAG")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--waiting", type=int, default=1_000_000, help="task instances for the memory phase (0: skip)")
    parser.add_argument("--memory-seconds", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--fairness", action="store_true", help="also run the fairness phase (issue 19)")
    parser.add_argument("--catch-up-tasks", type=int, default=10_000, help="tasks of the fairness phase's catch-up")
    parser.add_argument("--urgent-every", type=float, default=0.1, help="seconds between urgent arrivals")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "scheduler.png")
    args = parser.parse_args()
    if args.leader:
        # The leader runs on the event loop a replica runs on (uvloop when installed).
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(leader_main(args))
        return

    with benchmark_database(args.database_url, prefix="leoflow-bench-sched-") as url:
        apply_spec(url, args.tasks, args.max_active_runs)
        result: dict[str, Any] = {"benchmark": "scheduler", "cpus": os.cpu_count(),
                                  "throughput": phase_throughput(url, args)}
        result["memory"] = phase_memory(url, args) if args.waiting > 0 else {}
        if args.fairness:
            result["fairness"] = phase_fairness(url, args)
        tp, mem = result["throughput"], result["memory"]
        result["targets"] = {
            "tasks_per_second>=2000": (tp["tasks_per_second"] or 0) >= 2000,
            "latency_p99<1.5s": tp["latency_p99_seconds"] < 1.5,
            "peak_rss_at_1M<300MB": mem.get("leader_peak_rss_mb", 1e9) < 300 if mem else None,
        }
        plot(result, args.png)
        result["png"] = str(args.png)
        print(json.dumps(result))


if __name__ == "__main__":
    main()
