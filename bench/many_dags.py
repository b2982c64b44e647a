"""Many DAGs due at one minute boundary (issue 45): how long until every one has its run, and it succeeded?

Real installs put hundreds or thousands of DAGs on ``0 0 * * *``; before the scheduler created
due runs set-based, 1,000 DAGs due at one minute waited 10.4 s for their runs and 5,000 took
62 s, longer than the minute itself. For each ``--dags`` size this:

1. starts a private embedded PostgreSQL (or uses ``--database-url``) and stores N DAGs on
   ``* * * * *``, ``catchup: false``, one ``kind: empty`` task each (``--seed sql``: the rows
   ``apply_dag`` writes, set-based; ``--seed store``: ``dag_store.apply_dag`` itself, 500 per
   transaction, 17 a second on a busy 2-core host), and reports the rate;
2. starts one real ``leoflow serve`` replica (``--executor``, local by default, ``LEOFLOW_HOME``
   in a temp dir) and waits until it leads;
3. picks the next minute boundary at least ``--slack`` seconds ahead on the database's clock and
   sets every DAG's ``next_run_at`` to it, in one statement (what applying them with that
   boundary as ``start_date`` would store; applying 10,000 takes longer than a minute, so the
   boundary cannot be known before they are stored);
4. for that boundary and the next ``--boundaries`` - 1 (the first comes seconds after the replica
   started and the DAGs were moved to it — the leader compiles their graphs meanwhile if it has
   time — the next a minute later, every graph cached), polls the database every 0.25 s until
   every DAG has a successful run
   for the boundary's slot (or a later one, if the scheduler reached it only after the next
   boundary: ``catchup: false`` runs the latest due slot; counted as ``slot_skipped``), and
   reports, from the runs' own timestamps (``created_at``, ``started_at``, ``ended_at``) minus
   the boundary, the last and the p50/p99 run created (queued), started and succeeded — these
   are the start of the scheduler step that wrote them — and, polled, when every DAG's run was
   first seen created and succeeded (the steps' commits); and the replica's CPU seconds meanwhile.

With ``--idle N`` it also stores N DAGs none of which is due (``next_run_at`` in 2100), starts a
replica, lets it settle for ``--idle-settle`` s and reports the leader's CPU over ``--idle-seconds``
(per cent of one core: user + system from ``/proc``) and, on that replica, ``--list-requests``
sequential ``GET /api/v2/dags?limit=100`` over one keep-alive connection after 20 warm-up requests
(client-side p50/p99; bench/dag_list.py measures every filter). With ``--sync N`` it writes N DAG
files (YAML, one ``kind: empty`` task each) and times ``leoflow dags sync`` of the directory
against a replica on an empty database (one request, all or nothing, within the sync's own
``LEOFLOW_SYNC_MAX_BODY_BYTES``), then checks that N DAGs are stored, with the replica's and the
CLI's CPU seconds beside the wall clock. With ``--airflow`` it runs bench/airflow_many_dags.py (Airflow 2.10.5, the same
1,000 DAGs at one boundary) after the Leoflow sizes and sets the two side by side: Airflow's last
run succeeded (its ``end_date``) over the moment every Leoflow run was seen succeeded (polled).

The host's load average (1, 5, 15 min) is part of the result: on a shared host the figures
move with it. Targets (issue 45): 10,000 DAGs due at one minute, every run queued by p99 < 1 s
and succeeded < 3 s; 100,000 idle DAGs cost the leader < 5 % of a core; ``dags sync`` of 10,000
files < 30 s; the list's p99 < 20 ms at 100,000 DAGs; Airflow at least 50x slower at 1,000.

    python bench/many_dags.py                       # 1,000 DAGs, two boundaries (~2.5 min)
    python bench/many_dags.py --dags 1000 10000     # both sizes (~6 min)
    python bench/many_dags.py --dags 1000 10000 --idle 100000 --sync 10000 --airflow   # every row (~30 min)

Prints one JSON object as the last line and saves a PNG (``--png``, default bench/many_dags.png):
per size, the share of runs created and succeeded against the seconds after the boundary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from bench.api import AUTH, TOKEN, database, replica, wait_for  # noqa: E402
from bench.chain import refuse_below_one  # noqa: E402
from bench.scheduler import percentile  # noqa: E402
from leoflow.db import migrations  # noqa: E402
from leoflow.standalone.embedded import free_port  # noqa: E402

#: DAGs applied per transaction while seeding (the store's own statements, one DAG at a time).
APPLY_BATCH = 500
#: Far enough ahead that no DAG is due while the rest are applied and the replica starts.
PARKED = datetime(2100, 1, 1, tzinfo=UTC)
MAX_DAGS = 100_000
#: Seconds between polls of the runs: each costs 8-12 ms of the database's time at 10,000 DAGs, which
#: ten a second took from the two cores the scheduler it measures runs on (the runs' own timestamps,
#: not the polls, give the table's figures; the polled ones are this much coarser).
POLL = 0.25
TARGETS = {"queued_p99_s": 1.0, "succeeded_last_s": 3.0, "idle_cpu_percent": 5.0, "sync_s": 30.0,
           "list_p99_ms": 20.0, "vs_airflow": 50.0}
WARMUP = 20


def spec(dag_id: str, start: datetime = PARKED) -> dict[str, Any]:
    return {"dag_id": dag_id, "schedule": "* * * * *", "catchup": False, "max_active_runs": 1,
            "start_date": start.isoformat(), "tasks": [{"id": "t", "kind": "empty"}]}


def apply_dags(url: str, count: int, seed: str) -> float:
    """Store ``count`` DAGs; returns the seconds it took.

    ``store``: ``dag_store.apply_dag`` for each, ``APPLY_BATCH`` per transaction (what the API
    does per request). ``sql``: the same rows (spec, hash and default conf computed by the
    model for each DAG) inserted set-based, three statements per ``APPLY_BATCH * 10`` DAGs, for
    sizes the store path would take minutes to apply on a busy host.
    """
    started = time.perf_counter()
    if seed == "store":
        asyncio.run(_apply_through_store(url, count))
    else:
        _insert_rows(url, count)
    return time.perf_counter() - started


async def _apply_through_store(url: str, count: int) -> None:
    from leoflow.clock import SystemClock
    from leoflow.db.connection.engine import make_async_engine
    from leoflow.db.stores import dags as dag_store
    from leoflow.model.spec.dag import parse_dag_spec
    from leoflow.settings import DatabaseSettings

    engine = make_async_engine(DatabaseSettings(url=url), pool_size=1)
    try:
        for first in range(0, count, APPLY_BATCH):
            async with engine.begin() as conn:
                for i in range(first, min(count, first + APPLY_BATCH)):
                    await dag_store.apply_dag(conn, parse_dag_spec(spec(f"many-{i:06d}")), clock=SystemClock())
    finally:
        await engine.dispose()


def _insert_rows(url: str, count: int) -> None:
    from leoflow.model.spec.dag import parse_dag_spec
    from leoflow.model.spec.params import default_conf
    from leoflow.model.spec.timetable import first_scheduled_run

    now = datetime.now(UTC)
    # The DAGs differ in their id alone: validated once (parsing 100,000 took minutes on a busy host),
    # each one's canonical form and hash still computed from its own spec.
    model = parse_dag_spec(spec("many-000000"))
    with psycopg.connect(url, autocommit=True) as db:
        for first in range(0, count, APPLY_BATCH * 10):
            specs = [replace(model, dag_id=f"many-{i:06d}") for i in range(first, min(count, first + APPLY_BATCH * 10))]
            with db.transaction():
                db.execute("""
                    INSERT INTO dags (dag_id, paused, schedule, next_run_at, max_active_tasks)
                    SELECT * FROM unnest(%s::text[], %s::boolean[], %s::text[], %s::timestamptz[], %s::int[])""",
                           ([s.dag_id for s in specs], [s.paused for s in specs], [s.schedule for s in specs],
                            [first_scheduled_run(s, now) for s in specs], [s.max_active_tasks for s in specs]))
                db.execute("""
                    INSERT INTO dag_versions (dag_id, version, spec, spec_hash, default_conf)
                    SELECT d, 1, s::jsonb, h, c::jsonb FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[])
                        AS x(d, s, h, c)""",
                           ([s.dag_id for s in specs], [json.dumps(s.to_canonical()) for s in specs],
                            [s.spec_hash() for s in specs], [json.dumps(default_conf(s.params)) for s in specs]))
                db.execute("UPDATE dags d SET current_version_id = v.id FROM dag_versions v "
                           "WHERE v.dag_id = d.dag_id AND d.current_version_id IS NULL")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def set_boundary(db: psycopg.Connection[Any], slack: float) -> datetime:
    """The next minute boundary at least ``slack`` s ahead (database clock), as every DAG's next run."""
    row = db.execute("SELECT date_trunc('minute', now() + make_interval(secs => %s)) + interval '1 minute'",
                     (slack,)).fetchone()
    assert row is not None
    boundary: datetime = row[0]
    db.execute("UPDATE dags SET next_run_at = %s WHERE dag_id LIKE 'many-%%'", (boundary,))
    return boundary


def run_id_at(boundary: datetime) -> str:
    return f"scheduled__{boundary.astimezone(UTC).isoformat()}"


def watch(db: psycopg.Connection[Any], boundary: datetime, count: int, timeout: float) -> dict[str, float | None]:
    """Poll (every ``POLL`` s) until every DAG has a successful run for the boundary's slot or a
    later one (a DAG reached only after the next boundary gets that slot instead: ``catchup: false``
    runs the latest due slot); when each phase was first seen complete, in seconds after the
    boundary on this host's clock (None: not within ``timeout``).

    The runs' own timestamps are the scheduler step's start (a step stamps what it writes with
    one time), so they say how soon the step began; these say when its commit was visible."""
    seen: dict[str, float | None] = {"created": None, "succeeded": None}
    # Only runs newer than every run that exists before the boundary (a primary-key range): the poll
    # scanned every run of every earlier boundary, 18 ms of database time ten times a second on the
    # two cores the scheduler measured here needs (a sixth of the database's time at 10,000 DAGs).
    floor = db.execute("SELECT coalesce(max(id), 0) FROM dag_runs").fetchone()
    assert floor is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = db.execute("SELECT count(DISTINCT dag_id), count(DISTINCT dag_id) FILTER (WHERE state = 'success') "
                         "FROM dag_runs WHERE id > %s AND run_type = 'scheduled' AND logical_date >= %s",
                         (floor[0], boundary)).fetchone()
        after = (datetime.now(UTC) - boundary).total_seconds()
        assert row is not None
        for name, value in zip(seen, row, strict=True):
            if seen[name] is None and value >= count:
                seen[name] = round(after, 3)
        if seen["succeeded"] is not None:
            break
        time.sleep(POLL)
    return seen


def offsets(db: psycopg.Connection[Any], boundary: datetime) -> dict[str, list[float]]:
    """Seconds after the boundary at which each run was created, started and ended (sorted)."""
    rows = db.execute("""
        SELECT extract(epoch FROM created_at - %(b)s), extract(epoch FROM started_at - %(b)s),
               extract(epoch FROM ended_at - %(b)s)
        FROM dag_runs WHERE run_id = %(r)s""", {"b": boundary, "r": run_id_at(boundary)}).fetchall()
    return {name: sorted(float(r[i]) for r in rows if r[i] is not None)
            for i, name in enumerate(("created", "started", "succeeded"))}


def summary_of(seconds: dict[str, list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, values in seconds.items():
        out[name] = {"runs": len(values), "p50_s": round(percentile(values, 0.5) or 0.0, 3),
                     "p99_s": round(percentile(values, 0.99) or 0.0, 3),
                     "last_s": round(values[-1], 3) if values else None}
    return out


def one_size(args: argparse.Namespace, count: int) -> tuple[dict[str, Any], dict[str, dict[str, list[float]]]]:
    home = Path(tempfile.mkdtemp(prefix="leoflow-bench-many-dags-"))
    boundaries: list[dict[str, Any]] = []
    curves: dict[str, dict[str, list[float]]] = {}
    with database(args.database_url) as url:
        migrations.upgrade(url)
        apply_seconds = apply_dags(url, count, args.seed)
        port = free_port()
        env = {"LEOFLOW_EXECUTOR": args.executor, "LEOFLOW_HOME": str(home), "LEOFLOW_LOCAL_PARALLELISM": "8"}
        with replica(url, port, env) as proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http, \
                psycopg.connect(url, autocommit=True) as db:
            wait_for(lambda: http.get("/readyz").status_code == 200, "the replica to be ready")
            wait_for(lambda: http.get("/api/v2/cluster/leader", headers=AUTH).status_code == 200, "a leader")
            first = set_boundary(db, args.slack)
            for k in range(args.boundaries):
                boundary = first + timedelta(minutes=k)
                load_before = os.getloadavg()
                time.sleep(max(0.0, (boundary - datetime.now(UTC)).total_seconds() - 1.0))
                cpu_before = process_cpu_seconds(proc.pid)
                polled = watch(db, boundary, count, args.timeout)
                cpu = process_cpu_seconds(proc.pid) - cpu_before
                seconds = offsets(db, boundary)
                curves[f"{count:,} DAGs, boundary {k + 1}"] = seconds
                boundaries.append({
                    "boundary": boundary.isoformat(), "all_succeeded": polled["succeeded"] is not None,
                    "slot_skipped": count - len(seconds["created"]), **summary_of(seconds),
                    "polled_all_created_s": polled["created"], "polled_all_succeeded_s": polled["succeeded"],
                    "replica_cpu_seconds": round(cpu, 2), "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]})
    return {"dags": count, "seed": args.seed, "apply_seconds": round(apply_seconds, 1),
            "apply_per_second": round(count / apply_seconds, 1), "boundaries": boundaries}, curves


def idle(args: argparse.Namespace) -> dict[str, Any]:
    """``args.idle`` DAGs stored, none due: the leader's CPU, and the DAG list's latency on it."""
    home = Path(tempfile.mkdtemp(prefix="leoflow-bench-many-dags-idle-"))
    with database(None) as url:
        migrations.upgrade(url)
        apply_seconds = apply_dags(url, args.idle, "sql")
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("UPDATE dags SET next_run_at = %s WHERE dag_id LIKE 'many-%%'", (PARKED,))
            db.execute("ANALYZE")
        port = free_port()
        env = {"LEOFLOW_EXECUTOR": args.executor, "LEOFLOW_HOME": str(home)}
        with replica(url, port, env) as proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            wait_for(lambda: http.get("/readyz").status_code == 200, "the replica to be ready")
            wait_for(lambda: http.get("/api/v2/cluster/leader", headers=AUTH).status_code == 200, "a leader")
            time.sleep(args.idle_settle)
            load_before = os.getloadavg()
            cpu_before, started = process_cpu_seconds(proc.pid), time.monotonic()
            time.sleep(args.idle_seconds)
            cpu = process_cpu_seconds(proc.pid) - cpu_before
            wall = time.monotonic() - started
            load_idle = os.getloadavg()
            latencies = []
            for i in range(WARMUP + args.list_requests):
                began = time.perf_counter()
                answer = http.get("/api/v2/dags", params={"limit": 100}, headers=AUTH)
                if i >= WARMUP:
                    latencies.append((time.perf_counter() - began) * 1000)
                answer.raise_for_status()
            items = len(answer.json()["items"])
    latencies.sort()
    return {"dags": args.idle, "apply_seconds": round(apply_seconds, 1), "seconds": round(wall, 1),
            "leader_cpu_seconds": round(cpu, 2), "leader_cpu_percent": round(100 * cpu / wall, 2),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_idle],
            "list": {"requests": len(latencies), "items": items,
                     "p50_ms": round(percentile(latencies, 0.5) or 0.0, 1),
                     "p99_ms": round(percentile(latencies, 0.99) or 0.0, 1),
                     "load_average_after": [round(x, 2) for x in os.getloadavg()]}}


def sync(args: argparse.Namespace) -> dict[str, Any]:
    """``leoflow dags sync`` of ``args.sync`` files against a replica on an empty database."""
    import yaml

    home = Path(tempfile.mkdtemp(prefix="leoflow-bench-many-dags-sync-"))
    folder = home / "dags"
    folder.mkdir()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(args.sync):
        dag_id = f"sync-{i:06d}"
        (folder / f"{dag_id}.yaml").write_text(yaml.safe_dump(spec(dag_id, start)))
    with database(None) as url:
        migrations.upgrade(url)
        port = free_port()
        # 10,000 files are ~2 MB of JSON: over the 1 MiB every other route takes, within the
        # sync's own LEOFLOW_SYNC_MAX_BODY_BYTES (64 MiB by default; ``--sync-body-bytes``).
        env = {"LEOFLOW_EXECUTOR": args.executor, "LEOFLOW_HOME": str(home / "home"),
               "LEOFLOW_SYNC_MAX_BODY_BYTES": str(args.sync_body_bytes)}
        with replica(url, port, env) as proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            wait_for(lambda: http.get("/readyz").status_code == 200, "the replica to be ready")
            load_before = os.getloadavg()
            cli_env = {**{k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")},
                       "LEOFLOW_URL": f"http://127.0.0.1:{port}", "LEOFLOW_TOKEN": TOKEN}
            # CPU seconds beside the wall clock: on a loaded shared host the wall clock is mostly waiting.
            replica_cpu, cli_cpu = process_cpu_seconds(proc.pid), resource.getrusage(resource.RUSAGE_CHILDREN)
            began = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "leoflow", "dags", "sync", str(folder), "-o", "json"],
                                  env=cli_env, capture_output=True, text=True, timeout=args.timeout)
            seconds = time.perf_counter() - began
            replica_cpu = process_cpu_seconds(proc.pid) - replica_cpu
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cli_cpu_s = after.ru_utime + after.ru_stime - cli_cpu.ru_utime - cli_cpu.ru_stime
            with psycopg.connect(url, autocommit=True) as db:
                row = db.execute("SELECT count(*) FROM dags WHERE dag_id LIKE 'sync-%%' AND NOT deleted").fetchone()
    assert row is not None
    return {"files": args.sync, "ok": done.returncode == 0 and row[0] == args.sync, "seconds": round(seconds, 1),
            "replica_cpu_seconds": round(replica_cpu, 2), "cli_cpu_seconds": round(cli_cpu_s, 2),
            "dags_stored": int(row[0]), "error": done.stderr.strip()[-500:] if done.returncode else None,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def vs_airflow(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """bench/airflow_many_dags.py's 1,000 DAGs, beside this run's 1,000 (its best boundary).

    Leoflow's figure is the poll's (every run seen succeeded, committed: up to ``POLL`` late), not
    its runs' timestamps, which are the start of the step that wrote them (one step may write all
    1,000 and commit seconds later on a loaded host); Airflow's is its runs' ``end_date``, written
    as each run ends. The ratio is therefore the conservative one for Leoflow."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "airflow_many_dags.py"), "--dags", "1000"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"ok": False, "error": done.stderr.strip()[-1000:]}
    airflow = json.loads(done.stdout.strip().splitlines()[-1])
    ours = next((s for s in sizes if s["dags"] == 1000), None)
    leoflow_s = min((b["polled_all_succeeded_s"] for b in ours["boundaries"] if b["all_succeeded"]),
                    default=None) if ours else None
    airflow_s = airflow["succeeded"]["last_s"]
    return {"ok": True, "dags": 1000, "airflow": airflow, "leoflow_last_succeeded_s": leoflow_s,
            "airflow_last_succeeded_s": airflow_s,
            "ratio": round(airflow_s / leoflow_s, 1) if leoflow_s and airflow_s else None}


def plot(curves: dict[str, dict[str, list[float]]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, seconds in curves.items():
        count = int(label.split()[0].replace(",", ""))
        for name, style in (("created", "--"), ("succeeded", "-")):
            values = seconds[name]
            ax.step(values, [100 * (i + 1) / count for i in range(len(values))], style, where="post",
                    label=f"{label}: runs {name}")
    ax.axvline(TARGETS["queued_p99_s"], color="grey", linestyle=":", label="1 s")
    ax.set(xlabel="seconds after the minute boundary (database timestamps)", ylabel="% of the DAGs' runs",
           title="DAGs due at one minute boundary: runs created and succeeded")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dags", type=int, nargs="+", default=[1_000], help="DAGs due at the boundary, per size")
    parser.add_argument("--executor", choices=("local", "memory"), default="local")
    parser.add_argument("--seed", choices=("sql", "store"), default="sql",
                        help="store the DAGs set-based (sql, default) or through dag_store.apply_dag (store)")
    parser.add_argument("--boundaries", type=int, default=2,
                        help="consecutive minute boundaries measured (default 2: the first after the replica "
                             "started, its graph cache cold, and the next)")
    parser.add_argument("--slack", type=float, default=5.0,
                        help="least seconds between the replica leading and the boundary (default 5)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds after the boundary to give up")
    parser.add_argument("--database-url", help="use this (empty) database instead of a private embedded one")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "many_dags.png")
    parser.add_argument("--idle", type=int, default=0, help="also: this many DAGs stored, none due (0: skip)")
    parser.add_argument("--idle-settle", type=float, default=15.0, help="seconds before the idle CPU is measured")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="seconds the idle CPU is measured over")
    parser.add_argument("--list-requests", type=int, default=500, help="DAG list requests timed with --idle")
    parser.add_argument("--sync", type=int, default=0, help="also: dags sync of this many files (0: skip)")
    parser.add_argument("--sync-body-bytes", type=int, default=64 * 1024 * 1024,
                        help="LEOFLOW_SYNC_MAX_BODY_BYTES of the sync's replica (default 64 MiB, the server's)")
    parser.add_argument("--airflow", action="store_true",
                        help="also: bench/airflow_many_dags.py's 1,000 DAGs, side by side with --dags 1000")
    args = parser.parse_args(argv)
    refuse_below_one(parser, args, ("slack", "timeout", "boundaries", "idle_seconds", "list_requests"))
    if not 0 <= args.idle <= MAX_DAGS or not 0 <= args.sync <= MAX_DAGS:
        parser.error(f"--idle and --sync: 0..{MAX_DAGS:,}")
    if args.airflow and 1000 not in args.dags:
        parser.error("--airflow compares with --dags 1000: include that size")
    if any(n < 1 or n > MAX_DAGS for n in args.dags):
        parser.error(f"--dags: each size must be 1..{MAX_DAGS:,}")
    if args.database_url and len(args.dags) > 1:
        parser.error("--database-url takes one --dags size (each size needs an empty database)")
    return args


def main() -> int:
    args = parse_args()
    sizes: list[dict[str, Any]] = []
    curves: dict[str, dict[str, list[float]]] = {}
    for count in args.dags:
        result, more = one_size(args, count)
        sizes.append(result)
        curves.update(more)
    plot(curves, args.png)
    largest = sizes[-1]
    last = largest["boundaries"][-1]
    targets: dict[str, bool] = {
        f"{largest['dags']}_dags_queued_p99<1s": (last["created"]["p99_s"] or 0) < TARGETS["queued_p99_s"],
        f"{largest['dags']}_dags_succeeded_last<3s": last["all_succeeded"] and last["slot_skipped"] == 0
        and (last["polled_all_succeeded_s"] or 0) < TARGETS["succeeded_last_s"]}
    out: dict[str, Any] = {"benchmark": "many_dags", "executor": args.executor, "cpus": os.cpu_count(),
                           "sizes": sizes}
    if args.idle:
        out["idle"] = idle(args)
        idle_cpu = out["idle"]["leader_cpu_percent"]
        targets[f"{args.idle}_idle_dags_leader_cpu<5%"] = idle_cpu < TARGETS["idle_cpu_percent"]
        targets[f"list_at_{args.idle}_dags_p99<20ms"] = out["idle"]["list"]["p99_ms"] < TARGETS["list_p99_ms"]
    if args.sync:
        out["sync"] = sync(args)
        targets[f"sync_{args.sync}_files<30s"] = out["sync"]["ok"] and out["sync"]["seconds"] < TARGETS["sync_s"]
    if args.airflow:
        out["vs_airflow"] = vs_airflow(sizes)
        targets["1000_dags_vs_airflow>=50x"] = (out["vs_airflow"].get("ratio") or 0) >= TARGETS["vs_airflow"]
    print(json.dumps({**out, "targets": targets, "png": str(args.png)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
