"""Every replica's copy of the usable runtime API tokens: microseconds per request, fresh within a second.

Checking a runtime token is a SHA-256 of the presented secret and a dictionary lookup in memory
(about 2 µs whatever the number of tokens) — no database round trip per request. Freshness is
bounded by :data:`TTL`: a request that presents a runtime token to a cache older than that first
asks the database for the one-row ``api_token_generation`` counter (about 0.3 ms) and reloads the
usable tokens only when it moved. A revocation on any replica therefore refuses the token on
every replica at most :data:`TTL` plus one round trip later, with no background task, no LISTEN
connection and no restart; a replica nobody calls asks nothing.

Why polling and not LISTEN/NOTIFY: a notification still needs a TTL backstop (a dropped
listening connection loses notifications silently), and the API's pool is shared and bounded
(:mod:`leoflow.db.connection.budget`); the poll costs at most ``1 / TTL`` single-row reads a
second per replica, and only while runtime tokens are being presented.

Failure semantics: one refresh at a time (the others wait for it, then use its result). When
the database cannot be asked, the request fails with the database's error (a 503 with
``Retry-After``), never with a stale yes: a replica cut off from the database cannot know about a
revocation, and nearly every route needs the database anyway. Expiry is checked on every request
against the wall clock, so an expired token is refused even between refreshes.

Last use: each replica remembers when each token was last presented and writes those moments in
one statement at most once per :data:`USE_FLUSH_INTERVAL` (so ``last_used_at`` is at most a
minute behind, and a busy token costs one write a minute per replica, not one per request).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from leoflow.db.connection.database import Database
from leoflow.db.stores import api_tokens as token_store
from leoflow.errors import DatabaseError
from leoflow.model.access.roles import Role
from leoflow.model.access.tokens import is_runtime_secret, secret_hash

log = logging.getLogger(__name__)

#: Seconds a reading of the token table is trusted: a revocation reaches every replica within
#: this plus one round trip, under the one second promised, with room for a loaded host.
TTL = 0.25
#: Seconds between two writes of the tokens' ``last_used_at`` by one replica.
USE_FLUSH_INTERVAL = 60.0


@dataclass(frozen=True)
class CachedToken:
    """A usable token as a replica keeps it: who it stands for and until when."""

    id: str
    name: str
    team: str | None
    role: Role
    expires_at: datetime


class TokenCache:
    """The usable runtime tokens, keyed by the SHA-256 of their secrets (see the module docstring)."""

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._db: Database | None = None
        self._by_hash: dict[str, CachedToken] = {}
        self._generation: int | None = None
        self._checked_at = float("-inf")
        self._lock = asyncio.Lock()
        self._used: dict[str, datetime] = {}
        self._flushed_at: float | None = None

    def attach(self, db: Database) -> None:
        """Where to load tokens from (the app's pool, once it exists)."""
        self._db = db
        self._checked_at = float("-inf")

    @property
    def attached(self) -> bool:
        return self._db is not None

    def __len__(self) -> int:
        return len(self._by_hash)

    def invalidate(self) -> None:
        """Make the next runtime-token request read the database (this replica just changed a token)."""
        self._checked_at = float("-inf")

    def stale(self) -> bool:
        return self._monotonic() - self._checked_at > TTL

    async def refresh_if_stale(self) -> None:
        """Bring the cache within :data:`TTL` of the database (one caller asks; the others wait)."""
        if not self.stale() or self._db is None:
            return
        async with self._lock:
            if not self.stale():
                return  # another request refreshed it while this one waited
            await self._refresh(self._db)

    async def _refresh(self, db: Database) -> None:
        started = self._monotonic()
        async with db.connect() as conn:
            current = await token_store.generation(conn)
            if current != self._generation:
                current, rows = await token_store.usable_tokens(conn)
                self._by_hash = {r.secret_hash: CachedToken(r.id, r.name, r.team, r.role, r.expires_at)
                                 for r in rows}
                self._generation = current
        self._checked_at = started  # the reading is as old as its start, not its end
        await self._flush_use(db, started)

    async def _flush_use(self, db: Database, now: float) -> None:
        if not self._used or (self._flushed_at is not None and now - self._flushed_at < USE_FLUSH_INTERVAL):
            return
        self._flushed_at = now
        used, self._used = self._used, {}
        try:
            async with db.transaction() as conn:
                await token_store.record_use(conn, used)
        except DatabaseError as exc:  # a lost minute of "last used" is not worth a failed request
            log.warning("token last-use not recorded", extra={"tokens": len(used), "error": str(exc)[:200]})

    def lookup(self, presented: str) -> CachedToken | None:
        """The usable token whose secret is ``presented``, or None (unknown, revoked, expired)."""
        if not is_runtime_secret(presented):
            return None
        found = self._by_hash.get(secret_hash(presented))
        if found is None:
            return None
        now = self._wall()
        if found.expires_at <= now:
            return None
        self._used[found.id] = now
        return found
