"""Executor benchmark: pods/s created and reconciled through the official client (issue 5).

Setup: a private embedded PostgreSQL (or ``--database-url``) with ``--tasks`` queued task tries
(default 5,000) seeded in bulk, and the fake Kubernetes API server as a *separate process*
(``python -m tests.harness.fake_k8s``), reached through a generated kubeconfig, so the server's
CPU is not charged to the executor. Every pod runs ``true``.

1. **Create**: one ``KubernetesExecutor`` (``--concurrency`` API workers, default 16) is
   started and handed every try. Each create is the real path: a fenced, batched ``record_launches``
   transaction, then ``POST`` pods. Measures pods/s created (201s over the phase) and how long
   until every try was reported finished through the watch.
2. **Reconcile**: that executor stops (leader lost); a new one under the next term starts and
   reconciles: lists all pods by label (paginated), maps them to their tries in the database and
   adopts them. Measures pods/s reconciled; checks that no pod was created twice.

Target: >= 200 pods/s created, with bounded concurrency. Prints one JSON object as the last line
and saves ``bench/executor.png`` (or ``--png``).

    python bench/executor.py                  # 5,000 tasks
    python bench/executor.py --tasks 1000     # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine  # noqa: E402

from leoflow.db.connection.database import Database  # noqa: E402
from leoflow.db.connection.engine import make_async_engine  # noqa: E402
from leoflow.leadership import LeaderContext  # noqa: E402
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey  # noqa: E402
from leoflow.settings import load_settings  # noqa: E402

DAG, RUN = "bench", "bench-run"


@contextlib.contextmanager
def database(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from leoflow.db import migrations
    from tests.harness.postgres import private_server, with_dbname

    with private_server(fast_unsafe=True) as pg:
        import psycopg

        with psycopg.connect(pg.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        bench_url = with_dbname(pg.url(), "bench")
        migrations.upgrade(bench_url)
        yield bench_url


@contextlib.contextmanager
def fake_server(kubeconfig: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.harness.fake_k8s", "--kubeconfig", str(kubeconfig),
                             "--namespace", "bench", "--startup-delay", "0.01"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"fake API server did not start: {line!r}")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def seed(engine: AsyncEngine, n: int) -> list[int]:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO cluster_leadership (cluster, term, node_id) VALUES ('default', 1, 'b') "
                                "ON CONFLICT (cluster) DO UPDATE SET term = 1"))
        await conn.execute(text(f"INSERT INTO dags (dag_id) VALUES ('{DAG}')"))
        version = (await conn.execute(text(f"INSERT INTO dag_versions (dag_id, version, spec, spec_hash) "
                                           f"VALUES ('{DAG}', 1, '{{}}', 'x') RETURNING id"))).scalar_one()
        run_pk = (await conn.execute(text(
            f"INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type) VALUES ('{DAG}', '{RUN}', :v, "
            "'manual') RETURNING id"), {"v": version})).scalar_one()
        await conn.execute(text(
            "INSERT INTO task_instances (run_pk, task_id, state, try_number) "
            "SELECT :r, 't' || i, 'queued', 1 FROM generate_series(0, :n - 1) i"), {"r": run_pk, "n": n})
        rows = await conn.execute(text(
            "INSERT INTO task_tries (task_instance_id, try_number, term) "
            "SELECT id, 1, 1 FROM task_instances WHERE run_pk = :r ORDER BY id RETURNING id"), {"r": run_pk})
        return [r[0] for r in rows]


async def bench(url: str, kubeconfig: Path, args: argparse.Namespace) -> dict[str, Any]:
    os.environ["KUBECONFIG"] = str(kubeconfig)
    settings = load_settings({"LEOFLOW_DATABASE_URL": url, "LEOFLOW_NODE_ID": "bench", "LEOFLOW_LOG_FORMAT": "text",
                              "LEOFLOW_EXECUTOR": "kubernetes", "LEOFLOW_LOG_LEVEL": "warning"})
    from leoflow.executor.kubernetes.executor import KubernetesExecutor
    from leoflow.metrics.executor import POD_CREATE_CONFLICTS, PODS_CREATED

    engine = make_async_engine(settings.database, pool_size=args.concurrency + 4)
    ids = await seed(engine, args.tasks)
    finals: dict[TryKey, float] = {}
    first_running: dict[TryKey, float] = {}

    async def report(update: StatusUpdate) -> None:
        if update.state == "running":
            first_running.setdefault(update.key, time.monotonic())
        else:
            finals.setdefault(update.key, time.monotonic())

    ex = KubernetesExecutor(settings, concurrency=args.concurrency, resync_interval=3600)
    await ex.start(LeaderContext(1, settings, Database(engine)), report)
    created_at: list[float] = []
    before = PODS_CREATED._value.get()
    load_before = os.getloadavg()[0]
    cpu0 = os.times()
    t0 = time.monotonic()
    for i, task_try_id in enumerate(ids):
        key = TryKey(DAG, RUN, f"t{i}", 1)
        await ex.submit(TaskLaunch(key=key, task_try_id=task_try_id, term=1, image="busybox", command=["true"]))
    submitted = time.monotonic() - t0
    last = -1.0
    while PODS_CREATED._value.get() - before < args.tasks:
        count = PODS_CREATED._value.get() - before
        if count != last:
            created_at.append(time.monotonic() - t0)
            last = count
        await asyncio.sleep(0.05)
        if time.monotonic() - t0 > args.timeout:
            raise RuntimeError(f"only {count} of {args.tasks} pods created in {args.timeout}s")
    create_seconds = time.monotonic() - t0
    cpu1 = os.times()
    samples = _samples(ex, t0)
    while len(finals) < args.tasks and time.monotonic() - t0 < args.timeout:
        await asyncio.sleep(0.05)
    all_final = time.monotonic() - t0
    await ex.stop()

    async with engine.begin() as conn:
        await conn.execute(text("UPDATE cluster_leadership SET term = 2 WHERE cluster = 'default'"))
    adopted: dict[TryKey, str] = {}

    async def report2(update: StatusUpdate) -> None:
        adopted[update.key] = update.state

    conflicts_before = POD_CREATE_CONFLICTS._value.get()
    ex2 = KubernetesExecutor(settings, concurrency=args.concurrency, resync_interval=3600)
    t1 = time.monotonic()
    await ex2.start(LeaderContext(2, settings, Database(engine)), report2)
    reconcile_seconds = time.monotonic() - t1
    await ex2.stop()
    await engine.dispose()
    return {
        "tasks": args.tasks, "concurrency": args.concurrency,
        "submit_seconds": round(submitted, 3),
        "create_seconds": round(create_seconds, 3),
        "pods_created_per_s": round(args.tasks / create_seconds, 1),
        "all_reported_final_seconds": round(all_final, 3), "reported_final": len(finals),
        "reconcile_seconds": round(reconcile_seconds, 3),
        "pods_reconciled_per_s": round(args.tasks / reconcile_seconds, 1),
        "adopted_and_reported": len(adopted),
        "pods_created_total": int(PODS_CREATED._value.get() - before),
        "create_conflicts": int(POD_CREATE_CONFLICTS._value.get() - conflicts_before),
        "target_pods_per_s": 200,
        "executor_cpu_ms_per_pod_created": round(1000 * ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system))
                                                 / args.tasks, 2),
        "cpus": os.cpu_count(), "load_avg_1m": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "_series": samples,
    }


def _samples(ex: Any, t0: float) -> list[float]:
    times = sorted(t.created_at - t0 for t in ex._tracked.values() if t.created_at is not None)
    return times


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = result["_series"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(times, range(1, len(times) + 1), label="pods created (cumulative)")
    if times:
        a.plot([0, times[-1]], [0, 200 * times[-1]], "--", label="200 pods/s target")
    a.set_xlabel("seconds since first submit")
    a.set_ylabel("pods")
    a.set_title(f"create: {result['pods_created_per_s']} pods/s ({result['concurrency']} workers)")
    a.legend()
    b.bar(["created", "reconciled"], [result["pods_created_per_s"], result["pods_reconciled_per_s"]])
    b.axhline(200, color="red", linestyle="--", label="target")
    b.set_ylabel("pods/s")
    b.set_title(f"{result['tasks']} tasks via the official client → fake API server")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--database-url")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "executor.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="leoflow-bench-exec-") as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        with database(args.database_url) as url, fake_server(kubeconfig):
            result = asyncio.run(bench(url, kubeconfig, args))
    plot(result, args.png)
    result.pop("_series")
    result["png"] = str(args.png)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
