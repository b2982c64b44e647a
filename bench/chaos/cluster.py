"""The system under test: PostgreSQL, three ``leoflow serve`` replicas, each in its own netns.

Every replica runs as a real OS process inside its own network namespace (see
``tests/harness/netns.py``) and reaches PostgreSQL and the fake Kubernetes API server over its
veth link, so a *real* partition can be put between one replica and PostgreSQL while it keeps
talking to Kubernetes — the dangerous case for exactly-once pod creation. The driver reaches
each replica's HTTP API at the namespace's address and PostgreSQL on loopback.

Failure semantics: :meth:`Cluster.close` always stops replicas, PostgreSQL and namespaces, also
after errors; replicas' output goes to ``<workdir>/<node>.log`` for post-mortems.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.chaos.standby import StreamingStandby
from leoflow.db import migrations
from tests.harness import netns

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
LOCK_PREFIX = "leoflow-lock:"
API_PORT = 8080
DB_NAME = "leoflow"
#: Applied with ALTER SYSTEM (effective after the restart the soak does for commit timestamps).
DURABLE_BUT_FAST = ("ALTER SYSTEM SET fsync = off", "ALTER SYSTEM SET full_page_writes = off",
                    "ALTER SYSTEM SET synchronous_commit = on")


@dataclass(frozen=True)
class Timings:
    """Short election timings so faults resolve within seconds (lease >= 2 x keepalive)."""

    keepalive_interval: float = 0.5
    leader_lease: float = 4.0
    poll_interval: float = 1.0
    heartbeat_interval: float = 1.0
    node_down_after: float = 6.0
    shutdown_grace: float = 3.0
    scheduler_interval: float = 0.5

    def env(self) -> dict[str, str]:
        return {
            "LEOFLOW_KEEPALIVE_INTERVAL": str(self.keepalive_interval),
            "LEOFLOW_LEADER_LEASE": str(self.leader_lease),
            "LEOFLOW_ELECTION_POLL_INTERVAL": str(self.poll_interval),
            "LEOFLOW_HEARTBEAT_INTERVAL": str(self.heartbeat_interval),
            "LEOFLOW_NODE_DOWN_AFTER": str(self.node_down_after),
            "LEOFLOW_SHUTDOWN_GRACE": str(self.shutdown_grace),
            "LEOFLOW_SCHEDULER_INTERVAL": str(self.scheduler_interval),
        }


@dataclass
class Replica:
    """One ``leoflow serve`` process in its namespace; restartable."""

    node_id: str
    ns: netns.NetNamespace
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    stopped: bool = False  # SIGSTOPped right now
    expected_exit: bool = False  # we signalled it; an exit is not a crash
    unexpected_exits: list[int] = field(default_factory=list)
    clock_offset: float = 0.0  # seconds its wall clock is off (``clock_skew``), kept across restarts

    @property
    def api_url(self) -> str:
        return f"http://{self.ns.ns_addr}:{API_PORT}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def command(self) -> list[str]:
        if self.clock_offset:
            return [sys.executable, "-m", "bench.chaos.skewed", f"{self.clock_offset:g}", "serve"]
        return [sys.executable, "-m", "leoflow", "serve"]

    def start(self) -> None:
        with self.log_path.open("ab") as out:
            out.write(f"\n===== start {self.starts + 1} at {time.time():.3f}"
                      f" (clock offset {self.clock_offset:g}s)\n".encode())
            out.flush()
            self.proc = self.ns.popen(self.command(), env=self.env,
                                      stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        self.starts += 1
        self.stopped = False
        self.expected_exit = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.pid is None:
            return
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.expected_exit = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False

    def reap(self) -> int | None:
        """The exit code if the process has exited since the last start (records crashes)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        if not self.expected_exit:
            self.unexpected_exits.append(code)
        return code

    def stop(self, timeout: float = 10) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); the exit code, None if it was not running."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.expected_exit = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def healthy(self) -> bool:
        import httpx

        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(self.api_url + "/healthz", timeout=2).status_code == 200
        return False

    def wait_healthy(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy():
                return
            if not self.running():
                raise RuntimeError(f"{self.node_id} exited at start-up (see {self.log_path})")
            time.sleep(0.3)
        raise RuntimeError(f"{self.node_id} not healthy after {timeout}s (see {self.log_path})")


class Cluster:
    """Namespaces, PostgreSQL and replicas; the fake Kubernetes server is passed in."""

    def __init__(self, workdir: Path, *, replicas: int = 3, timings: Timings | None = None,
                 cluster_name: str = "chaos", executor: str = "kubernetes", archive: bool = False) -> None:
        self.executor = executor
        #: The streaming standby (``--standby``): replicas then use the multi-host URL.
        self.pair: StreamingStandby | None = None
        self.workdir = workdir
        #: With ``archive``, every replica archives task logs here (``file://``: the replicas share the
        #: host's disk) and the audit reads the objects back (:func:`bench.chaos.audit.archive_audit`).
        self.archive_dir: Path | None = workdir / "archive" if archive else None
        self.timings = timings or Timings()
        self.cluster_name = cluster_name
        self.count = replicas
        self.namespaces: list[netns.NetNamespace] = []
        self.pg: netns.VethPostgres | None = None
        self.replicas: list[Replica] = []
        self._stack = contextlib.ExitStack()

    # ------------------------------------------------------------------ setup
    def start_network_and_database(self) -> None:
        for _ in range(self.count):
            ns = netns.create_namespace()
            self._stack.callback(ns.destroy)
            self.namespaces.append(ns)
        base = self.workdir / "pg"
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o755)
        # Durable commits: the soak crashes PostgreSQL (immediate stop), and with
        # synchronous_commit=off a crash forgets commits clients were told had succeeded, which
        # would be the harness breaking its promise, not Leoflow. fsync/full_page_writes only
        # matter when the OS crashes, so they stay off for speed.
        self.pg = netns.VethPostgres(base / "data", self.namespaces, fast_unsafe=False, socket_dir=base / "sock")
        self._stack.callback(self.pg.stop, "immediate")
        self.pg.start()
        self.pg.wait_ready()
        self.pg.create_database(DB_NAME)
        migrations.upgrade(self.admin_url)
        with self.connect() as conn:
            for setting in DURABLE_BUT_FAST:
                conn.execute(setting)

    def start_standby(self) -> None:
        """Clone the (configured, running) primary into a streaming standby; call before the replicas start."""
        assert self.pg is not None
        self.pair = StreamingStandby(self.pg, self.workdir)
        self._stack.callback(self._stop_pair)
        self.pair.start()

    def _stop_pair(self) -> None:
        if self.pair is not None:
            self.pair.primary.stop("immediate")
            self.pair.standby.stop("immediate")

    def fail_over(self) -> str:
        """The ``db_failover`` fault: the standby becomes the primary (see :mod:`bench.chaos.standby`)."""
        assert self.pair is not None
        note = self.pair.fail_over()
        self.pg = self.pair.primary
        return note

    @property
    def admin_url(self) -> str:
        assert self.pg is not None
        if self.pair is not None:  # whichever server is the primary now
            return self.pair.urls("127.0.0.1", DB_NAME)
        return self.pg.url(DB_NAME)

    def _replica_database_url(self, ns: netns.NetNamespace) -> str:
        assert self.pg is not None
        if self.pair is not None:
            return self.pair.urls(ns.host_addr, DB_NAME)
        return self.pg.url_from(ns, DB_NAME)

    def start_replicas(self, kube_env: dict[int, dict[str, str]]) -> None:
        """``kube_env[i]``: environment (KUBECONFIG, namespace) for replica ``i``."""
        assert self.pg is not None
        for i, ns in enumerate(self.namespaces):
            node_id = f"replica-{i + 1}"
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LEOFLOW_", "PG", "KUBE"))}
            env.update(self.timings.env())
            # ``python -m bench.chaos.skewed`` (clock_skew) must import bench from any cwd.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
            env.update({
                "LEOFLOW_DATABASE_URL": self._replica_database_url(ns),
                "LEOFLOW_CLUSTER": self.cluster_name,
                "LEOFLOW_NODE_ID": node_id,
                "LEOFLOW_HOST": ns.ns_addr,
                "LEOFLOW_PORT": str(API_PORT),
                "LEOFLOW_API_URL": f"http://{ns.ns_addr}:{API_PORT}",
                "LEOFLOW_AUTH": "disabled",
                "LEOFLOW_EXECUTOR": self.executor,
                "LEOFLOW_LOG_FORMAT": "json",
                "LEOFLOW_LOG_LEVEL": "INFO",
                "LEOFLOW_HOME": str(self.workdir / node_id),
                "LEOFLOW_DB_POOL_SIZE": "5",
                "LEOFLOW_PARALLELISM": "64",
                "LEOFLOW_LOG_ARCHIVE_URL": self.archive_dir.as_uri() if self.archive_dir else "off",
            })
            env.update(kube_env.get(i, {}))
            replica = Replica(node_id, ns, env, self.workdir / f"{node_id}.log")
            self.replicas.append(replica)
            replica.start()
        self._stack.callback(self.stop_replicas)

    def stop_replicas(self) -> None:
        """SIGTERM all at once (graceful handovers overlap), then wait for each."""
        for r in self.replicas:
            if r.running():
                r.expected_exit = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
                    os.kill(r.proc.pid, signal.SIGTERM)  # type: ignore[union-attr]
        for r in self.replicas:
            r.stop()

    def close(self) -> None:
        self._stack.close()

    # ------------------------------------------------------------------ observation
    def connect(self, timeout: float = 2) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=max(1, int(timeout)),
                               application_name="chaos-driver")

    def lock_holder(self, conn: psycopg.Connection[Any]) -> tuple[str, int] | None:
        """(node_id, backend pid) of the election lock's holder according to PostgreSQL."""
        row = conn.execute(
            "SELECT substr(a.application_name, %s), a.pid FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND a.application_name LIKE %s"
            "   AND a.datname = current_database() LIMIT 1",
            (len(LOCK_PREFIX) + 1, LOCK_PREFIX + "%")).fetchone()
        return (str(row[0]), int(row[1])) if row else None

    def replica(self, node_id: str) -> Replica | None:
        return next((r for r in self.replicas if r.node_id == node_id), None)

    def wait_ready(self, timeout: float = 90) -> None:
        """Every replica answers /healthz and somebody holds the lock."""
        deadline = time.monotonic() + timeout
        pending = {r.node_id for r in self.replicas}
        while pending and time.monotonic() < deadline:
            for r in self.replicas:
                if r.node_id in pending and r.healthy():
                    pending.discard(r.node_id)
                if not r.running():
                    raise RuntimeError(f"{r.node_id} exited at start-up (see {r.log_path})")
            time.sleep(0.3)
        if pending:
            raise RuntimeError(f"replicas not healthy after {timeout}s: {sorted(pending)}")
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error), self.connect() as conn:
                if self.lock_holder(conn):
                    return
            time.sleep(0.3)
        raise RuntimeError(f"no leader after {timeout}s")
