"""OpenAPI schemas of the artifact routes: a task instance's output artifacts, listed and downloaded."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import BOOL, INT, STR, nullable, obj, ref

_ARTIFACT = obj({
    "name": STR,
    "try_number": {**INT, "description": "The try that left it"},
    "kind": {**nullable("string"), "enum": ["file", "directory", None],
             "description": "A file or a directory; null when nothing was stored"},
    "size_bytes": {**INT, "description": "Bytes of its files before compression"},
    "stored_bytes": {**INT, "description": "Bytes of the stored .tar.gz (what a download sends)"},
    "files": {**INT, "description": "Files and directories in it"},
    "digest": {**nullable("string"), "description": "sha256:HEX of the stored .tar.gz"},
    "complete": {**BOOL, "description": "Stored whole: downloadable, and what a consuming task reads"},
    "problem": {**nullable("string"), "description": "Why nothing was stored (missing, over a limit, storage "
                "refused); null when complete"},
    "created_at": {"type": "string", "format": "date-time"},
})

SCHEMAS: dict[str, Any] = {
    "TaskArtifact": _ARTIFACT,
    "TaskArtifacts": obj({"artifacts": {"type": "array", "items": ref("TaskArtifact"),
                                        "description": "Newest try first, then by name"}}),
}

#: The download: the artifact's .tar.gz as stored.
DOWNLOAD_ANSWER = {"200": {
    "description": "The artifact as a gzip-compressed tar (a directory's entries under '.', a file as its one "
                   "member), streamed through the replica from object storage.",
    "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    "headers": {"X-Leoflow-Try": {"schema": INT}, "X-Leoflow-Artifact-Digest": {"schema": STR}}}}
