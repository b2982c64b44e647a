"""Following one run until it ends, on the API's own long poll, with an optional progress bar.

:class:`RunFollower` is the loop's logic without its I/O, so the synchronous client, the async
client and the CLI's ``runs wait`` follow a run the same way: each request sends the ETag of
the run document it has and ``wait=`` (at most :data:`LONG_POLL` seconds, under the API's own
maximum of 30), and the replica answers the moment the run changes, or ``304`` when nothing did.
A replica that cannot wait (an older one, or one already serving its maximum of waiting
requests) answers at once; the follower then paces itself (:data:`MIN_PACE` growing to
:data:`MAX_PACE`) instead of spinning.

Failure semantics: an unreachable API or a ``503`` (a failover, a restarting database) is ridden
out for up to ``outage_tolerance`` seconds, one retry a second — except when the very first
request is refused (nothing listens at ``LEOFLOW_URL``: a wrong address, not an outage). The
``timeout`` is a deadline on the monotonic clock for the whole wait; reaching it raises
:class:`RunWaitTimeout` naming the run and the state it was in.

The progress bar (:class:`ProgressBar`) redraws one line on stderr — tasks done / total and the
run's state — only when someone can see it: stderr is a terminal, or the code runs in a Jupyter
kernel. Otherwise it prints nothing (a CI log gets no carriage returns).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from leoflow.client.api import ApiUnavailable, ClientError

#: Seconds one long-poll request asks the replica to wait (the API allows up to 30; the request's
#: own timeout is this plus :data:`REQUEST_SLACK`).
LONG_POLL = 25.0
REQUEST_SLACK = 30.0
#: Pacing when the replica answers without waiting: start fast, slow down to at most this.
MIN_PACE = 0.05
MAX_PACE = 1.0
#: How long following keeps retrying while the API is unreachable (a failover takes seconds).
OUTAGE_TOLERANCE = 120.0
#: A run in one of these states will not change again (``leoflow.model.states``; a test keeps them equal).
TERMINAL_RUN_STATES = ("success", "failed", "cancelled")
#: A task instance in one of these states is done (likewise).
TERMINAL_TASK_STATES = ("success", "failed", "upstream_failed", "skipped", "cancelled")


class RunWaitTimeout(ClientError):
    """The run did not end within the wait's timeout."""


class RunFollower:
    """The decisions of following one run: what to ask next, what an answer means, when to give up."""

    def __init__(self, dag_id: str, run_id: str, *, timeout: float | None = None,
                 outage_tolerance: float = OUTAGE_TOLERANCE,
                 on_change: Callable[[dict[str, Any]], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dag_id, self.run_id = dag_id, run_id
        self._clock = clock
        self._deadline = None if timeout is None else clock() + timeout
        self._outage_tolerance = outage_tolerance
        self._on_change = on_change
        self.etag: str | None = None
        self.run: dict[str, Any] | None = None
        self._outage_since: float | None = None
        self._pace = MIN_PACE
        self._asked = 0.0

    @property
    def done(self) -> bool:
        return self.run is not None and self.run.get("state") in TERMINAL_RUN_STATES

    def next_request(self) -> tuple[dict[str, Any], dict[str, str], float]:
        """(query, headers, request timeout) of the next request; raises :class:`RunWaitTimeout` when due."""
        wait = LONG_POLL
        if self._deadline is not None:
            left = self._deadline - self._clock()
            if left <= 0:
                state = self.run.get("state") if self.run else "unknown"
                raise RunWaitTimeout(f"run {self.dag_id}/{self.run_id} did not end in time (still {state})")
            wait = max(0.0, min(wait, left))
        self._asked = self._clock()
        if self.etag is None:
            return {}, {}, REQUEST_SLACK
        return {"wait": round(wait, 3)}, {"If-None-Match": self.etag}, wait + REQUEST_SLACK

    def answered(self, status: int, etag: str | None, run: dict[str, Any] | None) -> float:
        """Take in an answer (200 with the run, or 304); returns how long to pause before the next request."""
        self._outage_since = None
        if status == 200 and run is not None:
            changed = run != self.run
            self.run = run
            if changed and self._on_change is not None:
                self._on_change(run)
        quick = self._clock() - self._asked < LONG_POLL / 2
        pause = 0.0
        if not self.done and (etag is None or (status == 304 and quick)):
            pause, self._pace = self._pace, min(MAX_PACE, self._pace * 1.5)  # the replica did not wait
        else:
            self._pace = MIN_PACE
        self.etag = etag
        return self._bounded(pause)

    def unavailable(self, exc: ApiUnavailable) -> float:
        """An outage: how long to pause before trying again, or raise when it lasts too long."""
        if self.run is None and self._outage_since is None and "refused" in str(exc):
            raise exc  # never reached: a wrong LEOFLOW_URL, not an outage to ride out
        now = self._clock()
        self._outage_since = self._outage_since or now
        if now - self._outage_since > self._outage_tolerance:
            raise ClientError(f"gave up waiting for run {self.run_id}: {exc}") from None
        return self._bounded(1.0)

    def _bounded(self, pause: float) -> float:
        if self._deadline is None:
            return pause
        return max(0.0, min(pause, self._deadline - self._clock()))


def in_jupyter() -> bool:
    """Whether this code runs in a Jupyter kernel (whose stderr is not a terminal, yet shown)."""
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    kernel = get() if get is not None else None
    return kernel is not None and "IPKernelApp" in getattr(kernel, "config", {})


def interactive(stream: TextIO) -> bool:
    try:
        return stream.isatty() or in_jupyter()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


class ProgressBar:
    """One redrawn line: ``etl/r1 [#######.....] 7/12 tasks done · running``."""

    WIDTH = 24

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._last = ""

    @staticmethod
    def line(run: dict[str, Any], width: int = WIDTH) -> str:
        tasks = [t for t in run.get("tasks") or [] if isinstance(t, dict)]
        done = sum(1 for t in tasks if t.get("state") in TERMINAL_TASK_STATES)
        total = len(tasks)
        filled = round(width * done / total) if total else 0
        bar = "#" * filled + "." * (width - filled)
        return f"{run.get('dag_id')}/{run.get('run_id')} [{bar}] {done}/{total} tasks done · {run.get('state')}"

    def __call__(self, run: dict[str, Any]) -> None:
        text = self.line(run)
        if text != self._last:
            self.stream.write("\r\033[K" + text if self.stream.isatty() else "\r" + text)
            self.stream.flush()
            self._last = text

    def close(self) -> None:
        if self._last:
            self.stream.write("\n")
            self.stream.flush()


def progress_for(progress: bool | None, stream: TextIO | None = None) -> ProgressBar | None:
    """A bar when asked for, or by default when stderr is seen by someone (see the module docstring)."""
    stream = stream or sys.stderr
    return ProgressBar(stream) if (interactive(stream) if progress is None else progress) else None
