"""What the API needs to show a running try's output live: a reader of pod logs, as a protocol.

Stored logs (``task_logs``) are complete only once a try has ended and its logs were shipped;
while a pod runs, its output lives in the kubelet. The API — on *every* replica, not only the
leader — reads it through a :class:`LiveLogs` given to it by the composition root
(:mod:`leoflow.replica`), so the API package never imports an executor (docs/adr/0008-layers.md).
The Kubernetes implementation is :class:`leoflow.executor.kubernetes.live_logs.PodLiveLogs`.

A read is **bounded**: at most ``max_lines`` lines and ``max_bytes`` bytes of the tail, streamed
(never the whole log in memory). Lines carry the kubelet's timestamps; the last one is the
*cursor* a follower passes back (``since``) to get only newer lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class LiveLog:
    """A bounded tail of a running pod's log."""

    text: str
    #: The kubelet timestamp of the last line returned (or the ``since`` given, when none was).
    cursor: str | None
    #: Lines before ``text`` exist but were left out (the tail's bounds).
    cut: bool = False
    #: Why the pod's log could not be read (the API then falls back to the stored copy).
    unavailable: str | None = None


class LiveLogs(Protocol):
    async def read(self, pod_name: str, *, since: str | None, max_lines: int, max_bytes: int) -> LiveLog | None:
        """The tail of ``pod_name``'s task container (after ``since``); None when the pod is gone."""

    def close(self) -> None:
        """Release connections (the API's shutdown)."""


_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def timestamp_key(text: str) -> tuple[int, int] | None:
    """A kubelet log timestamp (RFC 3339, up to nanoseconds) as (epoch seconds, nanoseconds); None if it is not one.

    Compared as numbers: the kubelet writes nine fraction digits, but other runtimes trim zeros,
    and as strings ``...00.5Z`` would sort after ``...00.51Z``.
    """
    match = _TIMESTAMP.match(text)
    if match is None:
        return None
    try:
        moment = datetime.fromisoformat(match[1] + ("+00:00" if match[3] == "Z" else match[3]))
    except ValueError:
        return None
    return int(moment.timestamp()), int((match[2] or "").ljust(9, "0"))
