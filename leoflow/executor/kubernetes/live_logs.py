"""Live logs of running task pods, read by any replica's API (:class:`leoflow.model.live_logs.LiveLogs`).

Every replica serves ``GET …/tasks/{task_id}/logs``; for a try whose pod still runs, the API
asks this reader instead of the database (where logs only land when the try ends). One read is
one ``pods/log`` call for the ``task`` container with the kubelet's timestamps,
``tailLines=max_lines`` (and ``sinceSeconds`` around the cursor when following), streamed with
only the last ``max_bytes`` kept — bounded in transfer and in memory, whatever the log's size.
Lines at or before the cursor are dropped by their exact timestamps.

The client is built on first use, in a worker thread (importing ``kubernetes`` takes seconds),
with a pool of :data:`CONCURRENCY` connections: that many live reads run at once per replica,
the rest wait their turn. Failure semantics: a pod that does not exist → ``None`` (the API serves
the stored copy); a container not started yet → empty text; any other API error or missing
configuration → ``unavailable`` with the reason (the API says so and falls back). Never raises.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import TYPE_CHECKING

from leoflow.errors import SettingsError
from leoflow.executor.kubernetes.errors import KubernetesError, ObjectNotFound, RequestRefused
from leoflow.model.live_logs import LiveLog, timestamp_key
from leoflow.settings import Settings

if TYPE_CHECKING:
    from leoflow.executor.kubernetes.kube_client import KubernetesApi

#: Live reads in flight per replica (each holds a kubelet log stream for well under a second).
CONCURRENCY = 4
#: Seconds of slack on ``sinceSeconds``: node and replica clocks differ; exact filtering is ours.
CLOCK_SLACK = 30


class PodLiveLogs:
    """:class:`~leoflow.model.live_logs.LiveLogs` over the Kubernetes API."""

    def __init__(self, settings: Settings, *, api: KubernetesApi | None = None) -> None:
        self._settings = settings
        self._api = api
        self._owned = api is None
        self._lock = threading.Lock()

    def _connect(self) -> KubernetesApi:
        with self._lock:
            if self._api is None:
                from leoflow.executor.kubernetes.kube_client import KubernetesApi

                self._api = KubernetesApi(self._settings, concurrency=CONCURRENCY)
            return self._api

    async def read(self, pod_name: str, *, since: str | None, max_lines: int, max_bytes: int) -> LiveLog | None:
        api = self._api
        if api is None:
            try:
                api = await asyncio.to_thread(self._connect)
            except SettingsError as exc:
                return LiveLog("", since, unavailable=str(exc))
        after = timestamp_key(since) if since else None
        since_seconds = None
        if after is not None:
            since_seconds = max(1, math.ceil(time.time() - after[0]) + CLOCK_SLACK)
        try:
            data, size = await api.read_log_tail(pod_name, max_bytes, tail_lines=max_lines + 1,
                                                 since_seconds=since_seconds, timestamps=True)
        except ObjectNotFound:
            return None
        except RequestRefused as err:
            if err.code == 400:  # the container has not started yet: nothing to show so far
                return LiveLog("", since)
            return LiveLog("", since, unavailable=f"{err.code} {err.message}"[:300])
        except KubernetesError as err:
            return LiveLog("", since, unavailable=f"{err.code} {err.message}"[:300])
        return _select(data, cut_bytes=size > len(data), after=after, since=since, max_lines=max_lines)

    def close(self) -> None:
        if self._owned and self._api is not None:
            self._api.close()


def _select(data: bytes, *, cut_bytes: bool, after: tuple[int, int] | None, since: str | None,
            max_lines: int) -> LiveLog:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if cut_bytes and lines:
        lines.pop(0)  # the byte bound cut it somewhere in the middle
    kept: list[tuple[str, str]] = []
    for raw in lines:
        stamp, _, text = raw.decode("utf-8", errors="replace").partition(" ")
        key = timestamp_key(stamp)
        if key is None:  # not a kubelet line (cannot happen with timestamps=true): keep it as text
            kept.append(("", f"{stamp} {text}".rstrip(" ")))
        elif after is None or key > after:
            kept.append((stamp, text))
    cut = cut_bytes or len(kept) > max_lines
    kept = kept[-max_lines:]
    cursor = next((stamp for stamp, _ in reversed(kept) if stamp), since)
    return LiveLog("".join(f"{text}\n" for _, text in kept), cursor, cut=cut)
