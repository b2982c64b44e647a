"""How an artifact becomes one object: its name and what the index says of it — pure, no I/O.

An output artifact of a try is one ``.tar.gz`` object whose name is derived from the cluster, the
try's row id and the artifact's name only, so whoever uploads it again (a sidecar restarted by the
kubelet, a retry of a failed PUT) overwrites it with the same content, and an object is written
whole (one PUT or a completed multipart upload), never seen half-written. Why tar + gzip level 1:
a directory needs a container format and tar is the one every tool reads (Argo's default is the
same, ``archive: tar``); level 1 for the reason the log archive gives (leoflow.storage.log_chunks).

Artifacts live in the log archive's bucket, under ``artifacts/`` beside ``logs/``: one URL, one
credential chain and one retention path (retention queues both kinds of objects in the same
garbage table), rather than a second setting that must be kept in step with the first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from leoflow.model import limits

ArtifactKind = Literal["file", "directory"]
#: The suffix of every artifact object.
SUFFIX = ".tar.gz"


def artifact_key(cluster: str, task_try_id: int, name: str) -> str:
    """The object holding output artifact ``name`` of try ``task_try_id``."""
    if not limits.ARTIFACT_NAME.matches(name):
        raise ValueError(f"not an artifact name: {name!r}")
    safe_cluster = re.sub(r"[^A-Za-z0-9._-]", "_", cluster) or "_"
    return f"artifacts/{safe_cluster}/{task_try_id}/{name}{SUFFIX}"


@dataclass(frozen=True)
class PackedArtifact:
    """What an upload reports of one output artifact (and the index stores).

    ``missing``: nothing was at the path (an optional output, or a failure of a required one);
    ``problem``: why it was not uploaded (over a limit, unreadable, storage refused), else None.
    """

    name: str
    kind: ArtifactKind | None
    size_bytes: int = 0
    stored_bytes: int = 0
    files: int = 0
    digest: str | None = None
    object_key: str | None = None
    missing: bool = False
    problem: str | None = None

    @property
    def complete(self) -> bool:
        return self.object_key is not None and self.problem is None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "size_bytes": self.size_bytes,
                "stored_bytes": self.stored_bytes, "files": self.files, "digest": self.digest,
                "object_key": self.object_key, "missing": self.missing, "problem": self.problem}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> PackedArtifact:
        kind = data.get("kind")
        return cls(name=str(data["name"]), kind="file" if kind == "file" else "directory" if kind == "directory"
                   else None, size_bytes=_int(data.get("size_bytes")), stored_bytes=_int(data.get("stored_bytes")),
                   files=_int(data.get("files")), digest=_str(data.get("digest")),
                   object_key=_str(data.get("object_key")), missing=bool(data.get("missing")),
                   problem=_str(data.get("problem")))


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def outcome_problem(results: list[PackedArtifact], optional: dict[str, bool]) -> str | None:
    """Why a successful try fails for its artifacts (one line), None when they are all right.

    Argo's policy: a missing output fails the step unless declared ``optional``; an output that
    could not be stored (over a limit, storage refusing) fails it too, since the tasks reading it
    would fail later with a less helpful reason.
    """
    for result in results:
        if result.missing:
            if not optional.get(result.name, False):
                return (f"artifact {result.name!r}: nothing at its path when the task ended "
                        "(declare it optional: true if it may be absent)")
            continue
        if result.problem is not None:
            return f"artifact {result.name!r}: {result.problem}"
    return None
