"""Where standalone mode keeps its state inside ``LEOFLOW_HOME``.

One place names every path, so the instance lock, the token, the embedded server and the tests
agree on the layout::

    LEOFLOW_HOME/
      standalone.lock     flock held while an instance runs; holds its pid and URL (JSON)
      admin-token         the generated admin API token (mode 0600)
      postgres/data       the embedded server's data directory (owned by the server's OS user)
      postgres/socket     its unix socket directory
      postgres/port       the loopback port it listened on last time (reused when free)
      postgres/password   the generated password of its ``postgres`` role (mode 0600)
      postgres/postgres.log

The home directory is created ``0700``: it holds a credential. When we run as root the embedded
server runs as an unprivileged user, which then needs *search* (``o+x``) permission on the home
and its parents to reach its data directory; :mod:`leoflow.standalone.embedded` adds exactly that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: Longest unix socket path the kernel accepts is 107 bytes; PostgreSQL appends ``/.s.PGSQL.NNNNN``.
_MAX_SOCKET_DIR = 107 - len("/.s.PGSQL.65535")


@dataclass(frozen=True)
class StandaloneHome:
    root: Path

    @classmethod
    def at(cls, root: Path) -> StandaloneHome:
        return cls(Path(root).expanduser().resolve())

    @property
    def lock_file(self) -> Path:
        return self.root / "standalone.lock"

    @property
    def token_file(self) -> Path:
        return self.root / "admin-token"

    @property
    def postgres_dir(self) -> Path:
        return self.root / "postgres"

    @property
    def data_dir(self) -> Path:
        return self.postgres_dir / "data"

    @property
    def port_file(self) -> Path:
        return self.postgres_dir / "port"

    @property
    def password_file(self) -> Path:
        return self.postgres_dir / "password"

    @property
    def socket_dir(self) -> Path:
        """``postgres/socket``, or a short per-home directory in /tmp when that path is too long."""
        preferred = self.postgres_dir / "socket"
        if len(str(preferred)) <= _MAX_SOCKET_DIR:
            return preferred
        import hashlib  # here: the CLI's client verbs locate the token file without them
        import tempfile

        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"leoflow-{os.geteuid()}-{digest}"

    def create(self) -> None:
        """Make the home directory (``0700`` when we create it; an existing one is left alone)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
