"""``GET …/tasks/{task_id}/artifacts`` and ``…/artifacts/{name}``: a task's output artifacts.

The list answers every try's artifacts (newest try first), with what is stored and, for one that
is not, why. A download streams the stored ``.tar.gz`` through the replica — never a bucket URL,
so the bucket stays private and the API's authentication and team rules are the only door —
from the newest try that stored it whole, or ``?try=N``'s. The first piece is read before the
answer starts, so storage that cannot be read is a 503, not a cut download.

Artifacts are task data, like a task's log and outputs: a read token reads them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from leoflow.api.endpoint import api_state
from leoflow.api.errors import ApiError, bad_field
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import artifacts as schemas
from leoflow.api.openapi import components as oas
from leoflow.api.operations import Operations
from leoflow.api.routes.runs import TASK, task_or_404
from leoflow.api.url_params import query_int, query_map_index
from leoflow.db.stores.log_archive import artifacts as artifact_store
from leoflow.db.stores.log_archive.artifacts import ArtifactRow
from leoflow.model.limits import ARTIFACT_NAME, TRY_NUMBER
from leoflow.storage.objects import ObjectStore, StorageError

OPERATIONS = Operations()
#: One store per bucket URL per process (the client keeps its connections).
_STORES: dict[str, ObjectStore] = {}
_TRY = oas.param("try", "query", {"type": "integer", "minimum": 1}, "Only this try's (default: every try; a "
                 "download takes the newest try that stored it)")
_NAME = oas.param("name", "path", {"type": "string", "maxLength": 64}, "The artifact's name")


@OPERATIONS("GET", TASK + "/artifacts", "List task artifacts", oas.json_answer("200", "TaskArtifacts"),
            errors="400 404", params=[*oas.RUN_PATH, oas.TASK_ID, oas.MAP_INDEX, _TRY])
async def list_task_artifacts(request: Request) -> Response:
    try_number = query_int(request, "try", TRY_NUMBER)
    async with api_state(request).db.connect() as conn:
        ti = await task_or_404(request, conn)
        rows = await _rows(request, conn, ti["task_id"], try_number)
    return JsonResponse({"artifacts": [
        {"name": r.name, "try_number": r.try_number, "kind": r.kind, "size_bytes": r.size_bytes,
         "stored_bytes": r.stored_bytes, "files": r.files, "digest": r.digest, "complete": r.complete,
         "problem": r.problem, "created_at": r.created_at} for r in rows]})


@OPERATIONS("GET", TASK + "/artifacts/{name}", "Download task artifact", schemas.DOWNLOAD_ANSWER,
            errors="400 404 503", params=[*oas.RUN_PATH, oas.TASK_ID, _NAME, oas.MAP_INDEX, _TRY])
async def download_task_artifact(request: Request) -> Response:
    name: str = request.path_params["name"]
    if not ARTIFACT_NAME.matches(name):  # before anything is read: a malformed name is the same 400 everywhere
        raise bad_field("name", f"must be an artifact name ({ARTIFACT_NAME.rule})")
    try_number = query_int(request, "try", TRY_NUMBER)
    state = api_state(request)
    async with state.db.connect() as conn:
        ti = await task_or_404(request, conn)
        rows = await _rows(request, conn, ti["task_id"], try_number)
    named = [r for r in rows if r.name == name]
    stored = next((r for r in named if r.complete and r.object_key), None)
    if stored is None or stored.object_key is None:
        why = f": {named[0].problem}" if named and named[0].problem else ""
        which = f"try {try_number}" if try_number is not None else "any try"
        raise ApiError(404, f"task {ti['task_id']!r} has no stored artifact {name!r} from {which}{why}")
    config = state.settings.log_archive
    if config.active_url is None:
        raise ApiError(404, "this cluster has no object storage (LEOFLOW_LOG_ARCHIVE_URL is not set)")
    store = _STORES.get(config.active_url) or _STORES.setdefault(
        config.active_url, ObjectStore(config.active_url, timeout=config.timeout))
    pieces = store.stream(stored.object_key)
    try:
        first = await anext(pieces)
    except StopAsyncIteration:
        first = b""
    except StorageError as exc:
        raise ApiError(503, f"the artifact cannot be read right now: {exc}") from exc
    filename = f"{ti['task_id']}-{name}-try{stored.try_number}.tar.gz"
    headers = {"X-Leoflow-Try": str(stored.try_number), "X-Leoflow-Artifact-Digest": stored.digest or "",
               "Content-Disposition": f'attachment; filename="{filename}"',
               "Content-Length": str(stored.stored_bytes)}
    return StreamingResponse(_rest(first, pieces), media_type="application/gzip", headers=headers)


async def _rows(request: Request, conn: Any, task_id: str, try_number: int | None) -> list[ArtifactRow]:
    map_index = query_map_index(request)
    return await artifact_store.list_artifacts(conn, request.path_params["dag_id"], request.path_params["run_id"],
                                               task_id, map_index=-1 if map_index is None else map_index,
                                               try_number=try_number)


async def _rest(first: bytes, pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for piece in pieces:  # a failure now ends the download short (its length says so)
        yield piece
