"""Is the server named in ``postmaster.pid`` really ours? (Cheap: no database imports.)

A ``postmaster.pid`` outlives its server after a crash, and after a reboot its pid may belong to
an unrelated process. Before anything signals that pid we check, through ``/proc/PID/cmdline``,
that it is a ``postgres`` executable started on *this* data directory.
"""

from __future__ import annotations

import os
from pathlib import Path


def postmaster_pid(data_dir: Path) -> int | None:
    """The pid recorded in ``data_dir/postmaster.pid`` if a process with that pid is alive."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def is_our_postmaster(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is a ``postgres`` process started on ``data_dir``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if not argv or not Path(argv[0].decode(errors="replace")).name.startswith("postgres"):
        return False
    return str(Path(data_dir).resolve()).encode() in argv


def postmasters_on(data_dir: Path) -> list[int]:
    """Every live ``postgres`` process started on ``data_dir`` (by ``/proc``), whatever its pid file says.

    Why: a stop that lands while ``pg_ctl start`` runs can find ``postmaster.pid`` not written yet
    (created, still empty) or not created at all, while the postmaster is already starting.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and is_our_postmaster(int(entry.name), data_dir):
            found.append(int(entry.name))
    return found
