"""A real primary and an asynchronous streaming standby, from the same binaries as every test server.

``pg_basebackup -R`` clones the primary into a standby that streams its WAL (asynchronous, the
default of most HA set-ups); :meth:`StreamingPair.promote` ends the standby's recovery, which
starts a new timeline. Tests lose the primary's newest transactions the way an asynchronous
failover does: detach the standby (:meth:`StreamingPair.detach`: it stays up but receives nothing
more), write on the primary, kill the primary, promote the standby.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from leoflow.standalone.embedded import SERVICE_USER, EmbeddedPostgres, find_bin_dir
from tests.harness.postgres import private_server


@dataclass
class StreamingPair:
    primary: EmbeddedPostgres
    standby: EmbeddedPostgres

    def multi_host_url(self, dbname: str) -> str:
        """The libpq multi-host URL an HA client uses: whichever host accepts writes."""
        return (f"postgresql://postgres@{self.primary.host}:{self.primary.port},{self.standby.host}:"
                f"{self.standby.port}/{dbname}?target_session_attrs=read-write")

    def wait_caught_up(self, timeout: float = 30) -> None:
        """Until the standby has replayed everything the primary has written so far.

        The insert position, not ``pg_current_wal_lsn()`` (the write position): the test servers
        commit asynchronously, so a commit record may still sit in WAL buffers behind the latter.
        """
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        target = row[0]
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.standby.url(), autocommit=True) as conn:
            while True:
                done = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()
                if done and done[0]:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError("the standby did not catch up")
                time.sleep(0.05)

    def detach(self, timeout: float = 30) -> None:
        """Stop streaming (the standby stays up, in recovery): later writes of the primary never reach it."""
        with psycopg.connect(self.standby.url(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET primary_conninfo TO ''")
            conn.execute("SELECT pg_reload_conf()")
            deadline = time.monotonic() + timeout
            while conn.execute("SELECT count(*) FROM pg_stat_wal_receiver").fetchone() != (0,):
                if time.monotonic() > deadline:
                    raise AssertionError("the standby kept streaming")
                time.sleep(0.05)

    def promote(self) -> None:
        self.standby.promote()
        deadline = time.monotonic() + 30
        while True:
            with psycopg.connect(self.standby.url(), autocommit=True) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            if row == (False,):
                return
            if time.monotonic() > deadline:
                raise AssertionError("the standby did not leave recovery")
            time.sleep(0.05)


@contextmanager
def streaming_pair(dbname: str = "leoflow") -> Iterator[StreamingPair]:
    """A primary with ``dbname`` (empty) and a streaming standby of it, both stopped at the end."""
    with private_server() as primary:
        primary.create_database(dbname)
        base = Path(tempfile.mkdtemp(prefix="leoflow-standby-"))
        base.chmod(0o755)
        standby: EmbeddedPostgres | None = None
        try:
            subprocess.run([str(find_bin_dir() / "pg_basebackup"), "-h", primary.host, "-p", str(primary.port),
                            "-U", "postgres", "-D", str(base / "data"), "-R", "-X", "stream", "-c", "fast"],
                           check=True, capture_output=True, timeout=120)
            if os.geteuid() == 0:
                user = pwd.getpwnam(SERVICE_USER)
                for root, dirs, files in os.walk(base):
                    for name in [*dirs, *files]:
                        os.chown(os.path.join(root, name), user.pw_uid, user.pw_gid)
            standby = EmbeddedPostgres(base / "data", socket_dir=base / "sock", fast_unsafe=True)
            standby.start()
            standby.wait_ready()
            yield StreamingPair(primary, standby)
        finally:
            if standby is not None:
                standby.stop("immediate")
            shutil.rmtree(base, ignore_errors=True)
