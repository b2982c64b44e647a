"""Faults, injected at random into the leader (or the database), and a watcher of who leads.

Kinds (each one a real fault, no mocks):

- ``sigkill`` / ``sigterm``: signal the leader's process; it is restarted by the supervisor.
- ``sigstop``: freeze the leader for twice its lease plus slack (a GC pause, a hung VM), then
  ``SIGCONT`` — the ex-leader must not act after it wakes up.
- ``terminate_lock``: ``pg_terminate_backend`` on the lock session
  (``application_name = leoflow-lock:<node>``).
- ``pg_restart``: stop PostgreSQL (fast or immediate) and start it again.
- ``db_failover`` (with ``--standby``): kill the primary, promote the asynchronous streaming
  standby, rebuild the old primary as the new standby (:mod:`bench.chaos.standby`); replicas
  follow through the multi-host URL with ``target_session_attrs=read-write``.
- ``partition``: iptables DROP between the leader's namespace and PostgreSQL's port, both ways,
  for twice the lease plus slack, then heal. The leader still reaches Kubernetes.
- ``rolling_restart``: a deploy rolls every replica, leader first: SIGTERM, wait for its exit,
  start it again, wait until it answers ``/healthz``, then the next one (issue 17 §1: nothing
  may fail). In place, one replica down at a time, as a StatefulSet rolls (a Deployment starts
  the replacement first; ``tests/executor/test_rolling_deploy.py`` does that one).
- ``log_api_errors``: the API server answers every pod log read with 500 (a ``NotReady`` node)
  for twice the lease plus slack, then heals: logs must still all be shipped, late (issue 17 §3).
- ``clock_skew``: restart the leader with its wall clock 60 s off (ahead or behind; a replica
  already off flips to the other side), kept across its later restarts
  (:mod:`bench.chaos.skewed`): no task may time out or be retried early (issue 17 §6).

:class:`LeaderWatch` samples the lock holder from ``pg_locks`` every 0.25 s for the timeline.
Every fault is recorded with its wall-clock time, target, and the term that led at the time.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.chaos.cluster import Cluster, Replica
from tests.harness.fake_k8s import FakeKubernetes, Fault

log = logging.getLogger(__name__)

KINDS = ("sigkill", "sigterm", "sigstop", "terminate_lock", "pg_restart", "partition", "rolling_restart",
         "log_api_errors", "clock_skew")
#: Seconds a ``clock_skew`` replica's wall clock is off (the issue's test value).
SKEW = 60.0
#: Fault kinds that need a streaming standby (``--standby``).
STANDBY_KINDS = ("db_failover",)


@dataclass
class FaultRecord:
    kind: str
    at: float  # wall clock
    target: str | None
    term: int | None
    ended: float | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "at": self.at, "target": self.target, "term": self.term,
                "ended": self.ended, "note": self.note}


@dataclass
class LeaderWatch:
    """Background sampler of (time, holder node) from PostgreSQL's lock table."""

    cluster: Cluster
    interval: float = 0.25
    samples: list[tuple[float, str | None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="leader-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)

    def _loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.is_set():
            holder: str | None = None
            try:
                if conn is None or conn.closed:
                    conn = self.cluster.connect(timeout=1)
                found = self.cluster.lock_holder(conn)
                holder = found[0] if found else None
            except psycopg.Error:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
                conn = None
            self.samples.append((time.time(), holder))
            self._stop.wait(self.interval)
        if conn is not None:
            conn.close()


class Injector:
    """Picks faults (seeded; every kind once per shuffled round) and applies them to the leader."""

    def __init__(self, cluster: Cluster, rng: random.Random, kinds: tuple[str, ...] = KINDS, *,
                 kubernetes: FakeKubernetes | None = None) -> None:
        self.cluster = cluster
        self.kubernetes = kubernetes
        self.rng = rng
        self.kinds = kinds
        self.records: list[FaultRecord] = []
        self._round: list[str] = []

    def next_kind(self) -> str:
        if not self._round:
            self._round = list(self.kinds)
            self.rng.shuffle(self._round)
        return self._round.pop()

    def _leader(self, timeout: float = 30) -> tuple[str, int, int | None] | None:
        """(node, lock backend pid, newest term) once somebody leads, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error), self.cluster.connect() as conn:
                holder = self.cluster.lock_holder(conn)
                row = conn.execute("SELECT term, node_id FROM cluster_leadership WHERE cluster = %s",
                                   (self.cluster.cluster_name,)).fetchone()
                if holder and row and row[1] == holder[0]:
                    replica = self.cluster.replica(holder[0])
                    if replica is not None and replica.running() and not replica.stopped:
                        return holder[0], holder[1], int(row[0])
            time.sleep(0.25)
        return None

    def inject(self, kind: str) -> FaultRecord:
        hold = 2 * self.cluster.timings.leader_lease + 2.0
        if kind == "db_failover":
            record = FaultRecord(kind, time.time(), "postgres", self._current_term())
            self.records.append(record)
            record.note = self.cluster.fail_over()
            record.ended = time.time()
            return record
        if kind == "pg_restart":
            record = FaultRecord(kind, time.time(), "postgres", self._current_term())
            self.records.append(record)
            mode = self.rng.choice(("fast", "immediate"))
            pg = self.cluster.pg
            assert pg is not None
            pg.stop(mode)
            time.sleep(self.rng.uniform(1.0, 3.0))
            pg.start()
            pg.wait_ready()
            record.ended, record.note = time.time(), mode
            return record
        if kind == "log_api_errors":
            assert self.kubernetes is not None, "log_api_errors needs the fake API server"
            record = FaultRecord(kind, time.time(), "kubernetes", self._current_term())
            self.records.append(record)
            self.kubernetes.inject(Fault("log", code=500, reason="InternalError", times=1_000_000,
                                         message="the node is NotReady (injected)"))
            try:
                time.sleep(hold)
            finally:
                self.kubernetes.clear_faults()
            record.ended = time.time()
            return record
        leader = self._leader()
        if leader is None:
            record = FaultRecord(kind, time.time(), None, None, time.time(), "skipped: nobody leads")
            self.records.append(record)
            return record
        node, backend_pid, term = leader
        replica = self.cluster.replica(node)
        assert replica is not None
        record = FaultRecord(kind, time.time(), node, term)
        self.records.append(record)
        if kind == "sigkill":
            replica.signal(signal.SIGKILL)
        elif kind == "sigterm":
            replica.signal(signal.SIGTERM)
        elif kind == "sigstop":
            replica.signal(signal.SIGSTOP)
            time.sleep(hold)
            replica.signal(signal.SIGCONT)
        elif kind == "terminate_lock":
            with self.cluster.connect() as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))
        elif kind == "partition":
            replica.ns.partition(port=self.cluster.pg.port if self.cluster.pg else None)
            try:
                time.sleep(hold)
            finally:
                replica.ns.heal()
        elif kind == "rolling_restart":
            others = [r for r in self.cluster.replicas if r is not replica]
            record.note = " ".join(f"{r.node_id}:{self._restart(r)}" for r in [replica, *others])
        elif kind == "clock_skew":
            replica.clock_offset = -replica.clock_offset if replica.clock_offset else self.rng.choice((SKEW, -SKEW))
            record.note = f"{replica.node_id} clock {replica.clock_offset:+g}s; exit {self._restart(replica)}"
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        record.ended = time.time()
        return record

    def _restart(self, replica: Replica) -> str:
        """SIGTERM, wait for the graceful exit, start again, wait until healthy; how it exited."""
        grace = self.cluster.timings.shutdown_grace + self.cluster.timings.leader_lease
        code = replica.stop(timeout=grace + 20)
        replica.start()
        replica.wait_healthy()
        return "not running" if code is None else str(code)

    def _current_term(self) -> int | None:
        with contextlib.suppress(psycopg.Error), self.cluster.connect() as conn:
            row = conn.execute("SELECT term FROM cluster_leadership WHERE cluster = %s",
                               (self.cluster.cluster_name,)).fetchone()
            return int(row[0]) if row else None
        return None

    def recover_all(self) -> None:
        """Undo lingering faults: heal partitions, resume frozen replicas, make sure PG is up."""
        for r in self.cluster.replicas:
            if r.ns.partitioned:
                r.ns.heal()
            if r.stopped:
                r.signal(signal.SIGCONT)
        pg = self.cluster.pg
        if pg is not None and pg.running_pid() is None:
            pg.start()
            pg.wait_ready()
