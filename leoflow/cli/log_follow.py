"""``leoflow tasks logs --follow``: print a try's output as it is written, until the try ends.

Polls ``GET …/logs?since=CURSOR`` (see :mod:`leoflow.api.routes.logs`) about once a second and
prints only what is new: live from the pod while it runs, then the rest once it ended. The try
is pinned after the first answer (a retry starting meanwhile does not switch streams). Waits
for a task that has not started a try yet, and rides out short API outages like
``runs trigger --wait``. When the server cannot continue from the cursor (the pod went away
before the last lines were read and the stored copy comes whole), the lines already printed
are recognised at the end of the stored copy and not printed twice; if they cannot be found,
a marker line precedes the stored copy.

``--container C`` (and ``--offset``, ``--tail-bytes``) reads the archived log instead
(:func:`print_archive`): ``GET …/logs?container=&offset=&length=`` in windows of :data:`WINDOW`
bytes, written as archived — binary output included — so a 2 GB log is printed with a few MiB in
memory; with ``--follow`` it keeps asking from the cursor until the server says the log is
complete, the same for a running try (seconds behind the task) and one from last month.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, BinaryIO, TextIO

if TYPE_CHECKING:
    from leoflow.client.api import Api

#: Seconds between polls: the dashboard's live tail refreshes as often.
FOLLOW_POLL = 1.0
#: Printed lines remembered to recognise them in a stored copy (and how many must match).
RECENT_LINES, MATCH_LINES = 200, 20


def follow(api: Api, path: str, try_number: int | None, out: TextIO, *, outage_tolerance: float,
           sleep: Callable[[float], None] = time.sleep, query: Mapping[str, object] | None = None) -> int:
    """Print the log at ``path`` as it grows until its try ends; ``query`` goes with every request
    (a mapped instance's ``map_index``)."""
    from leoflow.client.api import ApiUnavailable, ClientError, error_message

    since, pinned = "", try_number
    recent: deque[str] = deque(maxlen=RECENT_LINES)
    outage_since: float | None = None
    while True:
        params: dict[str, object] = {**(query or {}), "since": since}
        if pinned is not None:
            params["try"] = pinned
        try:
            answer = api.request("GET", path, params=params, ok=(200, 404))
        except ApiUnavailable:
            outage_since = outage_since or time.monotonic()
            if time.monotonic() - outage_since > outage_tolerance:
                raise
            sleep(FOLLOW_POLL)
            continue
        outage_since = None
        if answer.status_code == 404:
            message, _ = error_message(answer)
            if pinned is None and "has not started a try yet" in message:
                sleep(FOLLOW_POLL)
                continue
            raise ClientError(message, status=404)
        pinned = int(answer.headers.get("X-Leoflow-Try") or pinned or 1)
        text = answer.text
        if answer.headers.get("X-Leoflow-Log-Continues") == "false":
            text = unseen(list(recent), text)
        if text:
            out.write(text)
            out.flush()
            recent.extend(text.splitlines())
        since = answer.headers.get("X-Leoflow-Log-Cursor", since)
        if answer.headers.get("X-Leoflow-Log-Complete") == "true":
            return 0
        sleep(FOLLOW_POLL)


def unseen(printed: list[str], text: str) -> str:
    """What of ``text`` (a whole stored log) follows the lines already ``printed``."""
    lines = text.splitlines(keepends=True)
    if not printed:
        return text
    anchor = printed[-min(MATCH_LINES, len(printed)):]
    plain = [line.rstrip("\n") for line in lines]
    for end in range(len(plain), len(anchor) - 1, -1):
        if plain[end - len(anchor):end] == anchor:
            return "".join(lines[end:])
    return "[leoflow: the pod is gone; its stored log follows in full]\n" + text


#: Bytes asked for per request: a few archive chunks, a few MiB held at once.
WINDOW = 8 * 1024 * 1024


def print_archive(api: Api, path: str, query: Mapping[str, object], out: BinaryIO, *, offset: int | None,
                  tail: int | None, follow: bool, outage_tolerance: float,
                  sleep: Callable[[float], None] = time.sleep) -> int:
    """Write the archived log at ``path`` (``query``: container, try, map_index) from ``offset``
    (or its last ``tail`` bytes) to ``out``; with ``follow``, until it is complete.

    The try is pinned after the first answer: a retry starting meanwhile does not switch logs.
    """
    from leoflow.client.api import ApiUnavailable

    params: dict[str, object] = dict(query)
    first: dict[str, object] = {"tail": tail} if tail is not None else {"offset": offset or 0}
    outage_since: float | None = None
    while True:
        try:
            answer = api.request("GET", path, params={**params, **first, "length": WINDOW} if "offset" in first
                                 else {**params, **first})
        except ApiUnavailable:
            outage_since = outage_since or time.monotonic()
            if not follow or time.monotonic() - outage_since > outage_tolerance:
                raise
            sleep(FOLLOW_POLL)
            continue
        outage_since = None
        params.setdefault("try", int(answer.headers.get("X-Leoflow-Try") or 1))
        if answer.content:
            out.write(answer.content)
            out.flush()
        at = int(answer.headers.get("X-Leoflow-Log-Cursor", "b0")[1:])
        first = {"offset": at}
        if at < int(answer.headers.get("X-Leoflow-Log-Size", "0")):
            continue  # more is archived already: the next window at once
        if answer.headers.get("X-Leoflow-Log-Complete") == "true" or not follow:
            return 0
        sleep(FOLLOW_POLL)
