"""Stops the embedded PostgreSQL when its standalone process dies, however it dies.

``pg_ctl`` daemonises the server, so nothing ties its life to ours: a SIGKILLed (or OOM-killed)
standalone would leave PostgreSQL running until the next start. The standalone therefore spawns
this small process first, in its own session (a terminal's Ctrl-C or hang-up does not reach
it), connected by a pipe. The watchdog blocks reading the pipe; end-of-file means the standalone
is gone — after a clean stop it finds no server and exits, after a crash it stops the server
(fast shutdown, SIGKILL if that hangs). It also holds an inherited descriptor of the instance
lock, so no new standalone starts on this home until the cleanup is done.

If the watchdog itself is killed too, the next start still recovers the orphan through
``postmaster.pid`` (:meth:`leoflow.standalone.postgres.StandalonePostgres.recover_orphan`).

Usage (internal): ``python -m leoflow.standalone.watchdog DATA_DIR SOCKET_DIR``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from leoflow.standalone.pidfile import is_our_postmaster, postmaster_pid

WatchdogProcess = subprocess.Popen[bytes]


def spawn(data_dir: Path, socket_dir: Path, *, lock_fd: int | None) -> WatchdogProcess:
    """Start the watchdog; the caller keeps ``proc.stdin`` open for as long as it lives."""
    return subprocess.Popen(
        [sys.executable, "-m", "leoflow.standalone.watchdog", str(data_dir), str(socket_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
        pass_fds=(lock_fd,) if lock_fd is not None else (), close_fds=True)


def dismiss(proc: WatchdogProcess, timeout: float = 30.0) -> None:
    """Tell the watchdog we stopped cleanly (close its pipe) and wait for it to exit."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def watch(data_dir: Path, socket_dir: Path) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    pid = postmaster_pid(data_dir)
    if pid is None or not is_our_postmaster(pid, data_dir):
        return 0
    # Imported only now: the watchdog should cost (almost) nothing while it waits.
    from leoflow.standalone.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(data_dir, port=1, socket_dir=socket_dir, widen_parents=False)
    print(f"leoflow: standalone (parent {os.getppid()}) is gone; stopping its PostgreSQL (pid {pid})",
          file=sys.stderr)
    server.stop("fast", timeout=20)
    return 0


if __name__ == "__main__":
    raise SystemExit(watch(Path(sys.argv[1]), Path(sys.argv[2])))
