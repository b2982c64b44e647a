"""A try's archived log, read back through the replica: ranged, streaming, any size.

``GET …/tasks/{task_id}/logs?container=C&offset=N&length=M`` (or ``&tail=N`` for the last N
bytes) answers bytes of the container's output from object storage (``LEOFLOW_LOG_ARCHIVE_URL``;
see :mod:`leoflow.executor.log_archive`), never a bucket URL: the replica reads the objects
holding the range, decompresses each and streams the part asked for, one object at a time, so
memory stays at one chunk whatever the range. The index is read in short batches, no database
connection is held while the storage answers.

Headers: ``X-Leoflow-Log-Source: archive``, ``X-Leoflow-Log-Size`` (bytes archived so far),
``X-Leoflow-Log-Complete`` (the container ended and everything is archived),
``X-Leoflow-Log-Containers`` (every archived container of the try, comma-separated),
``X-Leoflow-Log-Offset`` (the first byte answered) and ``X-Leoflow-Log-Cursor`` (``b<next offset>``,
to follow a log as it grows with ``offset=``). A try with nothing archived for that container
answers 404 naming it; an archive that cannot be read (storage down) 503 with the reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from leoflow.api.endpoint import api_state
from leoflow.api.errors import ApiError, bad_field
from leoflow.api.url_params import query_int
from leoflow.db.stores.log_archive import index as archive_store
from leoflow.model.limits import LOG_CONTAINER, LOG_LENGTH, LOG_OFFSET, LOG_TAIL
from leoflow.storage.log_chunks import CONTAINER_NAME, PROCESS_CONTAINER, decompress
from leoflow.storage.objects import ObjectStore, StorageError

#: Objects looked up per index read while streaming.
INDEX_BATCH = 64
#: One store per archive URL per process (the client keeps its connections).
_STORES: dict[str, ObjectStore] = {}
#: The query parameters that ask for the archive.
ARCHIVE_PARAMS = ("container", "offset", "length", "tail")


@dataclass(frozen=True)
class ArchiveQuery:
    """What a request asks of the archive, checked before anything is read from the database."""

    container: str
    offset: int | None
    length: int | None
    tail: int | None


def wants_archive(request: Request) -> bool:
    return any(name in request.query_params for name in ARCHIVE_PARAMS)


def archive_query(request: Request) -> ArchiveQuery | None:
    """The archive parameters of ``request`` (None when it asks for none), or a 400 naming the bad one.

    Checked first, like ``try``: a malformed parameter answers the same 400 whether or not the
    task exists, so a caller learns nothing about runs from a bad query.
    """
    if not wants_archive(request):
        return None
    offset = query_int(request, "offset", LOG_OFFSET)
    tail = query_int(request, "tail", LOG_TAIL)
    if tail is not None and offset is not None:
        raise bad_field("tail", "cannot be combined with offset (tail counts from the end)")
    return ArchiveQuery(_container(request), offset, query_int(request, "length", LOG_LENGTH), tail)


def _store(url: str, timeout: float) -> ObjectStore:
    store = _STORES.get(url)
    if store is None:
        store = _STORES[url] = ObjectStore(url, timeout=timeout)
    return store


def _container(request: Request) -> str:
    name = request.query_params.get("container", PROCESS_CONTAINER)
    if len(name) > LOG_CONTAINER.maximum or not CONTAINER_NAME.fullmatch(name):
        raise bad_field("container", f"must be a container name (a DNS label, {LOG_CONTAINER.rule}), or "
                        "NAME#N for the log of its N-th restart")
    return name


async def archived_log(request: Request, entry: dict[str, Any], query: ArchiveQuery) -> Response:
    """The answer for ``entry`` (a try as :func:`leoflow.db.stores.task_logs.get_task_log` returns it)."""
    container, offset, length, tail = query.container, query.offset, query.length, query.tail
    state = api_state(request)
    config = state.settings.log_archive
    if config.active_url is None:
        raise ApiError(404, "this cluster has no log archive (LEOFLOW_LOG_ARCHIVE_URL is not set)")
    # The log's state and the object holding the first byte come from one connection, and none is
    # held while the storage answers.
    async with state.db.connect() as conn:
        logs = await archive_store.archived_logs(conn, entry["task_try_id"])
        found = {log.container: log for log in logs}
        if container not in found:
            names = ", ".join(sorted(found)) or "none yet"
            raise bad_field("container", f"try {entry['try_number']} has no archived log of container "
                            f"{container!r} (archived: {names})", status=404)
        archive = found[container]
        size = archive.size_bytes
        start = max(0, size - tail) if tail is not None else min(offset or 0, size)
        end = size if length is None else min(size, start + length)
        chunks = (await archive_store.chunks_between(conn, entry["task_try_id"], container, start, end, limit=1)
                  if start < end else [])
    store = _store(config.active_url, config.timeout)
    headers = {"X-Leoflow-Try": str(entry["try_number"]), "X-Leoflow-Log-Source": "archive",
               "X-Leoflow-Log-Complete": str(archive.complete and end == size).lower(),
               "X-Leoflow-Log-Size": str(size), "X-Leoflow-Log-Offset": str(start),
               "X-Leoflow-Log-Cursor": f"b{end}", "X-Leoflow-Log-Containers": ",".join(sorted(found))}
    first = await _first_piece(store, chunks[0], start, end) if chunks else (b"", end)
    return StreamingResponse(_rest(request, store, entry["task_try_id"], container, first, end),
                             media_type="text/plain; charset=utf-8", headers=headers)


async def _first_piece(store: ObjectStore, chunk: archive_store.Chunk, start: int, end: int) -> tuple[bytes, int]:
    """The first object's part, read before answering, so a storage failure is a 503, not a cut stream."""
    try:
        data = decompress(await store.get(chunk.object_key))
    except StorageError as exc:
        raise ApiError(503, f"the log archive cannot be read right now: {exc}") from exc
    return data[start - chunk.start:min(end, chunk.end) - chunk.start], min(end, chunk.end)


async def _rest(request: Request, store: ObjectStore, task_try_id: int, container: str, first: tuple[bytes, int],
                end: int) -> AsyncIterator[bytes]:
    piece, at = first
    if piece:
        yield piece
    while at < end:
        async with api_state(request).db.connect() as conn:
            chunks = await archive_store.chunks_between(conn, task_try_id, container, at, end, limit=INDEX_BATCH)
        if not chunks:
            return
        for chunk in chunks:
            data = decompress(await store.get(chunk.object_key))  # a failure now ends the stream short
            yield data[max(0, at - chunk.start):min(end, chunk.end) - chunk.start]
            at = min(end, chunk.end)
