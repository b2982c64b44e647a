"""One standalone per ``LEOFLOW_HOME``: an exclusive ``flock`` on ``standalone.lock``.

The lock is taken before anything else is touched (no server started, no file written), so a
second ``leoflow standalone`` on the same home only reads the holder's pid and URL from the lock
file and fails with :class:`AlreadyRunning` — it cannot corrupt the running instance's data.

``flock`` belongs to the open file, not the process: the kernel drops it when the last
descriptor closes, so a crashed or SIGKILLed standalone never leaves a stale lock behind. The
watchdog (:mod:`leoflow.standalone.watchdog`) inherits the descriptor and keeps the lock while it
stops a killed instance's PostgreSQL; a new instance that finds the lock held by a *dead* pid
therefore waits (bounded) for that cleanup instead of refusing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from leoflow.errors import LeoflowError


class AlreadyRunning(LeoflowError):
    """Another standalone instance is running on this LEOFLOW_HOME."""


@dataclass(frozen=True)
class Holder:
    pid: int | None
    url: str | None


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class InstanceLock:
    """The exclusive right to run standalone mode on one home directory."""

    def __init__(self, lock_file: Path) -> None:
        self.path = lock_file
        self.fd: int | None = None

    def read_holder(self) -> Holder:
        try:
            data = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return Holder(None, None)
        pid = data.get("pid")
        url = data.get("url")
        return Holder(pid if isinstance(pid, int) else None, url if isinstance(url, str) else None)

    def acquire(self, *, url: str, cleanup_wait: float = 30.0) -> None:
        """Take the lock and record our pid and URL; raise :class:`AlreadyRunning` if held."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + cleanup_wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    os.close(fd)
                    raise
            holder = self.read_holder()
            # Held by a dead pid: its watchdog is still stopping the old PostgreSQL; wait for it.
            if alive(holder.pid) or time.monotonic() > deadline:
                os.close(fd)
                where = holder.url or "starting up"
                raise AlreadyRunning(f"leoflow standalone is already running on {self.path.parent} "
                                     f"(pid {holder.pid or 'unknown'}, {where})")
            time.sleep(0.1)
        self.fd = fd
        payload = json.dumps({"pid": os.getpid(), "url": url}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, payload, 0)

    def release(self) -> None:
        """Clear the record and drop the lock (idempotent)."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
        os.close(self.fd)
        self.fd = None
