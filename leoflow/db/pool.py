"""The HTTP API's connection pool: one psycopg pool that both raw reads and SQLAlchemy share.

Why not SQLAlchemy's own pool for the API: measured with ``bench/api.py``'s load (64
connections, 2 cores), SQLAlchemy's async ``QueuePool`` hands connections out unfairly under
contention (p99 ≈ 180 ms at 1,900 req/s) and ``pool_pre_ping`` adds a round trip per request
(1,270 req/s, p99 ≈ 930 ms), while ``psycopg_pool.AsyncConnectionPool`` queues waiters FIFO
(2,700 req/s, p99 ≈ 40 ms). So the API owns one psycopg pool of exactly its budgeted size
(:mod:`leoflow.db.budget`) and:

- hot reads run on it directly (``pool.connection()``), in autocommit: one statement, one
  round trip, no BEGIN/ROLLBACK around it;
- everything written through SQLAlchemy (``dag_store``) runs on an engine *on top of the same
  pool* (:func:`engine_on_pool`): SQLAlchemy's ``NullPool`` borrows a psycopg connection per
  checkout, and "closing" a borrowed connection hands it back to the pool
  (:class:`PoolConnection`). One pool, one bound, no second set of connections.

Pooled connections start in autocommit; a SQLAlchemy checkout switches to transactional mode
(SQLAlchemy manages BEGIN/COMMIT itself) and the pool's ``reset`` switches back on return.

Failure semantics: a broken connection (server restarted, network cut) fails the statement
that uses it — the request answers 503 + ``Retry-After`` — and the pool discards it and
reconnects in the background. No liveness ping per checkout: that would cost a round trip on
every request to save one failed request per connection after an outage. Waiting for a free
connection is bounded by :data:`CHECKOUT_TIMEOUT` (then 503, never a hung request).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from leoflow.db.database import Connection, Database
from leoflow.db.engine import DIALECT_URL
from leoflow.db.errors import translated_async
from leoflow.db.session import SessionSetup, behind_pooler, connect_kwargs, libpq_url, setup_session
from leoflow.errors import DatabaseUnavailable
from leoflow.settings import DatabaseSettings

#: Seconds a request waits for a free connection before answering 503 (also the wait while
#: the database is unreachable and the pool has no live connection to give).
CHECKOUT_TIMEOUT = 5.0

#: Seconds one background reconnection keeps retrying (see make_connection_pool).
RECONNECT_WINDOW = 10.0

AsyncPool = AsyncConnectionPool["PoolConnection"]


class PoolConnection(AsyncConnection[Any]):
    """A psycopg connection whose ``close()`` returns it to the pool it was borrowed from.

    psycopg_pool's own ``close_returns=True`` does the same *except* for a connection that is
    already broken (``close()`` returns early when ``closed`` is true): after a database
    restart each broken connection SQLAlchemy "closed" would stay checked out forever and the
    pool would never reconnect. Here a borrowed connection always goes back; the pool
    replaces a broken one with a fresh connection.
    """

    async def close(self) -> None:
        pool = getattr(self, "_pool", None)  # set by the pool while the connection is lent out
        if pool is not None:
            await pool.putconn(self)
            return
        await super().close()


async def _back_to_autocommit(conn: PoolConnection) -> None:
    await conn.set_autocommit(True)


class ConnectFailures:
    """The last error the pool's background connection attempts met, with the server's own words.

    psycopg_pool only logs a failed attempt; a request waiting for a connection then times out
    with "couldn't get a connection" — true, but useless to an operator. Kept here, the real
    cause (``FATAL: password authentication failed``, a pooler refusing a parameter) is what
    ``/readyz`` and the request's 503 report.
    """

    def __init__(self) -> None:
        self.last: str | None = None
        self.behind_pooler = False


def make_connection_pool(settings: DatabaseSettings, *, size: int, application_name: str,
                         failures: ConnectFailures | None = None) -> AsyncPool:
    """A closed pool of at most ``size`` connections; ``await pool.open()`` inside an event loop.

    Sessions run in UTC, so timestamps rendered by PostgreSQL (JSON built in SQL) and by
    Python carry the same ``+00:00`` offset whatever the server's ``TimeZone``. Timeouts and the
    zone are set after connecting (:mod:`leoflow.db.session`), never as startup options.
    """
    assert settings.url, "database URL required"
    setup = SessionSetup.for_statements(settings.statement_timeout, utc=True)
    seen = failures or ConnectFailures()

    class Recording(PoolConnection):
        @classmethod
        async def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                conn = await super().connect(*args, **kwargs)
            except Exception as exc:  # recorded, then raised on: the pool retries and logs it
                seen.last = _first_line(exc)
                raise
            return conn

    async def configure(conn: PoolConnection) -> None:
        try:
            await setup_session(conn, setup)
        except Exception as exc:  # recorded, then raised on: the pool discards the connection
            seen.last = _first_line(exc)
            raise
        seen.last = None
        seen.behind_pooler = behind_pooler(conn)

    return AsyncConnectionPool(
        libpq_url(settings.url), kwargs={**connect_kwargs(application_name), "autocommit": True},
        connection_class=Recording, min_size=1, max_size=size, open=False, reset=_back_to_autocommit,
        configure=configure, timeout=CHECKOUT_TIMEOUT, name=application_name,
        # A lost connection is re-established in the background with backoff (1, 2, 4 s...);
        # after RECONNECT_WINDOW the slot is given up and the next request regrows it at once.
        # Short, so a database back from a restart is used within seconds, not after a long
        # backoff step.
        reconnect_timeout=RECONNECT_WINDOW,
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def engine_on_pool(pool: AsyncPool) -> AsyncEngine:
    """A SQLAlchemy engine whose every connection is borrowed from ``pool`` (no pool of its own)."""

    async def borrow() -> PoolConnection:
        conn = await pool.getconn()
        async with contextlib.AsyncExitStack() as on_failure:
            on_failure.push_async_callback(pool.putconn, conn)  # hand it back if the switch fails
            await conn.set_autocommit(False)
            on_failure.pop_all()
        return conn

    return create_async_engine(DIALECT_URL, poolclass=NullPool, async_creator=borrow)


class PooledDatabase(Database):
    """The API's :class:`~leoflow.db.database.Database`: one pool, three ways in, one error boundary.

    - :meth:`transaction` — SQLAlchemy read-write transaction (writes);
    - :meth:`connect` — SQLAlchemy in autocommit (reads: one statement, one round trip, no
      BEGIN/ROLLBACK pair around it; reads that need one snapshot are single statements);
    - :meth:`raw` — a bare psycopg connection (the hot read that PostgreSQL renders as JSON).

    The pool is created closed: :meth:`open` inside the event loop (without waiting for a first
    connection: the API starts, and is live, while the database is down), :meth:`close` at the
    end.
    """

    def __init__(self, pool: AsyncPool, engine: AsyncEngine, failures: ConnectFailures | None = None) -> None:
        super().__init__(engine)
        self.pool = pool
        self.failures = failures or ConnectFailures()
        self._reader = engine.execution_options(isolation_level="AUTOCOMMIT")

    @classmethod
    def create(cls, settings: DatabaseSettings, *, size: int, application_name: str) -> PooledDatabase:
        failures = ConnectFailures()
        pool = make_connection_pool(settings, size=size, application_name=application_name, failures=failures)
        return cls(pool, engine_on_pool(pool), failures)

    @asynccontextmanager
    async def translated(self) -> AsyncIterator[None]:
        """Driver errors as Leoflow errors; "cannot connect" carries the server's last refusal."""
        try:
            async with translated_async():
                yield
        except DatabaseUnavailable as exc:
            if self.failures.last is None:
                raise
            raise DatabaseUnavailable(f"cannot connect to the database: {self.failures.last}") from exc

    async def open(self) -> None:
        async with self.translated():
            await self.pool.open(wait=False)

    async def close(self) -> None:
        async with self.translated():
            await self.engine.dispose()
            await self.pool.close()

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Connection]:
        async with self.translated(), self._reader.connect() as conn:
            yield conn

    @asynccontextmanager
    async def raw(self) -> AsyncIterator[PoolConnection]:
        async with self.translated(), self.pool.connection() as conn:
            yield conn
