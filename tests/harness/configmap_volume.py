"""A directory written the way the kubelet writes a ConfigMap volume, updates included.

The kubelet's atomic writer (``pkg/volume/util/atomic_writer.go``) keeps the real files in a
timestamped hidden directory, points the symlink ``..data`` at it, and exposes each key as a
symlink ``<key> -> ..data/<key>``. An update writes a *new* timestamped directory, swaps
``..data`` with a rename (atomic), adds or removes the per-key links, and deletes the old
directory. Readers that follow the top-level names therefore see the old set or the new set,
and the timestamped directories are visible as dot-entries next to them — which is exactly
what a DAG directory reader has to cope with.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

DATA = "..data"
_serial = itertools.count()


class ConfigMapVolume:
    """One mounted ConfigMap at ``path``; :meth:`write` replaces its whole content atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def write(self, data: dict[str, str]) -> None:
        stamp = f"..2026_11_23_10_00_00.{os.getpid()}{next(_serial):06d}"
        fresh = self.path / stamp
        fresh.mkdir()
        for key, text in data.items():
            (fresh / key).write_text(text)
        old = os.readlink(self.path / DATA) if (self.path / DATA).is_symlink() else None
        tmp = self.path / "..data_tmp"
        os.symlink(stamp, tmp)
        os.rename(tmp, self.path / DATA)  # the atomic swap
        for key in data:
            link = self.path / key
            if not link.is_symlink():
                os.symlink(f"{DATA}/{key}", link)
        for entry in self.path.iterdir():
            if not entry.name.startswith(".") and entry.name not in data:
                entry.unlink()
        if old is not None:
            shutil.rmtree(self.path / old)
