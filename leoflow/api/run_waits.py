"""Long-polling one run: ``GET …/runs/{run_id}?wait=S`` answers as soon as the run changes.

Every answer of the run document carries an ``ETag`` (a hash of the document: the run and all
its task instances). A client that sends it back in ``If-None-Match`` with ``wait=S`` (at most
:data:`MAX_WAIT` seconds) gets the new document the moment it differs, or ``304 Not
Modified`` after S seconds (at once when the run has ended: nothing will change). This is what
``leoflow runs trigger --wait`` and ``runs wait`` follow, instead of polling every half second.

The replica watches by re-reading the run (the same one-statement hot read, a pooled
connection taken and returned each time — nothing is held while waiting) after
:data:`FIRST_CHECK` seconds, each pause :data:`GROWTH` times the last, up to :data:`LAST_CHECK`:
a change is seen within a fifth of the time already waited (a run that ends after 100 ms is
answered about 10 ms late, not 30-50 ms as when the pause grew by half) and within 0.1 s however
long the wait, at a cost of ten reads per second per waiting client once the pauses reach
their cap (about 18 reads in the first second). At most :data:`MAX_WAITERS` requests wait at
once per replica; beyond that a request is answered at once (clients then poll), so waiting
clients can never exhaust a replica.
"""

from __future__ import annotations

import asyncio
import hashlib

from leoflow.api.errors import bad_field
from leoflow.api.url_params import ascii_decimal

MAX_WAIT = 30.0
FIRST_CHECK = 0.01
LAST_CHECK = 0.1
#: Each pause is this many times the previous one (until LAST_CHECK).
GROWTH = 1.2
MAX_WAITERS = 100


def etag_of(document: str) -> str:
    return '"' + hashlib.blake2b(document.encode(), digest_size=10).hexdigest() + '"'


def parse_wait(raw: str | None, request_timeout: float) -> float:
    """``wait`` in seconds (0 when absent), bounded by MAX_WAIT and the request deadline."""
    if raw is None or raw == "":
        return 0.0
    value = ascii_decimal(raw)
    if value is None:
        raise bad_field("wait", f"must be a number of seconds between 0 and {MAX_WAIT:g}")
    if not 0 <= value <= MAX_WAIT:
        raise bad_field("wait", f"must be between 0 and {MAX_WAIT:g} seconds")
    return min(value, max(0.0, request_timeout - 5.0))


class Waiters:
    """Counts the requests waiting on this replica (one instance per app)."""

    def __init__(self, limit: int = MAX_WAITERS) -> None:
        self.limit = limit
        self.waiting = 0

    def admit(self) -> bool:
        if self.waiting >= self.limit:
            return False
        self.waiting += 1
        return True

    def leave(self) -> None:
        self.waiting -= 1


def check_delay(checks: int) -> float:
    """Seconds to wait before the next re-read, after ``checks`` re-reads."""
    return min(LAST_CHECK, FIRST_CHECK * GROWTH ** min(checks, 64))


async def pause(checks: int) -> None:
    await asyncio.sleep(check_delay(checks))
