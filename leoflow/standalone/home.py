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
      tasks/              the local executor's tries: ``0700``, logs ``0600`` (they hold runs' conf)

The home directory is created ``0700``: it holds a credential. **As root**, PostgreSQL runs as an
unprivileged helper user (:mod:`leoflow.standalone.embedded`), which cannot enter a ``0700``
home — and standalone never widens the permissions of a directory it did not create (an older
version added ``o+x`` to the home and all its parents, so every local user could reach the task
logs). So as root the server's directory (``data``, ``socket``, ``postgres.log``) lives outside
the home, in ``/var/lib/leoflow/postgres/<digest of the home's path>`` (root's, ``0711``: searchable,
not listable; ``data`` and ``socket`` in it are the helper's, ``0700``); ``postgres/port`` and
``postgres/password`` stay in the home. A home whose data an older version put in
``postgres/data`` keeps it there.
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
    def server_dir(self) -> Path:
        """The directory of the server's data, socket and log (outside the home when we are root)."""
        if os.geteuid() != 0 or (self.postgres_dir / "data").exists():
            return self.postgres_dir
        import hashlib  # here: the CLI's client verbs locate the token file without it

        from leoflow.standalone.embedded import SHARED_ROOT

        return SHARED_ROOT / "postgres" / hashlib.sha256(str(self.root).encode()).hexdigest()[:16]

    @property
    def data_dir(self) -> Path:
        return self.server_dir / "data"

    @property
    def port_file(self) -> Path:
        return self.postgres_dir / "port"

    @property
    def password_file(self) -> Path:
        return self.postgres_dir / "password"

    @property
    def socket_dir(self) -> Path:
        """``postgres/socket``, or a short per-home directory in /tmp when that path is too long."""
        preferred = self.server_dir / "socket"
        if len(str(preferred)) <= _MAX_SOCKET_DIR:
            return preferred
        import hashlib  # here: the CLI's client verbs locate the token file without them
        import tempfile

        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"leoflow-{os.geteuid()}-{digest}"

    def create(self) -> None:
        """Make the home directory (``0700`` when we create it; an existing one is left alone)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def create_server_dirs(self) -> None:
        """Make ``postgres/`` (``0700``) and, as root, the server's directory outside the home."""
        self.create()
        self.postgres_dir.mkdir(mode=0o700, exist_ok=True)
        if self.server_dir != self.postgres_dir:
            # Root's own, searchable (not listable) so the helper user reaches the directories it owns below.
            self.server_dir.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
            self.server_dir.mkdir(mode=0o711, exist_ok=True)
