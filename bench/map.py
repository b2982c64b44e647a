"""Mapped tasks (ADR 0014, decision 3): a fan-out over a list known only at run time, end to end.

Against one real ``leoflow serve`` replica (local executor, ``LEOFLOW_HOME`` in a temp dir) on a
private embedded PostgreSQL (or ``--database-url``), measured as a user would, through the HTTP
API (polling the run every 10 ms), each row after one warm-up run:

1. **empty, 1,000 items**: ``list`` (one local process writing ``{"n": 1000}``) → ``process``
   (``kind: empty``, ``map_over: {count: "{{ tasks.list.outputs.n }}"}``; a list of 1,000 items does
   not fit in one task's outputs, at most 1,000 keys and items in all) → ``combine`` (``kind:
   empty``); trigger → run ``success``, p50 over ``--repeats`` (5) runs (target < 1.5 s).
2. **empty, 10,000 items**: the same with ``{"n": 10000}``; p50 over ``--big-repeats`` (3) runs
   (target < 10 s), and the replica's resident memory sampled
   every 50 ms: growth from just before the first of these runs to the peak (target < 100 MB; the
   replica is the leader, the API and the executor in one process).
3. **``true``, 1,000 items**: ``process`` runs ``true`` in a subprocess per instance,
   ``max_parallel: 32`` (the executor's parallelism 32 too); p50 over ``--true-repeats`` (1)
   (target < 30 s).
4. **expansion**: the leader's step, in process, on the same database once the replica stopped
   (:mod:`tests.scheduler.stepper`: the real scheduler core, an executor that only records): a
   mapped task over 10,000 items becomes ready, and the statement that expands it
   (:func:`leoflow.db.stores.task_instances.mapping.expand`) and the whole step around it are timed;
   the step's rows share one transaction id (``xmin``), which the row says. ``--expand-repeats``
   (3) runs, the median (target < 1 s for the step).

Prints one JSON object as the last line and saves a PNG (``--png``, default bench/map.png).

    python bench/map.py                     # everything (~2 min on a quiet 2-core host)
    python bench/map.py --repeats 1 --big-repeats 1 --expand-repeats 1   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402

from bench.api import AUTH, database, replica, wait_for  # noqa: E402
from bench.chain import Client, refuse_below_one  # noqa: E402
from leoflow.db import migrations  # noqa: E402
from leoflow.standalone.embedded import free_port  # noqa: E402

ITEMS, BIG_ITEMS = 1_000, 10_000
TRUE_MAX_PARALLEL = 32
TARGETS = {"empty_1000_p50_s": 1.5, "empty_10000_p50_s": 10.0, "rss_growth_mb": 100.0, "true_1000_p50_s": 30.0,
           "expansion_step_s": 1.0}


def pipeline(dag_id: str, items: int, *, true_tasks: bool = False) -> dict[str, Any]:
    """list → process (mapped over ``items`` items) → combine. ``list`` publishes the count: an output
    holds at most 1,000 keys and items in all, so a list of 1,000 partitions does not fit in one."""
    script = f"printf '{{\"n\":{items}}}' > \"$LEOFLOW_OUTPUTS\""
    source: Any = {"count": "{{ tasks.list.outputs.n }}"}
    outputs = {"n": {"type": "integer"}}
    process: dict[str, Any] = {"id": "process", "depends_on": ["list"], "map_over": source}
    if true_tasks:
        process.update(image="local", command=["true"], max_parallel=TRUE_MAX_PARALLEL)
    else:
        process["kind"] = "empty"
    return {"dag_id": dag_id, "max_active_runs": 1, "tasks": [
        {"id": "list", "image": "local", "command": ["sh", "-c", script], "outputs": outputs},
        process,
        {"id": "combine", "depends_on": ["process"], "kind": "empty"}]}


def timed_runs(client: Client, dag_id: str, repeats: int, items: int) -> dict[str, Any]:
    """``repeats`` runs one after the other, trigger → success; checks each expanded to ``items``."""
    walls: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        run_id = client.trigger(dag_id)
        state = client.wait_terminal(dag_id, run_id, timeout=600)
        walls.append(time.perf_counter() - started)
        tasks = client.http.get(f"/api/v2/dags/{dag_id}/runs/{run_id}/tasks", params={"limit": 500},
                                headers=AUTH).json()["items"]
        if state != "success":
            ended = {t["task_id"]: (t["state"], t.get("reason"), t.get("map_states")) for t in tasks}
            raise SystemExit(f"bench/map.py: {dag_id} ended {state}: {ended}")
        [process] = [t for t in tasks if t["task_id"] == "process"]
        if process["map_count"] != items or process["map_states"] != {"success": items}:
            raise SystemExit(f"bench/map.py: {dag_id} expanded to {process['map_count']}: {process['map_states']}")
    return {"items": items, "repeats": repeats, "p50_s": round(statistics.median(walls), 3),
            "min_s": round(min(walls), 3), "max_s": round(max(walls), 3), "_walls": walls}


@contextmanager
def rss_sampler(pid: int, interval: float = 0.05) -> Iterator[list[tuple[float, float]]]:
    """(seconds since start, resident MB) of process ``pid`` every ``interval`` while the block runs."""
    proc = psutil.Process(pid)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        while not stop.is_set():
            try:
                samples.append((time.perf_counter() - t0, proc.memory_info().rss / 2**20))
            except psutil.Error:
                return
            stop.wait(interval)

    thread = threading.Thread(target=sample, name="rss-sampler", daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(timeout=5)


def memory_row(samples: list[tuple[float, float]]) -> dict[str, Any]:
    """Growth from the first sample (just before the runs) to the peak and to the last."""
    if not samples:
        return {"baseline_mb": None, "peak_mb": None, "end_mb": None, "growth_mb": None}
    mbs = [mb for _, mb in samples]
    return {"baseline_mb": round(mbs[0], 1), "peak_mb": round(max(mbs), 1), "end_mb": round(mbs[-1], 1),
            "growth_mb": round(max(mbs) - mbs[0], 1), "samples": len(mbs)}


# --------------------------------------------------------------------------- the expansion, in process

async def expansion(url: str, repeats: int, items: int) -> dict[str, Any]:
    """The step that expands a mapped task over ``items`` items, ``repeats`` times (see the docstring)."""
    from leoflow.db.stores.task_instances import mapping as map_store
    from leoflow.model.tries import StatusUpdate
    from leoflow.settings import load_settings
    from tests.scheduler.harness import rows
    from tests.scheduler.stepper import stepper
    from tests.scheduler.test_conditions import started

    settings = load_settings({"LEOFLOW_DATABASE_URL": url, "LEOFLOW_NODE_ID": "bench-map",
                              "LEOFLOW_LOG_LEVEL": "warning"})
    spec = {"dag_id": "map-expand", "tasks": [
        {"id": "list", "image": "local", "command": ["true"], "outputs": {"n": {"type": "integer"}}},
        {"id": "process", "depends_on": ["list"], "image": "local", "command": ["true", "{{ item }}"],
         # One instance launched at a time: a run's instances never take the slots the next run's list needs.
         "map_over": {"count": "{{ tasks.list.outputs.n }}"}, "max_parallel": 1},
        {"id": "combine", "depends_on": ["process"], "kind": "empty"}]}
    expand = map_store.expand
    timings: list[float] = []

    async def timed_expand(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await expand(*args, **kwargs)
        finally:
            timings.append(time.perf_counter() - t0)

    steps: list[float] = []
    statements: list[float] = []
    transactions: list[int] = []
    map_store.expand = timed_expand  # the scheduler calls it through the module
    try:
        async with stepper(settings, term=10_000) as st:
            for _ in range(repeats):
                run_id = await started(st, spec)
                await st.settle()
                [key] = [la.key for la in st.executor.launched if la.key.run_id == run_id]
                st.core.inbox.append(StatusUpdate(key=key, state="running", at=st.clock.now()))
                st.core.inbox.append(StatusUpdate(key=key, state="success", at=st.clock.now() + timedelta(seconds=1),
                                                  exit_code=0, outputs=json.dumps({"n": items}).encode()))
                timings.clear()
                while not timings:  # the step that records list's success and expands process
                    t0 = time.perf_counter()
                    if not await st.tick():
                        raise SystemExit("bench/map.py: the mapped task never expanded")
                    elapsed = time.perf_counter() - t0
                steps.append(elapsed)
                statements.append(timings[0])
                [(count, xids)] = await rows(st.engine, "SELECT count(*), count(DISTINCT ti.xmin::text) FROM "
                                             "task_instances ti JOIN dag_runs r ON r.id = ti.run_pk WHERE "
                                             "r.run_id = :r AND ti.task_id = 'process'", r=run_id)
                if count != items:
                    raise SystemExit(f"bench/map.py: expanded to {count} instances, not {items}")
                transactions.append(int(xids))
    finally:
        map_store.expand = expand
    return {"items": items, "repeats": repeats, "step_p50_s": round(statistics.median(steps), 3),
            "statement_p50_s": round(statistics.median(statements), 3), "steps_s": [round(s, 3) for s in steps],
            "statements_s": [round(s, 3) for s in statements], "transactions_per_expansion": transactions}


# --------------------------------------------------------------------------- report

def plot(result: dict[str, Any], rss: list[tuple[float, float]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(21, 4.5))
    for ax, key, title, target in ((axes[0], "empty_1000", "1,000 empty instances", TARGETS["empty_1000_p50_s"]),
                                   (axes[1], "empty_10000", "10,000 empty instances", TARGETS["empty_10000_p50_s"]),
                                   (axes[2], "true_1000", "1,000 `true` (max_parallel 32)",
                                    TARGETS["true_1000_p50_s"])):
        walls = result[key].pop("_walls")
        ax.bar(range(1, len(walls) + 1), walls)
        ax.axhline(target, color="red", linestyle="--", label=f"p50 target {target} s")
        ax.set(title=f"list → {title} → combine\ntrigger → success, p50 {result[key]['p50_s']} s",
               xlabel="run", ylabel="s")
        ax.legend()
    if rss:
        axes[3].plot([t for t, _ in rss], [mb for _, mb in rss], label="replica RSS")
        axes[3].axhline(rss[0][1] + TARGETS["rss_growth_mb"], color="red", linestyle="--", label="+100 MB")
    exp = result["expansion"]
    axes[3].set(title=f"Replica RSS, 10,000-item runs: +{result['memory']['growth_mb']} MB\n"
                f"expanding {exp['items']:,}: step {exp['step_p50_s']} s (statement {exp['statement_p50_s']} s)",
                xlabel="s", ylabel="MB")
    axes[3].legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="runs of the 1,000-item empty map (default 5)")
    parser.add_argument("--big-repeats", type=int, default=3, help="runs of the 10,000-item empty map (default 3)")
    parser.add_argument("--true-repeats", type=int, default=1, help="runs of the 1,000 `true` map (default 1)")
    parser.add_argument("--expand-repeats", type=int, default=3, help="timed expansions of 10,000 (default 3)")
    parser.add_argument("--database-url", help="use this database instead of a private embedded one")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "map.png")
    args = parser.parse_args(argv)
    refuse_below_one(parser, args, ("repeats", "big_repeats", "true_repeats", "expand_repeats"))
    return args


def targets(result: dict[str, Any]) -> dict[str, bool]:
    return {
        "empty_1000_p50<1.5s": result["empty_1000"]["p50_s"] < TARGETS["empty_1000_p50_s"],
        "empty_10000_p50<10s": result["empty_10000"]["p50_s"] < TARGETS["empty_10000_p50_s"],
        "rss_growth<100MB": (result["memory"]["growth_mb"] or 0) < TARGETS["rss_growth_mb"],
        "true_1000_p50<30s": result["true_1000"]["p50_s"] < TARGETS["true_1000_p50_s"],
        "expansion_step<1s_in_one_transaction": (result["expansion"]["step_p50_s"] < TARGETS["expansion_step_s"]
                                                 and set(result["expansion"]["transactions_per_expansion"]) == {1}),
    }


def measure(url: str, args: argparse.Namespace) -> tuple[dict[str, Any], list[tuple[float, float]]]:
    """Rows 1-4 against the database at ``url``; returns the result and the memory samples."""
    home = Path(tempfile.mkdtemp(prefix="leoflow-bench-map-"))
    result: dict[str, Any] = {"benchmark": "map"}
    port = free_port()
    env = {"LEOFLOW_EXECUTOR": "local", "LEOFLOW_HOME": str(home),
           "LEOFLOW_LOCAL_PARALLELISM": str(TRUE_MAX_PARALLEL), "LEOFLOW_PARALLELISM": "128"}
    with replica(url, port, env) as proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        wait_for(lambda: http.get("/readyz").status_code == 200, "the replica to be ready")
        client = Client(http, url)
        for dag_id, items, true_tasks in (("map-empty-1000", ITEMS, False), ("map-empty-10000", BIG_ITEMS, False),
                                          ("map-true-1000", ITEMS, True)):
            client.apply(pipeline(dag_id, items, true_tasks=true_tasks))
        timed_runs(client, "map-empty-1000", 1, ITEMS)  # warm-up: first-run caches, page faults
        result["empty_1000"] = timed_runs(client, "map-empty-1000", args.repeats, ITEMS)
        with rss_sampler(proc.pid) as rss:
            result["empty_10000"] = timed_runs(client, "map-empty-10000", args.big_repeats, BIG_ITEMS)
        result["memory"] = memory_row(rss)
        result["true_1000"] = {"max_parallel": TRUE_MAX_PARALLEL,
                               **timed_runs(client, "map-true-1000", args.true_repeats, ITEMS)}
        client.db.close()
    result["expansion"] = asyncio.run(expansion(url, args.expand_repeats, BIG_ITEMS))
    return result, rss


def main() -> int:
    args = parse_args()
    with database(args.database_url) as url:
        migrations.upgrade(url)
        result, rss = measure(url, args)
    result["targets"] = targets(result)
    host_load = psutil.getloadavg()[0]
    result["host"] = {"cpus": psutil.cpu_count(), "loadavg_1m_end": round(host_load, 1)}
    plot(result, rss, args.png)
    result["png"] = str(args.png)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
