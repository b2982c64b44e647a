"""Finding processes from /proc: which PostgreSQL servers serve a given data directory."""

from __future__ import annotations

import os
import time
from pathlib import Path


def postgres_pids(data_dir: Path) -> list[int]:
    """Live ``postgres`` processes (postmaster and backends) whose command line names ``data_dir``."""
    wanted = str(Path(data_dir).resolve()).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]).startswith(b"postgres") and wanted in argv:
            found.append(int(entry.name))
    return found


def wait_until_gone(data_dir: Path, timeout: float = 30.0) -> list[int]:
    """Poll until no PostgreSQL serves ``data_dir``; returns the survivors (empty on success)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = postgres_pids(data_dir)
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.1)
