"""A streaming standby for the chaos soak, and the ``db_failover`` fault it makes possible.

With ``--standby`` the soak runs a second server, cloned from the first with
``pg_basebackup -R`` (asynchronous streaming, the default of most HA set-ups), listening on the
same addresses as the primary on a port of its own. Replicas reach the database through the libpq
multi-host URL ``postgresql://postgres@<link>:<p1>,<link>:<p2>/leoflow?target_session_attrs=read-write``,
the driver and the audit through the loopback twin of it, so all follow whichever server is the
primary.

``db_failover``: kill the primary (immediate stop, no WAL handed over: whatever the standby had
not received is lost, as in an unplanned asynchronous failover), promote the standby (a new
timeline: every earlier term is void there, ADR 0003), then rebuild the old primary as the new
standby of the promoted one (same data directory and port, ``pg_basebackup -R``), so the next
failover can go the other way. Issue 17 §4.

Failure semantics: a failed rebuild raises (the soak stops and reports); the promotion waits at
most 60 s for the standby to leave recovery.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import time
from pathlib import Path

import psycopg

from leoflow.standalone.embedded import SERVICE_USER
from tests.harness import netns


def multi_host_url(hosts: list[tuple[str, int]], dbname: str) -> str:
    listed = ",".join(f"{host}:{port}" for host, port in hosts)
    return f"postgresql://postgres@{listed}/{dbname}?target_session_attrs=read-write"


class StreamingStandby:
    """The soak's two servers: ``primary`` and ``standby``, swapped at each failover."""

    def __init__(self, primary: netns.VethPostgres, workdir: Path) -> None:
        self.primary = primary
        base = workdir / "pg-standby"
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o755)
        self.standby = netns.VethPostgres(base / "data", primary.namespaces, fast_unsafe=False,
                                          socket_dir=base / "sock")
        self.failovers = 0

    def urls(self, host: str, dbname: str) -> str:
        """The multi-host URL through ``host`` (loopback, or a namespace's link address)."""
        return multi_host_url([(host, self.primary.port), (host, self.standby.port)], dbname)

    def start(self) -> None:
        """Clone the primary into the standby and start streaming (the primary is running)."""
        self._clone(source=self.primary, into=self.standby)

    def stop(self) -> None:
        self.standby.stop("immediate")

    def fail_over(self) -> str:
        """Lose the primary, promote the standby, rebuild the old primary as the new standby; a note."""
        lost = self._unreplicated_bytes()
        self.primary.stop("immediate")
        self.standby.promote()
        deadline = time.monotonic() + 60
        while not self._is_primary(self.standby):
            if time.monotonic() > deadline:
                raise RuntimeError("the standby did not leave recovery within 60 s")
            time.sleep(0.1)
        old = self.primary
        self.primary, self.standby = self.standby, old
        self.failovers += 1
        self._clone(source=self.primary, into=self.standby)
        return f"promoted :{self.primary.port}; {lost} bytes of WAL not yet replayed were lost"

    # ------------------------------------------------------------------ helpers
    def _unreplicated_bytes(self) -> int | str:
        try:
            with psycopg.connect(self.primary.url(), autocommit=True, connect_timeout=2) as conn:
                row = conn.execute("SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), replay_lsn)), -1)"
                                   "::bigint FROM pg_stat_replication").fetchone()
            return int(row[0]) if row else "unknown"
        except psycopg.Error:
            return "unknown"

    @staticmethod
    def _is_primary(server: netns.VethPostgres) -> bool:
        try:
            with psycopg.connect(server.url(), autocommit=True, connect_timeout=2) as conn:
                return conn.execute("SELECT NOT pg_is_in_recovery()").fetchone() == (True,)
        except psycopg.Error:
            return False

    @staticmethod
    def _clone(source: netns.VethPostgres, into: netns.VethPostgres) -> None:
        into.stop("immediate")
        shutil.rmtree(into.data_dir, ignore_errors=True)
        into.data_dir.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(source.bin_dir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(source.port),
                        "-U", "postgres", "-D", str(into.data_dir), "-R", "-X", "stream", "-c", "fast"],
                       check=True, capture_output=True, timeout=300)
        if os.geteuid() == 0:
            user = pwd.getpwnam(SERVICE_USER)
            os.chown(into.data_dir, user.pw_uid, user.pw_gid)
            for root, dirs, files in os.walk(into.data_dir):
                for name in [*dirs, *files]:
                    os.chown(os.path.join(root, name), user.pw_uid, user.pw_gid)
        into.data_dir.chmod(0o700)
        into.start()
        into.wait_ready()
