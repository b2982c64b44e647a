"""Replicas as real OS processes (``leoflow serve``) for the election tests and the benchmark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from leoflow.model.lock_key import pg_locks_ids
from leoflow.standalone.embedded import free_port

REPO = Path(__file__).resolve().parents[2]

#: Short timings so failures are injected and detected in seconds (lease 4 s, keepalive 0.5 s);
#: a shorter lease makes a healthy leader fence itself when a loaded 2-core host starves it.
FAST_ENV = {
    "LEOFLOW_AUTH": "disabled",
    "LEOFLOW_EXECUTOR": "memory",
    "LEOFLOW_HOST": "127.0.0.1",
    "LEOFLOW_LOG_FORMAT": "json",
    "LEOFLOW_ELECTION_POLL_INTERVAL": "1",
    "LEOFLOW_KEEPALIVE_INTERVAL": "0.5",
    "LEOFLOW_LEADER_LEASE": "4",
    "LEOFLOW_HEARTBEAT_INTERVAL": "0.5",
    "LEOFLOW_NODE_DOWN_AFTER": "3",
    "LEOFLOW_SHUTDOWN_GRACE": "3",
    "LEOFLOW_DB_POOL_SIZE": "4",
    "LEOFLOW_SCHEDULER_INTERVAL": "0.2",
}


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
             interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class ReplicaProcess:
    node: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def get(self, path: str, timeout: float = 5.0) -> httpx.Response:
        return httpx.get(self.url + path, timeout=timeout)

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for line in self.get("/metrics").text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def leader_gauge(self) -> float | None:
        try:
            return self.metrics().get("leoflow_leader")
        except httpx.HTTPError:
            return None

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Cluster:
    database_url: str
    workdir: Path
    name: str = "default"
    env: dict[str, str] = field(default_factory=dict)
    #: True: run ``tests.election.probe_replica`` (leoflow serve + a fenced probe writer).
    probe: bool = True
    #: With ``probe``: "probe" runs only the probe as leader service, "real" adds the production ones.
    services: str = "probe"
    replicas: dict[str, ReplicaProcess] = field(default_factory=dict)

    def start(self, node: str, *, database_url: str | None = None, env: dict[str, str] | None = None,
              wait: bool = True) -> ReplicaProcess:
        port = free_port()
        full = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
        full.update(FAST_ENV)
        full.update({"LEOFLOW_DATABASE_URL": database_url or self.database_url, "LEOFLOW_NODE_ID": node,
                     "LEOFLOW_CLUSTER": self.name, "LEOFLOW_PORT": str(port),
                     "LEOFLOW_API_URL": f"http://127.0.0.1:{port}", "PYTHONPATH": str(REPO),
                     "PROBE_SERVICES": self.services})
        full.update(self.env)
        full.update(env or {})
        command = ([sys.executable, "-m", "tests.election.probe_replica", "serve"] if self.probe
                   else [str(Path(sys.executable).parent / "leoflow"), "serve"])
        log_path = self.workdir / f"{self.name}-{node}-{len(self.replicas)}.log"
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(command, env=full, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        replica = ReplicaProcess(node, port, proc, log_path)
        self.replicas[node] = replica
        if wait:
            self.wait_healthy(replica)
        return replica

    def wait_healthy(self, replica: ReplicaProcess, timeout: float = 60) -> None:
        def healthy() -> bool:
            if not replica.alive():
                raise AssertionError(f"{replica.node} exited: {replica.log()[-2000:]}")
            try:
                return replica.get("/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        wait_for(healthy, timeout, f"{replica.node} /healthz", interval=0.1)

    def leaders_by_metric(self) -> list[str]:
        return [r.node for r in self.replicas.values() if r.alive() and r.leader_gauge() == 1]

    def db_leader(self) -> tuple[str, int] | None:
        """(node_id, term) of the granted lock holder with its own recorded term."""
        with psycopg.connect(self.database_url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT t.node_id, t.term FROM pg_locks l JOIN cluster_leadership cl ON cl.cluster = %s"
                " JOIN leader_terms t ON t.term = cl.term AND t.backend_pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s AND l.objsubid = 2"
                " AND l.granted", (self.name, *pg_locks_ids(self.name))).fetchone()
            return (row[0], int(row[1])) if row else None

    def holders(self) -> int:
        with psycopg.connect(self.database_url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s"
                               " AND objid = %s AND objsubid = 2 AND granted", pg_locks_ids(self.name)).fetchone()
            return int(row[0]) if row else 0

    def wait_leader(self, timeout: float = 30, not_node: str | None = None,
                    min_term: int = 0) -> tuple[str, int]:
        def found() -> tuple[str, int] | None:
            leader = self.db_leader()
            if leader and leader[0] != not_node and leader[1] > min_term:
                return leader
            return None
        result: tuple[str, int] = wait_for(found, timeout, "a leader", interval=0.005)
        return result

    def events(self, kinds: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            rows = conn.execute("SELECT id, ts, kind, node_id, term, details FROM cluster_events"
                                " WHERE cluster = %s ORDER BY id", (self.name,)).fetchall()
        out = [dict(zip(("id", "ts", "kind", "node_id", "term", "details"), r, strict=True)) for r in rows]
        return [e for e in out if kinds is None or e["kind"] in kinds]

    def event(self, kind: str, term: int) -> dict[str, Any] | None:
        """The first event of ``kind`` for ``term`` (cheap even when probe writes pile up)."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            row = conn.execute("SELECT id, ts, kind, node_id, term, details FROM cluster_events WHERE cluster = %s"
                               " AND kind = %s AND term = %s ORDER BY id LIMIT 1", (self.name, kind, term)).fetchone()
        return dict(zip(("id", "ts", "kind", "node_id", "term", "details"), row, strict=True)) if row else None

    def terms(self) -> list[dict[str, Any]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            rows = conn.execute("SELECT term, node_id, acquired_at, ended_at, end_reason FROM leader_terms"
                                " WHERE cluster = %s ORDER BY term", (self.name,)).fetchall()
        return [dict(zip(("term", "node_id", "acquired_at", "ended_at", "end_reason"), r, strict=True))
                for r in rows]

    def stop_all(self, sig: int = signal.SIGKILL) -> None:
        for r in self.replicas.values():
            if r.alive():
                r.signal(signal.SIGCONT)
                r.signal(sig)
        for r in self.replicas.values():
            try:
                r.proc.wait(15)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait(5)
