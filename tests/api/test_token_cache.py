"""The token cache's own promises, on real PostgreSQL: expiry between refreshes, one refresh at a time, cost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from leoflow.api.token_cache import TTL, TokenCache
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import api_tokens as token_store
from leoflow.model.access.tokens import new_secret, new_token_id, secret_hash
from leoflow.settings import Settings


def _with_db(settings: Settings, body: Callable[[Database], Awaitable[None]]) -> None:
    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=2, application_name="test-token-cache")
        try:
            await body(Database(engine))
        finally:
            await engine.dispose()
    asyncio.run(main())


async def _add(db: Database, secret: str, *, expires_in: timedelta = timedelta(days=1), name: str = "t") -> str:
    token_id = new_token_id()
    async with db.transaction() as conn:
        await token_store.create_token(conn, token_store.NewToken(
            id=token_id, name=name, team=None, role="viewer", secret_hash=secret_hash(secret), prefix=secret[:12],
            expires_at=datetime.now(UTC) + expires_in, created_by="test"))
    return token_id


class Clocks:
    def __init__(self) -> None:
        self.mono = 0.0
        self.wall = datetime.now(UTC)


def test_a_token_expires_between_refreshes(settings: Settings) -> None:
    _with_db(settings, _a_token_expires_between_refreshes)


async def _a_token_expires_between_refreshes(db: Database) -> None:
    clocks = Clocks()
    cache = TokenCache(monotonic=lambda: clocks.mono, wall=lambda: clocks.wall)
    cache.attach(db)
    secret = new_secret()
    await _add(db, secret, expires_in=timedelta(hours=1))
    await cache.refresh_if_stale()
    assert cache.lookup(secret) is not None
    clocks.wall += timedelta(minutes=59)
    assert cache.lookup(secret) is not None
    clocks.wall += timedelta(minutes=1, seconds=1)  # no refresh in between: the expiry is checked per request
    assert cache.lookup(secret) is None


def test_stale_within_ttl_and_one_refresh_for_many_waiters(settings: Settings) -> None:
    _with_db(settings, _stale_within_ttl_and_one_refresh_for_many_waiters)


async def _stale_within_ttl_and_one_refresh_for_many_waiters(db: Database) -> None:
    clocks = Clocks()
    cache = TokenCache(monotonic=lambda: clocks.mono)
    cache.attach(db)
    await cache.refresh_if_stale()
    secret = new_secret()
    await _add(db, secret)
    clocks.mono += TTL / 2
    await cache.refresh_if_stale()
    assert cache.lookup(secret) is None  # within the TTL the cache is trusted
    clocks.mono += TTL
    generation_reads = 0
    real = token_store.generation

    async def counting(conn: object) -> int:
        nonlocal generation_reads
        generation_reads += 1
        return await real(conn)  # type: ignore[arg-type]

    token_store.generation = counting  # type: ignore[assignment]
    try:
        await asyncio.gather(*(cache.refresh_if_stale() for _ in range(50)))
    finally:
        token_store.generation = real  # type: ignore[assignment]
    assert generation_reads == 1
    assert cache.lookup(secret) is not None


def test_lookup_costs_microseconds_with_a_thousand_tokens(settings: Settings) -> None:
    _with_db(settings, _lookup_costs_microseconds_with_a_thousand_tokens)


async def _lookup_costs_microseconds_with_a_thousand_tokens(db: Database) -> None:
    secrets_ = [new_secret() for _ in range(1000)]
    async with db.transaction() as conn:
        for number, secret in enumerate(secrets_):
            await token_store.create_token(conn, token_store.NewToken(
                id=new_token_id(), name=f"t{number}", team=None, role="viewer", secret_hash=secret_hash(secret),
                prefix=secret[:12], expires_at=datetime.now(UTC) + timedelta(days=1), created_by="test"))
    cache = TokenCache()
    cache.attach(db)
    await cache.refresh_if_stale()
    assert len(cache) == 1000
    rounds = 20_000
    started = time.perf_counter()
    for number in range(rounds):
        assert cache.lookup(secrets_[number % 1000]) is not None
    per_lookup = (time.perf_counter() - started) / rounds
    assert per_lookup < 0.2e-3 / 10, f"{per_lookup * 1e6:.1f} µs per lookup"
