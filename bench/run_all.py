"""Run the benchmarks, keep their figures, and write ``docs/benchmarks.md`` from them.

    python bench/run_all.py                         # every benchmark of BENCHMARKS, one after another
    python bench/run_all.py --only chaos --chaos-duration 600
    python bench/run_all.py --render-only           # rewrite the page from today's results

Each benchmark is a script under ``bench/`` that prints one JSON object as the last line of its
stdout (and saves a PNG). This runner executes them one after another (they share a 2-core
machine; running them together would measure contention), passes ``--png``/``--plot`` when the
script accepts one so the plot lands in ``bench/results/``, and merges the outcome into
``bench/results/<UTC date>.json`` (re-running one benchmark replaces only its entry). The page
is rendered from that file alone: every figure in it was measured by the command shown next to
it, nothing is typed in by hand. A benchmark that fails or prints no JSON is recorded as such,
with the tail of its stderr, and the runner exits 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
BENCHMARKS = ("failover", "scheduler", "executor", "api", "chaos", "retention", "chain", "cli", "run_starts", "map",
              "datasets", "waits", "tracing", "log_archive")
#: Page titles name what a benchmark measures (the page is for users, not for the tracker).
TITLES = {"failover": "Leader failover: handover and resumption after crashes and SIGTERMs",
          "scheduler": "Scheduler throughput, dependency latency and leader memory",
          "executor": "Kubernetes executor: pods created and reconciled per second",
          "api": "HTTP API: requests per second and latency on one replica",
          "chaos": "Chaos soak: exactly-once under faults",
          "retention": "Retention: purging old history under a live scheduler",
          "chain": "Chains and run completion: step latency, last task ends to run terminal",
          "cli": "CLI: `leoflow --help`, a client verb's own overhead, `runs trigger --wait`",
          "run_starts": "Starting runs behind a backlog of queued runs",
          "map": "Mapped tasks: fan-out over 1,000 and 10,000 instances, and their expansion",
          "datasets": "Datasets: data arriving → runs started, 1,000 DAGs fed at once, a 100,000-event burst",
          "waits": "Waits that hold no pod: 10,000 tasks in `wait_for`, the leader's CPU while nothing changes",
          "vs_airflow": "Leoflow vs Airflow",
          "vs_airflow_chain": "Leoflow vs Airflow: chains, trigger to run success",
          "vs_airflow_map": "Leoflow vs Airflow: a 1,000-item map (.expand()), trigger to run success",
          "many_dags": "Many DAGs: 1,000 and 10,000 due at one minute, 100,000 idle, a 10,000-file sync, vs Airflow",
          "tracing": "Tracing (OpenTelemetry): the leader's CPU with OTLP export on and off",
          "dag_list": "The DAG list at 100,000 DAGs with every filter, and /metrics with 10,000 DAGs' series",
          "log_archive": "Log archive: a 1 GB log against the storage client alone, its tail read back, "
                         "1,000 tries x 1 MB"}
#: Entries that run a benchmark script in another of its modes: name -> (script name, its arguments).
VARIANTS = {"vs_airflow_chain": ("vs_airflow", ["--chain"]), "vs_airflow_map": ("vs_airflow", ["--map"]),
            "log_archive": ("log_archive", ["--mb", "1024"]),
            "many_dags": ("many_dags", ["--dags", "1000", "10000", "--idle", "100000", "--sync", "10000", "--airflow"])}


# --------------------------------------------------------------------------- the machine

def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"kernel": platform.release(), "python": platform.python_version()}
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        models = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        info["cpu"] = models[0].strip() if models else platform.processor() or "unknown"
    except OSError:
        info["cpu"] = platform.processor() or "unknown"
    info["nproc"] = _run(["nproc"]) or str(os.cpu_count())
    free = _run(["free", "-m"])
    match = re.search(r"^Mem:\s+(\d+)", free or "", re.M)
    info["memory_mib"] = int(match.group(1)) if match else None
    try:
        from leoflow.standalone.embedded import find_bin_dir

        info["postgres"] = _run([str(find_bin_dir() / "postgres"), "--version"])
    except Exception:  # the page still renders without it
        info["postgres"] = None
    info["commit"] = _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    return info


def _run(argv: list[str]) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


# --------------------------------------------------------------------------- running one benchmark

def script_of(name: str) -> tuple[Path, list[str]]:
    """The script behind a page entry and the arguments that select its mode."""
    script, mode = VARIANTS.get(name, (name, []))
    return ROOT / "bench" / f"{script}.py", list(mode)


def command(name: str, args: argparse.Namespace, png: Path) -> list[str]:
    script, mode = script_of(name)
    cmd = [sys.executable, str(script), *mode]
    if name == "chaos":
        cmd += ["--duration", str(args.chaos_duration), "--seed", str(args.seed)]
    cmd += shlex.split(args.extra.get(name, ""))
    help_text = _run([sys.executable, str(script), "--help"]) or ""
    for flag in ("--png", "--plot"):
        if flag in help_text and flag not in cmd:
            cmd += [flag, str(png)]
            break
    return cmd


def last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
        if line:
            return None
    return None


def run_one(name: str, args: argparse.Namespace, date: str) -> dict[str, Any]:
    script, _ = script_of(name)
    if not script.exists():
        return {"status": "missing", "error": f"bench/{script.name} does not exist"}
    png = RESULTS / f"{date}-{name}.png"
    cmd = command(name, args, png)
    shown = " ".join(["python", *(shlex.quote(str(Path(c).relative_to(ROOT)) if c.startswith(str(ROOT)) else
                                  shlex.quote(c)) for c in cmd[1:])])
    print(f"run_all: {shown}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, stdout = -1, (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = f"timed out after {args.timeout}s"
    wall = round(time.monotonic() - started, 1)
    result = last_json(stdout)
    entry: dict[str, Any] = {"command": shown, "exit_code": code, "wall_s": wall, "result": result,
                             "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    entry["status"] = "ok" if code == 0 and result is not None else ("no-json" if result is None else "failed")
    if entry["status"] != "ok":
        entry["stderr_tail"] = stderr[-2000:]
    for candidate in [png, *_pngs_in(result)]:
        if candidate.exists():
            target = RESULTS / f"{date}-{name}.png"
            if candidate.resolve() != target.resolve():
                shutil.copyfile(candidate, target)
            entry["png"] = str(target.relative_to(ROOT))
            break
    return entry


def _pngs_in(value: Any) -> list[Path]:
    if isinstance(value, dict):
        return [p for v in value.values() for p in _pngs_in(v)]
    if isinstance(value, str) and value.endswith(".png"):
        path = Path(value)
        return [path if path.is_absolute() else ROOT / path]
    return []


# --------------------------------------------------------------------------- rendering the page

CHAOS_NOTE = """Three `leoflow serve` replicas, each in its own network namespace, share one PostgreSQL and run
task pods through the fake Kubernetes API server. Every few seconds the leader is hurt at random:
SIGKILL, SIGTERM, SIGSTOP past its lease, `pg_terminate_backend` on its lock session, a PostgreSQL
restart (fast or immediate), or an iptables DROP partition between it and PostgreSQL (it still
reaches Kubernetes). Killed replicas are restarted. Afterwards the soak proves, from the fake API
server's request log and from a commit-ordered audit of every term-carrying write (triggers +
`track_commit_timestamp`): one successful pod create per (run, task, try) (`duplicates`), no pod
created and no scheduling write committed by a term older than the newest committed term
(`stale_pods`, `stale_writes`), no term acting after its successor committed, every task terminal,
no run lost, logs stored for every finished try, and flaky-by-design tasks retried.
`belief_overlaps` lists terms whose holder *noticed* its loss after the successor started
(inherent to SIGSTOP and a killed lock session); they are harmless only if nothing acted in them,
which `checks.leadership_never_overlaps` verifies."""

CHAIN_NOTE = """bench/chain.py's two chains (100 `kind: empty` steps; 40 steps running `true`) in both systems,
one run at a time, the systems alternating per round on one shared PostgreSQL; p50 over every
repeat. Leoflow: one `leoflow serve` with the local executor, `POST` the run, then `GET` it every
10 ms until terminal. Airflow: the scheduler with the LocalExecutor, `trigger_dag()` (what its REST
API calls) in a long-lived process, then its `dag_run` row read every 10 ms; the empty steps are
`EmptyOperator`s, which the scheduler marks `success` without running them, and the `true` steps
`BashOperator`s. Airflow runs with the latency settings listed under `airflow_settings`
(`scheduler_idle_sleep_time` lowered from 1 s; its mini scheduler on). `db_p50_s` is each
system's own record (run end minus run creation); `ratio_p50` is Airflow's p50 over Leoflow's."""
MANY_DAGS_NOTE = """One `leoflow serve` replica (local executor) per measure, on a private PostgreSQL. **Due at one
boundary**: N DAGs on `* * * * *`, `catchup: false`, one `kind: empty` task each, all with
`next_run_at` at the same minute; from the runs' own timestamps minus the boundary, the p50/p99/last
run created (queued) and succeeded, and `polled_all_succeeded_s` when a poll every 0.1 s first saw
all of them succeeded; boundary 1 finds the leader's compiled versions cold, boundary 2 warm.
**Idle**: 100,000 DAGs stored, none due (next run in 2100): the leader's CPU over a minute
(`leader_cpu_percent`, of one core), then `GET /api/v2/dags?limit=100` on that replica
(`idle.list`, client-side, one keep-alive connection). **Sync**: `leoflow dags sync` of 10,000 YAML
files in one request, all or nothing. **vs Airflow**: bench/airflow_many_dags.py, Airflow 2.10.5
with the LocalExecutor on the same host and PostgreSQL build, the same 1,000 DAGs (`EmptyOperator`)
unpaused with their next interval ending at one boundary, its defaults but the idle sleep (0.05 s):
`max_dagruns_to_create_per_loop` stays 10. `ratio` is Airflow's last run succeeded after the
boundary (its `end_date`) over the moment a poll first saw every Leoflow run succeeded, at its best
boundary of 1,000 DAGs (the runs' own timestamps are the start of the step that wrote them). Every
figure carries the load average of the shared 2-core host it was taken at."""
DATASETS_NOTE = """One `leoflow serve` replica (memory executor: a task ends when handed over, so the scheduler's part
is what is measured) on a private PostgreSQL. **producer**: a producing task's end (the executor's
`ended_at`) to the consuming DAG's first task queued (`queued_at`, stamped by the leader's step),
one pair at a time (target p99 < 100 ms), split into try end → the step recording the success,
success → consumer's run created (the same step when it can) and run → task queued; beside it the
wall clock from triggering the producer until the consumer's task is seen queued. **outside**:
`POST /api/v2/datasets/events` to the run seen in the database, wall clock, polled every 2 ms
(target p99 < 100 ms). **fan**: 1,000 DAGs each waiting on its own URI, one event each sent as one
list-form request: until every run is created and started (target < 5 s), and the leader's tick
p99 (bucket bound of `leoflow_scheduler_tick_duration_seconds`) idle without the DAGs, idle with
them waiting, and over the burst. **burst**: one URI three paused DAGs wait on, 100,000 events
through the API's list form (200 a request) on a fixed schedule at 1,700/s (100,000 a minute),
while a probe reads the DAG and dataset lists one request at a time; the events recorded and
audited, the queue rows (one per consumer: coalesced), the runs once unpaused (one each), the
replica's CPU per event and RSS. **single_form**: one event a request from 64 clients as fast as
the replica answers, its rate and CPU per event beside the list form's. Each phase carries the
1-minute load average of the shared 2-core host."""
WAITS_NOTE = """One `leoflow serve` replica (memory executor) on a private PostgreSQL. 10 DAGs of 1,000 `kind: empty`
tasks, each held by an approval (`wait_for: {approval: …}`), one run each: 10,000 tasks `waiting`, no
pod and no slot held (`parked_seconds`: from the first apply until all were waiting). Their next
safety-net checks are then spread over five minutes as in steady state (about 33 re-judged a
second), and the replica's CPU (user + system, `/proc`) is read over `seconds` while nothing changes
(target < 5 % of one core). Last, one approval through the API until its task succeeded
(`approval_to_success_s`). The load average of the shared host is recorded before and after."""
DAG_LIST_NOTE = """The API alone (uvicorn; no elector, so no scheduler: what a follower serves) on a private
PostgreSQL holding 100,000 DAGs (every 100th paused), runs for 80 % of them (the last one success
85 %, failed 10 %, running 3 %, queued 2 %) and per-DAG metric rows for 10,000. Per scenario,
`GET /api/v2/dags?limit=100` sequentially over one keep-alive connection after 20 warm-up requests
(client-side p50/p99, `items` on the page); `list_store_only` is the same page read by the store in
the benchmark's process (the database's share). `/metrics` is scraped with the default
`LEOFLOW_METRICS_MAX_DAGS` and with every DAG its own series (`series_with_dag_id`, `scrape_bytes`).
The load average of the shared 2-core host is recorded before and after."""
TRACING_NOTE = """One `leoflow serve` replica at a time (local executor) on a private PostgreSQL: a 40-step chain of
`true` tasks, three runs with tracing off, then three with `OTEL_EXPORTER_OTLP_ENDPOINT` set (an OTLP/HTTP
collector the script runs; the SDK's default batching), twice over. `cpu_s_per_run` is the replica's own CPU
(user + system, `/proc`) per run; end to end it swings by tens of percent between runs on the shared host, so
the steadier figure is `estimated_cpu_overhead_pct`: the spans a run produced times the CPU one span costs
with its export (`cpu_us_per_span`, measured in-process), over the CPU of a run with tracing off."""
LOG_ARCHIVE_NOTE = """The log archiver as the leader runs it (a private PostgreSQL for its index, a real
S3-compatible server, moto's, in its own process on loopback), on a 1 GB log of busy-task lines:
`archiver_vs_client` is its throughput over the storage client's alone putting the same raw bytes to the
same place (the archiver compresses at gzip level 1, 1 MiB chunks, two compressing ahead while one uploads
and the one before it is indexed); `rss_growth_mb` is the process's growth while archiving.
`ranged_read_last_64k` reads the last 64 KiB back through the API's read path (first byte and whole). The
many-tries row: 1,000 tries printing 1 MB each at once through one archiver, seconds from each try's end
until its log is complete in the index."""
NOTES = {"log_archive": LOG_ARCHIVE_NOTE, "chaos": CHAOS_NOTE, "dag_list": DAG_LIST_NOTE,
         "vs_airflow_chain": CHAIN_NOTE, "many_dags": MANY_DAGS_NOTE,
         "datasets": DATASETS_NOTE, "waits": WAITS_NOTE, "tracing": TRACING_NOTE}

def flatten(value: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if re.search(r"png|plot|path|workdir|_details|errors?$", str(key)):
                continue
            rows += flatten(item, f"{prefix}.{key}" if prefix else str(key), depth + 1)
        return rows
    if isinstance(value, bool) or value is None:
        return [(prefix, str(value).lower())]
    if isinstance(value, (int, float)):
        return [(prefix, f"{value:,.3f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}")]
    if isinstance(value, str) and len(value) <= 80:
        return [(prefix, value)]
    if isinstance(value, list) and len(value) <= 8 and all(isinstance(v, (int, float, str)) for v in value):
        return [(prefix, ", ".join(str(v) for v in value) or "(none)")]
    return []


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by bench/run_all.py from bench/results/*.json. Do not edit by hand: every figure",
        "     below was measured by the command next to it; re-run the benchmark to change it. -->",
        "",
        f"Latest results: `bench/results/{results['date']}.json` (commit `{m.get('commit')}`).",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m.get('cpu')} |",
        f"| Cores (nproc) | {m.get('nproc')} |",
        f"| Memory | {m.get('memory_mib')} MiB |",
        f"| Kernel | {m.get('kernel')} |",
        f"| Python | {m.get('python')} |",
        f"| PostgreSQL | {m.get('postgres')} |",
        "",
        "A shared, loaded 2-core sandbox: treat the figures as lower bounds for a dedicated host.",
        "",
        "## Summary",
        "",
        "| Benchmark | Status | Wall time | Measured (UTC) |",
        "|---|---|---|---|",
    ]
    names = [n for n in (*BENCHMARKS, *sorted(set(results["benchmarks"]) - set(BENCHMARKS)))
             if n in results["benchmarks"]]
    for name in names:
        entry = results["benchmarks"][name]
        lines.append(f"| [{TITLES.get(name, name)}](#{name}) | {entry['status']} | {entry.get('wall_s', '-')} s "
                     f"| {entry.get('measured_at', '-')} |")
    for name in names:
        entry = results["benchmarks"][name]
        lines += ["", f'<a id="{name}"></a>', f"## {TITLES.get(name, name)}", ""]
        ran_on = entry.get("machine")
        if ran_on and any(ran_on.get(k) != m.get(k) for k in ("cpu", "nproc", "kernel", "commit")):
            lines += [f"Measured apart from the page's machine: {ran_on.get('cpu')}, {ran_on.get('nproc')} cores, "
                      f"kernel {ran_on.get('kernel')}, commit `{ran_on.get('commit')}`.", ""]
        if entry.get("command"):
            lines += ["```sh", entry["command"], "```", ""]
        if entry["status"] == "missing":
            lines += [f"Not run: {entry.get('error')}.", ""]
            continue
        if entry["status"] != "ok" and entry.get("result") is None:
            lines += [f"**{entry['status']}** (exit code {entry.get('exit_code')}); stderr tail:", "", "```",
                      (entry.get("stderr_tail") or "").strip()[-1200:], "```", ""]
        elif entry["status"] != "ok":
            lines += [f"**{entry['status']}**: exit code {entry.get('exit_code')}; figures and evidence below.", ""]
        if name in NOTES:
            lines += [NOTES[name], ""]
        rows = flatten(entry.get("result") or {})
        if rows:
            lines += ["| Figure | Value |", "|---|---|"] + [f"| `{k}` | {v} |" for k, v in rows[:60]] + [""]
        failed = (entry.get("result") or {}).get("failed_details")
        if failed:
            text = json.dumps(failed, indent=1, default=str)
            lines += ["<details><summary>Evidence for the failed checks (truncated)</summary>", "", "```json",
                      text[:4000], "```", "", "</details>", ""]
        if entry.get("png"):
            lines += [f"![{name}](../{entry['png']})", ""]
    lines += [
        "## Reproduce",
        "",
        "```sh",
        "pip install -e '.[dev,bench]'",
        "sudo apt-get install -y iproute2 iptables   # chaos soak: network namespaces + iptables (root)",
        "python bench/run_all.py                     # all of the above, one after another",
        "python bench/run_all.py --only chaos --chaos-duration 1800   # one benchmark; merges into today's file",
        "```",
        "",
        "Each command above can also be run on its own; each prints its JSON summary as its last line.",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Run Leoflow's benchmarks and write docs/benchmarks.md.")
    others = ", ".join(sorted(set(TITLES) - set(BENCHMARKS)))
    p.add_argument("--only", nargs="+", metavar="NAME", help=f"subset of {', '.join(BENCHMARKS)} (or {others})")
    p.add_argument("--chaos-duration", type=float, default=600, help="seconds of faults for the chaos soak")
    p.add_argument("--seed", type=int, default=1, help="chaos soak seed")
    p.add_argument("--extra", action="append", default=[], metavar="NAME=ARGS",
                   help="extra arguments for one benchmark, e.g. --extra 'scheduler=--runs 200'")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per benchmark")
    p.add_argument("--render-only", action="store_true", help="only rewrite docs/benchmarks.md from today's file")
    p.add_argument("--date", default=None, help="results file date (default: today, UTC)")
    args = p.parse_args(argv)
    extra: dict[str, str] = {}
    for item in args.extra:
        name, sep, value = item.partition("=")
        if not sep:
            p.error(f"--extra expects NAME=ARGS, got {item!r}")
        extra[name] = value
    args.extra = extra
    return args


def carried_over(date: str) -> dict[str, Any]:
    """A new day's results: the latest earlier file's entries, each with its own machine and time.

    So a day that re-runs only some benchmarks still renders the whole page (the others as they were
    last measured, and the page's summary says when), instead of a page of only what ran today.
    """
    earlier = sorted(p for p in RESULTS.glob("????-??-??.json") if p.stem < date)
    if not earlier:
        return {"date": date, "benchmarks": {}}
    previous = json.loads(earlier[-1].read_text())
    return {"date": date, "benchmarks": dict(previous.get("benchmarks", {}))}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    date = args.date or dt.datetime.now(dt.UTC).date().isoformat()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{date}.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() else carried_over(date)
    failed = False
    if not args.render_only:
        here = machine()
        if args.only:  # the page's machine stays the full run's; the entry says where it ran
            results.setdefault("machine", here)
        else:
            results["machine"] = here
        for name in args.only or BENCHMARKS:
            entry = {**run_one(name, args, date), "machine": here}
            results["benchmarks"][name] = entry
            failed |= entry["status"] not in ("ok",)
            path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    results.setdefault("machine", machine())
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(render(results))
    summary = {"results": str(path.relative_to(ROOT)), "doc": str(DOC.relative_to(ROOT)),
               "status": {n: e["status"] for n, e in results["benchmarks"].items()}}
    print(json.dumps(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
