"""Why this replica may not lead right now, as the elector last found it; read by ``/readyz``.

The elector runs in its own thread and refuses to contend through a session it cannot trust
(a hot standby, a transaction-mode pooler, a database that belongs to another cluster, a
schema that is not migrated, pools that cannot connect). Each refusal is one log line; this
object keeps the reason for the API's readiness probe, so an operator sees it in
``kubectl describe pod`` too. Cleared as soon as a session passes every check.
"""

from __future__ import annotations

import threading

#: How a refusal by the pools' gate begins; the rest is the driver's words, which ``/readyz``
#: (unauthenticated) never shows: it says only this and "database unavailable".
GATE_REFUSAL = "this replica's own database connections do not work"


class ElectionHealth:
    """Thread-safe holder of the current refusal (None: this replica may lead)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._problem: str | None = None

    @property
    def problem(self) -> str | None:
        with self._lock:
            return self._problem

    def refuse(self, problem: str) -> bool:
        """Record ``problem``; True when it differs from the last one (log it then, once)."""
        with self._lock:
            changed = problem != self._problem
            self._problem = problem
            return changed

    def clear(self) -> None:
        with self._lock:
            self._problem = None
