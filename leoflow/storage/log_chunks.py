"""How a log becomes objects: names, chunk sizes and compression — pure, no I/O.

A container's output is archived as a sequence of objects, each holding bytes
``[start, end)`` of it as one gzip member. The object's name is derived from the try, the
container and both ends of the range (:func:`chunk_key`), and the output only ever grows, so the
same name always holds the same bytes whoever writes it: re-uploading after a failover overwrites an
object with its own content. (Named by ``start`` alone, as at first, two writers cutting their
chunks at different ends — one flushing a partial chunk, the other a full one — wrote different
bytes under one name, and the later write could replace an object already indexed.)
Concatenating a log's objects in order gives a valid ``.gz`` of the whole log (gzip members
concatenate), which is what a download serves.

Why gzip, level 1: task output compresses 5-10x at level 1, at hundreds of MB/s on one core
(zlib ships with Python; zstd would need Python 3.14 or a dependency); higher levels cost
several times the CPU for 10-20 % more, and the leader's CPU is shared with scheduling.
"""

from __future__ import annotations

import re
import zlib

#: Largest raw chunk: it bounds what a ranged read must fetch and decompress to serve any byte
#: (the last 64 KiB of a 1 GB log is one object of about 250 KB, 1 MiB decompressed, about 1 ms of
#: CPU; at 4 MiB the decompression alone was 4 ms, and on a loaded host every millisecond of CPU a
#: read takes becomes many of wall clock). 1 MiB is still one PUT of a fraction of a second and one
#: index row per MiB (a thousand rows for a 1 GB log). Memory per log being archived is about one
#: compressed chunk. Objects already written with larger chunks read the same way.
CHUNK_BYTES = 1024 * 1024
#: Bytes read from the source at a time while a chunk is compressed.
READ_BYTES = 256 * 1024
#: zlib's window bits for a gzip header and trailer.
GZIP = 31
LEVEL = 1
#: A container name as Kubernetes allows it (a DNS label), so it is safe in an object key; ``#N`` after
#: it names the log of its N-th restart (:func:`attempt_name`).
CONTAINER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(#[1-9][0-9]{0,4})?")
#: Restarts whose logs are kept apart, at most (``#1`` … ``#99999``); later ones are not archived.
MAX_RESTARTS = 99_999


def attempt_name(container: str, restarts: int) -> str:
    """The archive's name of a container's log after ``restarts`` restarts: the container's own name for
    its first run (what every log had before restarts were kept apart), ``name#N`` for the N-th
    restart — cut at the end of the name so it stays 63 characters, the index's width."""
    if restarts <= 0:
        return container
    suffix = f"#{restarts}"
    return container[: 63 - len(suffix)].rstrip("-") + suffix
#: The local executor's one "container": the process (the name Kubernetes gives the task's container).
PROCESS_CONTAINER = "task"


def chunk_key(cluster: str, task_try_id: int, container: str, start: int, end: int) -> str:
    """The object holding bytes ``[start, end)`` of ``container``'s output."""
    if not CONTAINER_NAME.fullmatch(container):
        raise ValueError(f"not a container name: {container!r}")
    safe_cluster = re.sub(r"[^A-Za-z0-9._-]", "_", cluster) or "_"
    # '#' would need escaping in URLs; '.' never occurs in a DNS label, so ``task.1`` is unambiguous.
    return f"logs/{safe_cluster}/{task_try_id}/{container.replace('#', '.')}/{start:015d}-{end:015d}.gz"


class ChunkCompressor:
    """Compresses one chunk as it is read, so only the compressed bytes are held."""

    def __init__(self) -> None:
        self._zip = zlib.compressobj(LEVEL, zlib.DEFLATED, GZIP)
        self._parts: list[bytes] = []
        self.raw_bytes = 0

    def add(self, data: bytes) -> None:
        self.raw_bytes += len(data)
        out = self._zip.compress(data)
        if out:
            self._parts.append(out)

    def finish(self) -> bytes:
        self._parts.append(self._zip.flush())
        return b"".join(self._parts)


def decompress(data: bytes) -> bytes:
    """One chunk's bytes (a gzip member)."""
    return zlib.decompress(data, GZIP)
