"""``leoflow tasks logs --container C`` (and ``--offset``, ``--tail-bytes``, ``--follow``): a try's archived log.

Reads ``GET …/logs?container=&offset=&length=`` (:mod:`leoflow.api.archived_logs`) in windows of
:data:`WINDOW` bytes and writes the bytes as they were archived — binary output included — so a
2 GB log is printed with a few MiB in memory. With ``--follow`` it keeps asking from the cursor
(``X-Leoflow-Log-Cursor``) about once a second until the server says the log is complete: the
same for a running try (what is archived so far, seconds behind the task) and one from last month.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from leoflow.client.api import Api

#: Bytes asked for per request: a few archive chunks, a few MiB held at once.
WINDOW = 8 * 1024 * 1024
#: Seconds between polls while following a log that is not complete.
FOLLOW_POLL = 1.0


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
