"""Size-capping task output before it is stored (``LEOFLOW_TASK_LOG_MAX_BYTES``, tail kept).

The end of a log is where the error is, so when output exceeds the cap the *head* is dropped.
Bytes are decoded as UTF-8 with replacement characters: a cut through a multi-byte character, or
a task printing binary garbage, must never make shipping fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CappedOutput:
    text: str
    truncated: bool
    size_bytes: int  # the full, uncapped size


def cap_tail(data: bytes, max_bytes: int) -> CappedOutput:
    """The last ``max_bytes`` bytes of ``data`` as text."""
    size = len(data)
    truncated = size > max_bytes
    kept = data[size - max_bytes:] if truncated else data
    return CappedOutput(kept.decode("utf-8", errors="replace"), truncated, size)


def read_tail(path: Path, max_bytes: int) -> CappedOutput:
    """The capped tail of a log file without reading a huge file whole; empty if it is missing."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except FileNotFoundError:
        return CappedOutput("", False, 0)
    return CappedOutput(data.decode("utf-8", errors="replace"), size > max_bytes, size)
