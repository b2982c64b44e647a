"""A real PgBouncer (Debian's package) in front of a test's PostgreSQL.

Configured like a stock install: no ``ignore_startup_parameters`` (so a client sending the
startup parameter ``options`` is refused, as Debian's PgBouncer does), ``auth_type = trust``,
one ``[databases]`` entry per database the test routes through it. :meth:`PgBouncer.switch`
edits the ini file and reloads it (SIGHUP) while clients stay connected — the runtime switch
an operator makes.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from leoflow.standalone.embedded import free_port

PGBOUNCER = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class PgBouncer:
    """One pgbouncer process routing to the databases of ``server_url``'s server."""

    def __init__(self, server_url: str, workdir: Path, *, pool_mode: str = "session", pool_size: int = 20) -> None:
        assert PGBOUNCER is not None, "pgbouncer is not installed"
        parts = urlsplit(server_url)
        self.server_host, self.server_port = parts.hostname or "127.0.0.1", parts.port or 5432
        # Its own directory in /tmp: pgbouncer drops to ``nobody`` and must re-read the file on a
        # reload, which it cannot inside a test's 0700 tmp_path.
        self.dir = Path(tempfile.mkdtemp(prefix="leoflow-pgbouncer-"))
        self.dir.chmod(0o755)
        self.log = workdir / "pgbouncer.log"
        self.port = free_port()
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def ini(self) -> Path:
        return self.dir / "pgbouncer.ini"

    def url(self, database_url: str) -> str:
        """``database_url`` (on the real server) routed through this pooler."""
        parts = urlsplit(database_url)
        return parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{self.port}").geturl()

    def _write(self) -> None:
        (self.dir / "userlist.txt").write_text('"postgres" ""\n')
        self.ini.write_text(
            f"[databases]\n* = host={self.server_host} port={self.server_port} user=postgres\n"
            f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'userlist.txt'}\n"
            f"pool_mode = {self.pool_mode}\nmax_client_conn = 200\ndefault_pool_size = {self.pool_size}\n")
        for f in (self.ini, self.dir / "userlist.txt"):
            f.chmod(0o644)

    def start(self) -> PgBouncer:
        self._write()
        assert PGBOUNCER is not None, "pgbouncer is not installed"
        args = [PGBOUNCER, str(self.ini)]
        if os.geteuid() == 0:
            args[1:1] = ["-u", "nobody"]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while not _port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def switch(self, pool_mode: str) -> None:
        """Edit the ini file and reload it (SIGHUP), clients staying connected."""
        assert self.proc is not None
        self.pool_mode = pool_mode
        self._write()
        self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
