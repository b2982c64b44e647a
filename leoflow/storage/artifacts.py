"""Moving artifacts: a path becomes one ``.tar.gz`` object, and an object becomes a path again.

Used by the local executor itself and, on Kubernetes, by ``leoflow artifacts`` in the pod's init
container and upload sidecar — the same code on both, so an artifact packed on one unpacks on the
other. Memory stays bounded whatever the size: the archive is written to a temporary file beside
the artifacts (compressing as it goes), uploaded from that file in parts, and downloaded into a
temporary file before it is unpacked.

Bounds (:mod:`leoflow.model.limits`): the bytes and entries of an output are counted *before* it
is packed, so an output over ``ARTIFACT_BYTES`` or ``ARTIFACT_FILES`` costs a directory walk, not
an upload; an archive is checked again before it is unpacked (an object written by anything else
must not fill the consumer's disk), and unpacked with tarfile's ``data`` filter, which refuses
absolute names, ``..``, links leaving the directory and device files.

Failure semantics: nothing here raises for what a task left behind — a missing path, a size over a
limit, an unreadable file come back as a :class:`PackedArtifact` with ``missing`` or ``problem``;
storage failures come out as :class:`~leoflow.storage.objects.StorageError`, a corrupt or
oversized archive as :class:`ArtifactRejected`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from leoflow.errors import LeoflowError
from leoflow.model import limits
from leoflow.model.artifacts.declared import OutputArtifact
from leoflow.model.artifacts.objects import ArtifactKind, PackedArtifact, artifact_key
from leoflow.storage.log_chunks import LEVEL
from leoflow.storage.objects import ObjectStore, StorageError

#: Bytes read at a time while hashing or copying.
_BLOCK = 1024 * 1024
MAX_BYTES = int(limits.ARTIFACT_BYTES.maximum)
MAX_TRY_BYTES = int(limits.ARTIFACT_TRY_BYTES.maximum)


class ArtifactRejected(LeoflowError):
    """An artifact's archive is corrupt, over a limit, or holds names that would leave its directory."""


def measure(source: Path) -> tuple[ArtifactKind, int, int]:
    """``(kind, bytes, entries)`` of a file or directory, links not followed; OSError if it is gone."""
    info = source.lstat()
    if stat.S_ISREG(info.st_mode):
        return "file", info.st_size, 1
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{source.name} is neither a file nor a directory")
    size, entries = 0, 1
    for root, dirs, files in os.walk(source):
        for name in (*dirs, *files):
            entries += 1
            with_info = os.lstat(os.path.join(root, name))
            if stat.S_ISREG(with_info.st_mode):
                size += with_info.st_size
        if entries > limits.ARTIFACT_FILES.maximum:
            break
    return "directory", size, entries


def pack(source: Path, kind: ArtifactKind, target: Path) -> None:
    """Write ``source`` as a gzip-compressed tar to ``target``: a directory's entries under ``.``,
    a file as its one member. Only regular files, directories and symbolic links are kept."""
    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if not (info.isreg() or info.isdir() or info.issym()):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(target, "w:gz", compresslevel=LEVEL, format=tarfile.PAX_FORMAT) as archive:
        archive.add(source, arcname="." if kind == "directory" else source.name, recursive=True, filter=keep)


def digest_of(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            sha.update(block)
    return f"sha256:{sha.hexdigest()}"


def unpack(archive_path: Path, dest: Path) -> int:
    """Unpack an artifact's archive at ``dest`` (a directory, or a file for a one-file artifact);
    ArtifactRejected when it is corrupt, over a limit or unsafe. Returns the bytes unpacked."""
    try:
        with tarfile.open(archive_path, "r:gz") as archive:
            members = []
            size = 0
            for member in archive:
                members.append(member)
                if member.name.startswith("/") or ".." in member.name.split("/"):  # never in one Leoflow packed
                    raise ArtifactRejected(f"the archive holds a name outside its directory: {member.name[:200]!r}")
                size += member.size if member.isreg() else 0
                if len(members) > limits.ARTIFACT_FILES.maximum:
                    raise ArtifactRejected(f"the archive holds more than {limits.ARTIFACT_FILES.maximum:,} entries")
                if size > limits.ARTIFACT_BYTES.maximum:
                    raise ArtifactRejected(f"the archive holds more than {limits.ARTIFACT_BYTES.maximum:,} bytes")
            if members and members[0].name == "." and members[0].isdir():
                dest.mkdir(parents=True, exist_ok=True)
                archive.extractall(dest, members=members[1:], filter="data")
                return size
            if len(members) != 1 or not members[0].isreg():
                raise ArtifactRejected("the archive is neither a directory ('.') nor one file")
            dest.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(members[0])
            assert source is not None
            with source, dest.open("wb") as out:
                while block := source.read(_BLOCK):
                    out.write(block)
            return size
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:  # gzip errors are OSError/EOFError
        raise ArtifactRejected(f"the archive cannot be unpacked: {str(exc)[:300]}") from exc


async def upload_outputs(store: ObjectStore, cluster: str, task_try_id: int, root: Path,
                         outputs: Sequence[OutputArtifact], *, max_bytes: int | None = None,
                         max_try_bytes: int | None = None) -> list[PackedArtifact]:
    """Pack and upload each declared output found under ``root``; one result per output, in order.

    Outputs after the try's budget is spent are refused with that reason (the first ones fit)."""
    per = MAX_BYTES if max_bytes is None else max_bytes
    budget = MAX_TRY_BYTES if max_try_bytes is None else max_try_bytes
    results: list[PackedArtifact] = []
    for output in outputs:
        result = await upload_output(store, artifact_key(cluster, task_try_id, output.name), output.name,
                                     root / output.path, max_bytes=min(per, budget))
        if result.problem is not None and budget < result.size_bytes <= per:
            result = PackedArtifact(output.name, result.kind, result.size_bytes, files=result.files,
                                    problem=f"is {result.size_bytes:,} bytes: the try's artifacts would exceed "
                                    f"{max_try_bytes if max_try_bytes is not None else MAX_TRY_BYTES:,} bytes in all")
        budget -= result.size_bytes if result.complete else 0
        results.append(result)
    return results


async def upload_output(store: ObjectStore, key: str, name: str, source: Path, *,
                        max_bytes: int = MAX_BYTES) -> PackedArtifact:
    """Pack ``source`` and write it at ``key`` (whole or not at all); never raises for the task's files.

    A storage failure is a ``problem`` too, after the client's own retries: the caller decides what
    it means for the try."""
    try:
        kind, size, entries = await asyncio.to_thread(measure, source)
    except FileNotFoundError:
        return PackedArtifact(name, None, missing=True)
    except OSError as exc:
        return PackedArtifact(name, None, problem=f"cannot be read: {exc.strerror or exc}")
    if size > max_bytes:
        return PackedArtifact(name, kind, size, files=entries,
                              problem=f"is {size:,} bytes, over the limit of {max_bytes:,} bytes")
    if entries > limits.ARTIFACT_FILES.maximum:
        return PackedArtifact(name, kind, size, files=entries, problem=f"holds more than "
                              f"{limits.ARTIFACT_FILES.maximum:,} files and directories")
    with tempfile.TemporaryDirectory(prefix="leoflow-artifact-") as scratch:
        packed = Path(scratch) / f"{name}.tar.gz"
        try:
            await asyncio.to_thread(pack, source, kind, packed)
            digest = await asyncio.to_thread(digest_of, packed)
        except OSError as exc:
            return PackedArtifact(name, kind, size, files=entries, problem=f"cannot be packed: {exc.strerror or exc}")
        stored = packed.stat().st_size
        try:
            await store.put_file(key, packed)
        except StorageError as exc:
            return PackedArtifact(name, kind, size, stored, entries, digest,
                                  problem=f"could not be stored: {str(exc)[:300]}")
    return PackedArtifact(name, kind, size, stored, entries, digest, object_key=key)


async def download_input(store: ObjectStore, key: str, dest: Path, *, digest: str | None = None) -> int:
    """Fetch the artifact at ``key`` and unpack it at ``dest``; the bytes unpacked.

    ObjectMissing when it is not there, ArtifactRejected when it is not what the index says (digest)
    or not a safe archive; other StorageErrors as they come."""
    with tempfile.TemporaryDirectory(prefix="leoflow-artifact-") as scratch:
        packed = Path(scratch) / "in.tar.gz"
        sha = hashlib.sha256()
        with packed.open("wb") as f:
            async for piece in store.stream(key):
                sha.update(piece)
                f.write(piece)
        if digest is not None and f"sha256:{sha.hexdigest()}" != digest:
            raise ArtifactRejected(f"{key}: the object's digest is not the indexed {digest}")
        return await asyncio.to_thread(unpack, packed, dest)


async def fetch_inputs(store: ObjectStore, root: Path, inputs: Sequence[dict[str, Any]], *,
                       report: Callable[[str], object] | None = None) -> list[str]:
    """Unpack each input under ``root``; the problems of required inputs, one line each (empty: all there).

    ``inputs``: ``{name, key, path, digest, optional, problem}`` each, as the executor resolved them
    from the index (``key`` None: the upstream try stored none, ``problem`` says why). An optional
    input that cannot be fetched is left absent. ``report`` gets one JSON line per fetched input.
    """
    problems: list[str] = []
    for item in inputs:
        name = item.get("name")
        key = item.get("key")
        if not key:
            if not item.get("optional"):
                problems.append(f"input artifact {name!r}: {item.get('problem') or 'the upstream try stored none'}")
            continue
        try:
            size = await download_input(store, str(key), root / str(item["path"]), digest=item.get("digest"))
        except (StorageError, ArtifactRejected) as exc:
            if not item.get("optional"):
                problems.append(f"input artifact {name!r}: {str(exc)[:300]}")
            continue
        if report is not None:
            report(json.dumps({"fetched": name, "bytes": size}))
    return problems
