"""``GET …/tasks/{task_id}/logs``: a try's output — live from its pod while it runs, stored once it ended.

Where the text comes from (``X-Leoflow-Log-Source``):

- ``pod`` — the try is running on Kubernetes: whichever replica serves the request reads the
  pod's log through the executor's :class:`~leoflow.model.live_logs.LiveLogs` (any replica,
  not only the leader), a bounded tail: the last :data:`LIVE_TAIL_LINES` lines and at most
  :data:`LIVE_TAIL_BYTES`;
- ``stored`` — everything else: what the executor stored in ``task_logs`` (the final copy
  once the try ended and its logs were shipped; the local executor's growing copy while it
  runs; the stored copy, with a note, when the pod's log cannot be read). When the executor
  gave up collecting a try's output (the pod's log could not be read within its attempt budget,
  or the local executor adopted a try whose files are on another host) the text ends with
  ``[leoflow: logs unavailable: <reason>]``, the try's JSON carries the reason in
  ``logs_unavailable``, and the log counts as complete (nothing more will come).

Two ways to ask:

- **reading** (no ``since``): the text, with notes for a person — a trailing
  ``[leoflow: … incomplete …]`` line while the try runs (``X-Leoflow-Log-Complete: false``);
- **following** (``since=CURSOR``, empty at first; ``leoflow tasks logs --follow``): only the
  output after the cursor, no trailing notes, and the next cursor in ``X-Leoflow-Log-Cursor``
  (``t<kubelet timestamp>`` for a pod, ``b<byte offset>`` for stored output). While the pod
  still exists after the try ended, a follower keeps reading it (its log is final then), so
  nothing between the last live read and the end is lost; if it is gone, the stored copy is
  served whole with ``X-Leoflow-Log-Continues: false`` (the follower drops what it printed).

**The archive** (``container``, ``offset``, ``length`` or ``tail`` given): the container's full
output from object storage, ranged and streamed (:mod:`leoflow.api.archived_logs`), the same for a
running try and one from last month.

Nothing is buffered beyond one bounded tail, and no database connection is held while the
Kubernetes API answers.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from leoflow.api.archived_logs import archive_query, archived_log
from leoflow.api.endpoint import api_state
from leoflow.api.errors import ApiError, bad_field
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import runs as run_schemas
from leoflow.api.operations import Operations
from leoflow.api.routes.runs import TASK, task_or_404
from leoflow.api.url_params import query_int
from leoflow.db.stores import task_logs as log_store
from leoflow.db.stores.log_archive import index as archive_store
from leoflow.db.stores.pods import events as pod_event_store
from leoflow.model.limits import TRY_NUMBER
from leoflow.model.live_logs import LiveLog

#: The live tail of a running pod: enough to see what a job is doing; a log that grows faster
#: than a follower polls loses lines in between (it says so).
LIVE_TAIL_LINES = 2000
LIVE_TAIL_BYTES = 256 * 1024
#: ASCII digits only (``\d`` alone matches '²' and '٣', which int() then refuses or reads).
_CURSOR = re.compile(r"(t\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)|b\d{1,15})?", re.ASCII)


OPERATIONS = Operations()


@OPERATIONS("GET", TASK + "/logs", "Get task log", run_schemas.LOG_ANSWER, errors="400 404", params=[
    *oas.RUN_PATH, oas.TASK_ID, oas.MAP_INDEX,
    oas.param("try", "query", {"type": "integer", "minimum": 1}, "Try number (default: latest)"),
    oas.param("since", "query", {"type": "string", "maxLength": 64},
              "Follow mode: only output after this cursor (empty to start); no notes"),
    oas.param("container", "query", {"type": "string", "maxLength": 63},
              "Archived log: the container (default `task`; the local executor's process is `task`)"),
    oas.param("offset", "query", {"type": "integer", "minimum": 0}, "Archived log: first byte (default 0)"),
    oas.param("length", "query", {"type": "integer", "minimum": 1}, "Archived log: bytes to read (default: all)"),
    oas.param("tail", "query", {"type": "integer", "minimum": 1}, "Archived log: the last N bytes")])
async def get_task_logs(request: Request) -> Response:
    try_number = query_int(request, "try", TRY_NUMBER)
    since = request.query_params.get("since")
    if since is not None and not _CURSOR.fullmatch(since):
        raise bad_field("since", "must be a cursor from X-Leoflow-Log-Cursor (or empty to start)")
    archive = archive_query(request)
    state = api_state(request)
    async with state.db.connect() as conn:
        ti = await task_or_404(request, conn)
        if ti.get("map_states") is not None:
            raise bad_field("map_index", f"task {ti['task_id']!r} is mapped ({ti['map_count']} instances): "
                            "name one with ?map_index=")
        entry = await log_store.get_task_log(conn, ti, try_number, content=archive is None)
        # The try's archived containers ride along on the plain answer, so a reader (the dashboard's
        # container tabs) learns them without a probe that would 404 for a try with nothing archived.
        archived = (await archive_store.archived_logs(conn, entry["task_try_id"])
                    if archive is None and entry is not None and entry["task_try_id"] is not None
                    and state.settings.log_archive.active_url is not None else None)
    if entry is None:
        if try_number is None:
            raise ApiError(404, f"task {ti['task_id']!r} has not started a try yet")
        raise bad_field("try", f"task {ti['task_id']!r} has no try {try_number} "
                        f"(tries so far: {ti['try_number']})", status=404)
    if archive is not None:
        if entry["task_try_id"] is None:
            raise bad_field("container", f"try {entry['try_number']} has not started: nothing is archived yet",
                            status=404)
        return await archived_log(request, entry, archive)
    finished = entry["ended_at"] is not None
    note = None
    pod_cursor = since is not None and since.startswith("t")
    if state.live_logs is not None and entry["executor_ref"] and (not finished or pod_cursor):
        live = await state.live_logs.read(entry["executor_ref"], since=since[1:] if pod_cursor and since else None,
                                          max_lines=LIVE_TAIL_LINES, max_bytes=LIVE_TAIL_BYTES)
        if live is not None and live.unavailable is None:
            return _with_containers(_from_pod(entry, live, since, finished), archived)
        if live is not None:
            note = f"[leoflow: the pod's live log cannot be read ({live.unavailable}); showing what is stored]\n"
    return _with_containers(_stored(entry, since, note), archived)


def _with_containers(response: Response, archived: list[archive_store.ArchivedLog] | None) -> Response:
    if archived is not None:
        response.headers["X-Leoflow-Log-Containers"] = ",".join(sorted(log.container for log in archived))
    return response


def _headers(entry: dict[str, Any], complete: bool, source: str, **extra: str) -> dict[str, str]:
    return {"X-Leoflow-Try": str(entry["try_number"]), "X-Leoflow-Log-Complete": str(complete).lower(),
            "X-Leoflow-Log-Source": source, **extra}


def _from_pod(entry: dict[str, Any], live: LiveLog, since: str | None, finished: bool) -> Response:
    if since is not None:  # following: only what is new; final once the try has ended
        skipped = "[leoflow: the log grew faster than it was followed; lines were skipped]\n" if (
            live.cut and since) else ""
        cursor = f"t{live.cursor}" if live.cursor else since
        return PlainTextResponse(skipped + live.text, headers=_headers(
            entry, finished, "pod", **{"X-Leoflow-Log-Cursor": cursor, "X-Leoflow-Log-Continues": "true"}))
    head = f"[leoflow: showing the last {LIVE_TAIL_LINES} lines of the running pod's log]\n" if live.cut else ""
    tail = (f"[leoflow: try {entry['try_number']} is running; this is its pod's live output, "
            "fetch again for more]\n")
    return PlainTextResponse(head + live.text + tail, headers=_headers(entry, False, "pod"))


def _stored(entry: dict[str, Any], since: str | None, note: str | None) -> Response:
    finished = entry["ended_at"] is not None
    # Executors mark a try's logs shipped once the stored content is final (the local executor
    # stores partial output while a try runs, without marking it).
    complete = finished and entry["logs_shipped_at"] is not None
    text = entry["content"] or ""
    data = text.encode()
    size = max(int(entry["size_bytes"] or 0), len(data))
    if since is not None:
        return _stored_follow(entry, data, size, since, complete)
    if entry["truncated"]:
        # size_bytes is the try's full output size; the stored content is its capped tail.
        text = (f"[leoflow: log truncated: the try wrote {entry['size_bytes']} bytes, "
                f"only the last {len(data)} are kept]\n") + text
    if note:
        text = note + text
    if text and not text.endswith("\n") and (not complete or entry["logs_unavailable"]):
        text += "\n"
    if entry["logs_unavailable"]:
        # The executor gave up collecting the output (what is above, if anything, is all there is).
        text += f"[leoflow: logs unavailable: {entry['logs_unavailable']}]\n"
    elif not complete:
        state = "running" if not finished else "finished, logs not collected yet"
        text += f"[leoflow: try {entry['try_number']} is {state}; this log is incomplete, fetch again later]\n"
    return PlainTextResponse(text, headers=_headers(entry, complete, "stored"))


def _stored_follow(entry: dict[str, Any], data: bytes, size: int, since: str, complete: bool) -> Response:
    """The stored bytes after offset ``b<N>`` (the content is the tail of ``size`` bytes written)."""
    start = size - len(data)  # offset of the first stored byte in the try's whole output
    continues = not since.startswith("t")
    offset = int(since[1:]) if since.startswith("b") else 0
    if offset < start:
        gap = (f"[leoflow: {start - offset} bytes were dropped (LEOFLOW_TASK_LOG_MAX_BYTES keeps the tail)]\n"
               if continues else "")
        body = gap.encode() + data
    else:
        body = data[offset - start:]
    if complete and entry["logs_unavailable"]:  # the last answer a follower gets: say why it ends here
        newline = b"" if not data or data.endswith(b"\n") else b"\n"
        body += newline + f"[leoflow: logs unavailable: {entry['logs_unavailable']}]\n".encode()
    return PlainTextResponse(body.decode("utf-8", errors="replace"), headers=_headers(
        entry, complete, "stored", **{"X-Leoflow-Log-Cursor": f"b{size}",
                                      "X-Leoflow-Log-Continues": str(continues).lower()}))


@OPERATIONS("GET", TASK + "/events", "Get task pod events", oas.json_answer("200", "TaskEvents"), errors="400 404",
            params=[*oas.RUN_PATH, oas.TASK_ID, oas.MAP_INDEX,
                    oas.param("try", "query", {"type": "integer", "minimum": 1}, "Try number (default: latest)")])
async def get_task_events(request: Request) -> Response:
    """The Kubernetes events of a try's pod, kept with the try (``FailedMount``, ``BackOff``, …): what
    ``kubectl describe pod`` showed while the pod existed, still there after it is gone."""
    try_number = query_int(request, "try", TRY_NUMBER)
    async with api_state(request).db.connect() as conn:
        ti = await task_or_404(request, conn)
        if ti.get("map_states") is not None:
            raise bad_field("map_index", f"task {ti['task_id']!r} is mapped ({ti['map_count']} instances): "
                            "name one with ?map_index=")
        entry = await log_store.get_task_log(conn, ti, try_number, content=False)
        if entry is None:
            if try_number is None:
                raise ApiError(404, f"task {ti['task_id']!r} has not started a try yet")
            raise bad_field("try", f"task {ti['task_id']!r} has no try {try_number} "
                            f"(tries so far: {ti['try_number']})", status=404)
        rows = (await pod_event_store.events_of_try(conn, entry["task_try_id"])
                if entry["task_try_id"] is not None else [])
    return JsonResponse({"try_number": entry["try_number"], "events": [{
        "type": r.type, "reason": r.reason, "message": r.message, "container": r.container, "count": r.count,
        "first_seen": r.first_seen, "last_seen": r.last_seen} for r in rows]})
