"""Reading a directory of DAG files — consistently, even while Kubernetes swaps it underneath.

``leoflow dags sync DIR`` and the leader's sync of ``LEOFLOW_DAGS_DIR`` read a directory tree
into :class:`~leoflow.model.files.dag_files.DagFile` objects: every ``*.yaml``, ``*.yml`` and
``*.json`` file at any depth (names relative to the root, sorted), symlinks followed (with
cycle protection), and every entry whose name starts with ``.`` skipped.

Skipping dot-entries is what makes a mounted ConfigMap read correctly. The kubelet writes a
ConfigMap volume as ``..2026_11_23_10_00_00.123/etl.yaml`` (the real files), a symlink
``..data`` to that directory, and one symlink per key (``etl.yaml -> ..data/etl.yaml``); an
update writes a new timestamped directory and swaps ``..data`` atomically. Reading the
top-level names therefore sees each file once. A swap *during* a read could still mix old and
new files, so :func:`read_dag_directory` records the layout (each file's resolved path, inode,
size and modification time) before and after reading and reads again until both agree.

The snapshot's :attr:`~DirectorySnapshot.fingerprint` is a hash of names and contents: the
leader compares it every few seconds and syncs only when it changed.

Failure semantics: a missing or unreadable root raises :class:`DagDirectoryError` (a sync
must never mistake "cannot read" for "empty" — that would prune every DAG); an unreadable or
non-UTF-8 file becomes a problem of the snapshot, reported with the others.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from leoflow.errors import LeoflowError
from leoflow.model.files.dag_files import MAX_FILES, DagFile, is_dag_file
from leoflow.model.files.documents import DocumentError, Location

#: Largest directory read: 32 ConfigMaps of 1 MiB (the chart's limit), with room to spare.
MAX_DIRECTORY_BYTES = 64 * 1024 * 1024
#: Deepest subdirectory followed.
MAX_DEPTH = 16
#: Reads of a directory that keeps changing underneath before giving up for this round.
READ_ATTEMPTS = 5


class DagDirectoryError(LeoflowError):
    """The DAG directory cannot be read as a whole (missing, not a directory, too large, changing)."""


@dataclass(frozen=True)
class DirectorySnapshot:
    """The DAG files of a directory at one moment, and the problems reading them."""

    files: tuple[DagFile, ...]
    problems: tuple[DocumentError, ...]
    fingerprint: str


_Layout = tuple[tuple[str, str, int, int, int], ...]


def read_dag_directory(root: Path) -> DirectorySnapshot:
    """Read every DAG file under ``root`` (a directory, or one file) consistently; see the module docstring."""
    for _ in range(READ_ATTEMPTS):
        before = _layout(root)
        snapshot = _read(root, before)
        if _layout(root) == before:
            return snapshot
    raise DagDirectoryError(f"{root}: the files kept changing while being read; trying again later")


def _dag_paths(root: Path) -> list[tuple[str, Path]]:
    """``(relative name, path)`` of every DAG file under ``root``, sorted by name."""
    try:
        if root.is_file():
            return [(root.name, root)]
        if not root.is_dir():
            raise DagDirectoryError(f"{root}: no such directory")
    except OSError as exc:
        raise DagDirectoryError(f"{root}: cannot read ({exc.strerror})") from None
    found: list[tuple[str, Path]] = []
    seen: set[Path] = set()
    pending: list[tuple[Path, str, int]] = [(root, "", 0)]
    while pending:
        directory, prefix, depth = pending.pop()
        try:
            real = directory.resolve()
            if real in seen:  # a symlink loop, or two links to one directory
                continue
            seen.add(real)
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            raise DagDirectoryError(f"{directory}: cannot read ({exc.strerror})") from None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            name = prefix + entry.name
            try:
                if entry.is_dir():
                    if depth < MAX_DEPTH:
                        pending.append((Path(entry.path), name + "/", depth + 1))
                elif entry.is_file() and is_dag_file(entry.name):
                    found.append((name, Path(entry.path)))
            except OSError:  # vanished or a dangling link: not a file of this snapshot
                continue
        if len(found) > MAX_FILES:
            raise DagDirectoryError(f"{root}: more than {MAX_FILES} DAG files")
    return sorted(found)


def _layout(root: Path) -> _Layout:
    entries = []
    for name, path in _dag_paths(root):
        try:
            stat = path.stat()
            entries.append((name, os.path.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns))
        except OSError:
            entries.append((name, "", 0, 0, 0))
    return tuple(entries)


def _read(root: Path, layout: _Layout) -> DirectorySnapshot:
    total = sum(size for *_, size, _mtime in layout)
    if total > MAX_DIRECTORY_BYTES:
        raise DagDirectoryError(f"{root}: {total} bytes of DAG files; at most {MAX_DIRECTORY_BYTES} are read")
    files: list[DagFile] = []
    problems: list[DocumentError] = []
    digest = hashlib.sha256()
    base = root if root.is_dir() else root.parent
    for name, *_ in layout:
        try:
            raw = (base / name).read_bytes()
        except OSError as exc:
            problems.append(DocumentError(name, f"cannot read ({exc.strerror})"))
            digest.update(f"{name}\0unreadable\0".encode())
            continue
        digest.update(f"{name}\0{len(raw)}\0".encode() + raw)
        try:
            files.append(DagFile(name, raw.decode("utf-8-sig")))
        except UnicodeDecodeError as exc:
            before = raw[:exc.start]
            where = Location(before.count(b"\n") + 1, exc.start - (before.rfind(b"\n") + 1) + 1)
            problems.append(DocumentError(name, "is not UTF-8 text", location=where))
    return DirectorySnapshot(tuple(files), tuple(problems), digest.hexdigest())
