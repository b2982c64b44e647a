"""The chaos soak's main loop: set up, load, hurt, heal, drain, check, report.

Phases: PostgreSQL (commit timestamps on, audit triggers installed) and three namespaces; the
fake Kubernetes API server; three ``leoflow serve`` replicas; the workload (DAGs applied over
the API, runs triggered across the first half of ``--duration``, a few cancelled); faults every
few seconds until ``--duration`` is over or the workload has finished, with crashed/killed
replicas restarted; then every
fault is undone and the soak waits for the workload to drain (all runs terminal, all logs
shipped) before running the checks of :mod:`bench.chaos.checks`.

Output: progress on stderr, a JSON summary as the last line of stdout; exit 0 iff every check
holds (2 when the soak could not run at all, e.g. without root).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from bench.chaos import audit, checks, timeline
from bench.chaos.cluster import Cluster, Timings
from bench.chaos.faults import KINDS, STANDBY_KINDS, Injector, LeaderWatch
from bench.chaos.k8s import ChaosKubernetes
from bench.chaos.workload import Api, Workload
from tests.harness import netns

log = logging.getLogger("chaos")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Chaos soak: exactly-once execution under faults.")
    p.add_argument("--duration", type=float, required=True,
                   help="seconds of fault injection (stops earlier when the workload has finished)")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--runs", type=int, default=50, help="DAG runs to trigger (default 50)")
    p.add_argument("--tasks", type=int, default=40, help="tasks per DAG (default 40)")
    p.add_argument("--trigger-spread", type=float, default=None, metavar="SECONDS",
                   help="seconds over which the runs are triggered (default half of --duration; the faults "
                   "stop when the workload is done, so a full-length fault phase needs runs until near the end)")
    p.add_argument("--fault-gap", type=float, nargs=2, default=(3.0, 8.0), metavar=("MIN", "MAX"),
                   help="seconds between the end of one fault and the next (uniform; default 3 8)")
    p.add_argument("--drain-timeout", type=float, default=None, help="seconds to wait for the workload after "
                   "the faults stop (default max(240, duration))")
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS, metavar="KIND",
                   help=f"fault kinds to inject, each once per shuffled round (default all: {' '.join(KINDS)})")
    p.add_argument("--executor", default="kubernetes", choices=("kubernetes", "memory"),
                   help="LEOFLOW_EXECUTOR of the replicas (memory: harness smoke test only; pod checks fail)")
    p.add_argument("--standby", action="store_true",
                   help="run an asynchronous streaming standby and add the db_failover fault kind")
    p.add_argument("--archive", action="store_true",
                   help="archive every try's log (file:// under the workdir) and audit that each finished try's "
                   "archived log equals what its task printed (check archived_logs_equal_printed)")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--png", type=Path, default=None, help="timeline PNG (default <workdir>/timeline.png)")
    return p.parse_args(argv)


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"n": len(ordered), "p50": round(statistics.median(ordered), 3),
            "max": round(ordered[-1], 3), "p90": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3)}


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"leoflow-chaos-{args.seed}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(self.workdir, timings=Timings(), executor=args.executor, archive=args.archive)
        self.k8s = ChaosKubernetes(self.workdir)
        self.watch = LeaderWatch(self.cluster)
        kinds = tuple(args.kinds) + (STANDBY_KINDS if args.standby else ())
        self.injector = Injector(self.cluster, self.rng, kinds, kubernetes=self.k8s.fake)
        spread = args.trigger_spread if args.trigger_spread is not None else args.duration * 0.5
        self.workload = Workload.plan(runs=args.runs, tasks=args.tasks, spread=spread, seed=args.seed)
        self.restarts = 0
        self.api: Api | None = None
        self.first_pods: tuple[list[float], int] = ([], 0)
        self._exited_at: dict[str, float] = {}

    # ------------------------------------------------------------------ phases
    def setup(self) -> None:
        self.cluster.start_network_and_database()
        pg = self.cluster.pg
        assert pg is not None
        with self.cluster.connect() as conn:
            audit.enable_commit_timestamps(conn)
        pg.stop("fast")
        pg.start()
        pg.wait_ready()
        with self.cluster.connect() as conn:
            audit.install(conn)
            durable = conn.execute("SHOW synchronous_commit").fetchone()
            if not durable or durable[0] != "on":
                raise RuntimeError("PostgreSQL must commit durably for the soak (synchronous_commit=on)")
        if self.args.standby:
            self.cluster.start_standby()
        kube_env = self.k8s.start(self.cluster.namespaces)
        self.cluster.start_replicas(kube_env)
        self.cluster.wait_ready()
        log.info("cluster up in %s", self.workdir)

    def supervise(self) -> None:
        """Restart replicas that exited (killed by us or crashed) one second after their exit."""
        now = time.monotonic()
        for r in self.cluster.replicas:
            if r.running():
                continue
            first_seen = self._exited_at.setdefault(r.node_id, now)
            if first_seen == now:
                code = r.reap()
                log.info("%s exited with %s", r.node_id, code)
            if now - first_seen >= 1.0:
                r.start()
                self.restarts += 1
                del self._exited_at[r.node_id]

    def live_urls(self) -> list[str]:
        return [r.api_url for r in self.cluster.replicas if r.running() and not r.stopped]

    def sleep_supervised(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.supervise()
            time.sleep(min(0.25, max(0.0, end - time.monotonic())))

    def inject_faults(self, until: float) -> None:
        lo, hi = self.args.fault_gap
        while time.time() < until:
            self.sleep_supervised(self.rng.uniform(lo, hi))
            if time.time() >= until or self.finished():
                break
            kind = self.injector.next_kind()
            record = self.injector.inject(kind)
            log.info("fault %s on %s (term %s) %s", record.kind, record.target, record.term, record.note)
            self.supervise()

    def finished(self) -> bool:
        """All triggered runs and task instances terminal, every finished try's logs shipped, no dataset
        event waiting to start a run."""
        if not self.workload.done.is_set():
            return False
        try:
            with self.cluster.connect() as conn:
                row = conn.execute("""
                    SELECT (SELECT count(*) FROM dag_runs WHERE state IN ('queued', 'running')),
                           (SELECT count(*) FROM task_instances
                             WHERE state NOT IN ('success', 'failed', 'upstream_failed', 'cancelled')),
                           (SELECT count(*) FROM task_tries WHERE executor_ref IS NOT NULL
                             AND ended_at IS NOT NULL AND logs_shipped_at IS NULL),
                           (SELECT count(*) FROM dag_runs),
                           (SELECT count(*) FROM dataset_queue)""").fetchone()
        except psycopg.Error:
            return False
        triggered = sum(r.triggered_at is not None for r in self.workload.runs)
        # Events still queued start one more dataset run (every consumer waits on ``any``).
        return bool(row and row[0] == 0 and row[1] == 0 and row[2] == 0 and row[3] >= triggered and row[4] == 0)

    def drain(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.supervise()
            if self.finished():
                return True
            time.sleep(1.0)
        return False

    # ------------------------------------------------------------------ main
    def run(self) -> dict[str, Any]:
        started = time.time()
        log.info("setting up in %s", self.workdir)
        self.setup()
        self.watch.start()
        t0 = time.time()
        api = self.api = Api(self.live_urls, self.rng)
        self.workload.apply(api)
        stop = threading.Event()
        driver = threading.Thread(target=self.workload.drive, args=(api, stop), name="workload", daemon=True)
        driver.start()
        self.inject_faults(t0 + self.args.duration)
        faults_end = time.time()
        self.injector.recover_all()
        self.sleep_supervised(1.5)
        driver.join(timeout=max(60.0, self.args.duration))
        drained = self.drain(self.args.drain_timeout or max(240.0, self.args.duration))
        log.info("workload %s; stopping replicas", "drained" if drained else "NOT drained")
        stop.set()
        self.watch.stop()
        self.cluster.stop_replicas()
        api.close()
        requests = self.k8s.requests()
        with self.cluster.connect() as conn:
            verdict, terms, clock = checks.run_checks(conn, requests, self.workload, self.cluster.cluster_name,
                                                      self.cluster.archive_dir)
            completions = [float(r[0]) for r in conn.execute(
                "SELECT extract(epoch FROM ended_at)::float8 FROM task_instances WHERE ended_at IS NOT NULL")]
        verdict.add("workload_drained", drained)
        faults = [f.as_dict() for f in self.injector.records]
        png = timeline.plot(self.args.png or self.workdir / "timeline.png", t0=t0,
                            nodes=[r.node_id for r in self.cluster.replicas], terms=terms,
                            samples=self.watch.samples, faults=faults, completions=completions,
                            title=f"chaos soak seed={self.args.seed} duration={self.args.duration:g}s")
        self.first_pods = checks.first_pod_after_acquire(requests, clock)
        return self.summary(verdict, terms, faults, started, t0, faults_end, png)

    def summary(self, verdict: checks.Verdict, terms: list[dict[str, Any]], faults: list[dict[str, Any]],
                started: float, t0: float, faults_end: float, png: Path | None) -> dict[str, Any]:
        d = verdict.details
        per_kind = checks.time_to_new_leader(faults, terms)
        for stale in d.get("no_pod_from_stale_term", {}).get("stale", []):
            before = [f for f in faults if f["at"] <= stale["at"]]
            stale["after_fault"] = f"{before[-1]['kind']} on {before[-1]['target']}" if before else None
        return {
            "ok": verdict.ok,
            "seed": self.args.seed,
            "duration_s": self.args.duration,
            "wall_s": round(time.time() - started, 1),
            "workload_s": round(time.time() - t0, 1),
            "fault_phase_s": round(faults_end - t0, 1),
            "runs": len(self.workload.runs),
            "task_instances": self.workload.task_count,
            "faults_injected": dict(Counter(f["kind"] for f in faults if f["target"] is not None)),
            "faults_skipped": sum(f["target"] is None for f in faults),
            "failovers": max(0, len(terms) - 1),
            "belief_overlaps": d.get("leadership_never_overlaps", {}).get("belief_overlaps"),
            "handover_s": _stats(checks.handovers(terms)),
            "time_to_new_leader_s": {k: _stats(v) for k, v in per_kind.items()},
            "first_pod_after_acquire_s": _stats(self.first_pods[0]),
            "terms_without_pods": self.first_pods[1],
            "pods_created": d.get("one_pod_per_try", {}).get("pods_created"),
            "pod_create_conflicts_409": d.get("one_pod_per_try", {}).get("conflicts_409"),
            "duplicates": len(d.get("one_pod_per_try", {}).get("duplicates", [])),
            "stale_pods": len(d.get("no_pod_from_stale_term", {}).get("stale", [])),
            "stale_writes": len(d.get("no_write_from_stale_term", {}).get("stale", [])),
            "audited_writes": d.get("no_write_from_stale_term", {}).get("audited_writes"),
            "written_under_a_later_term": d.get("no_write_from_stale_term", {}).get("written_under_a_later_term"),
            "lost": len(d.get("no_run_lost", {}).get("lost", [])),
            "runs_by_state": d.get("no_run_lost", {}).get("runs_by_state"),
            "task_states": d.get("all_tasks_terminal", {}).get("task_states"),
            "flaky_retried": d.get("flaky_tasks_retried", {}).get("flaky_succeeded"),
            "tries_failed_not_by_their_command": d.get("no_try_failed_but_by_its_command", {}).get("failed"),
            "archived_logs": {k: v for k, v in d.get("archived_logs_equal_printed", {}).items() if k != "problems"},
            "clock_offsets": {r.node_id: r.clock_offset for r in self.cluster.replicas if r.clock_offset},
            "replica_restarts": self.restarts,
            "db_failovers": self.cluster.pair.failovers if self.cluster.pair else None,
            "unexpected_exits": {r.node_id: r.unexpected_exits for r in self.cluster.replicas if r.unexpected_exits},
            "api_retries": self.api.retries if self.api else None,
            "workload_errors": self.workload.errors[:10],
            "fault_log": [[round(f["at"] - t0, 1), f["kind"], f["target"], f["term"]] for f in faults],
            "checks": verdict.checks,
            "failed_details": {k: d.get(k) for k, ok in verdict.checks.items() if not ok},
            "timeline_png": str(png) if png else None,
            "workdir": str(self.workdir),
        }

    def close(self) -> None:
        self.watch.stop()
        try:
            self.injector.recover_all()
        except Exception:  # cleanup continues whatever state PostgreSQL or the namespaces are in
            log.exception("could not undo every fault before cleanup")
        try:
            self.cluster.close()
        finally:
            self.k8s.stop()
            shutil.rmtree(self.workdir / "pg", ignore_errors=True)
            shutil.rmtree(self.workdir / "pg-standby", ignore_errors=True)


class Terminated(Exception):
    """SIGTERM/SIGINT: stop, clean up (replicas, PostgreSQL, namespaces) and still report."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated(f"stopped by signal {signum}")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _terminate)
    args = parse_args(argv)
    reason = netns.unavailable_reason()
    if reason:
        print(json.dumps({"ok": False, "error": f"cannot run: {reason}"}))
        return 2
    soak = Soak(args)
    try:
        summary = soak.run()
    except Exception as exc:
        log.exception("soak aborted")
        summary = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "workdir": str(soak.workdir)}
    finally:
        soak.close()
    print(json.dumps(summary, default=str))
    return 0 if summary.get("ok") else 1
