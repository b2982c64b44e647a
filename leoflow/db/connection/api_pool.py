"""The HTTP API's connection pool: one psycopg pool that both raw reads and SQLAlchemy share.

Why not SQLAlchemy's own pool for the API: measured with ``bench/api.py``'s load (64
connections, 2 cores), SQLAlchemy's async ``QueuePool`` hands connections out unfairly under
contention (p99 ≈ 180 ms at 1,900 req/s) and ``pool_pre_ping`` adds a round trip per request
(1,270 req/s, p99 ≈ 930 ms), while ``psycopg_pool.AsyncConnectionPool`` queues waiters FIFO
(2,700 req/s, p99 ≈ 40 ms). So the API owns one psycopg pool of exactly its budgeted size
(:mod:`leoflow.db.connection.budget`) and:

- hot reads run on it directly (``pool.connection()``), in autocommit: one statement, one
  round trip, no BEGIN/ROLLBACK around it;
- everything written through SQLAlchemy (the stores) runs on an engine *on top of the same
  pool* (:func:`engine_on_pool`): SQLAlchemy's ``NullPool`` borrows a psycopg connection per
  checkout, and "closing" a borrowed connection hands it back to the pool
  (:class:`PoolConnection`). One pool, one bound, no second set of connections.

Pooled connections start in autocommit; a SQLAlchemy checkout switches to transactional mode
(SQLAlchemy manages BEGIN/COMMIT itself) and handing it back switches back
(:meth:`PoolConnection.close`). Not psycopg_pool's ``reset`` hook: with one configured, the pool
returns *every* connection through a queue and a worker task, a hop the hot read paid on each
request for a reset only SQLAlchemy's connections need.

Hot reads wait for a connection in this replica's own FIFO (:meth:`PooledDatabase.raw`, a
semaphore of the pool's size) rather than in psycopg_pool's queue, whose waiters cost a task and
a timer each (``asyncio.wait_for``): at 64 concurrent requests on a pool of 7 nearly every
request waits. Both bounds stay: at most the pool's size in connections, and at most
:data:`CHECKOUT_TIMEOUT` of waiting in all (``bench/api.py``, issue 21).

Failure semantics: a broken connection (server restarted, network cut) fails the statement
that uses it — the request answers 503 + ``Retry-After`` — and the pool discards it and
reconnects in the background. No liveness ping per checkout: that would cost a round trip on
every request to save one failed request per connection after an outage. Waiting for a free
connection is bounded by :data:`CHECKOUT_TIMEOUT` (then 503, never a hung request).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from leoflow.db.connection.connect import SessionSetup, behind_pooler, connect_kwargs, libpq_url, setup_session
from leoflow.db.connection.database import Connection, Database
from leoflow.db.connection.driver_errors import DRIVER_ERRORS, translate
from leoflow.db.connection.engine import DIALECT_URL
from leoflow.errors import DatabaseUnavailable, LeoflowError
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

    _reading: AsyncCursor[Any] | None = None

    def reading_cursor(self) -> AsyncCursor[Any]:
        """This connection's cursor for hot reads, reused: a new cursor per statement (with its
        own copy of the adapters map) was a few percent of a GET's CPU (issue 21)."""
        if self._reading is None or self._reading.closed:
            self._reading = self.cursor()
        return self._reading

    async def close(self) -> None:
        pool = getattr(self, "_pool", None)  # set by the pool while the connection is lent out
        if pool is None:
            await super().close()
            return
        try:
            await _back_to_autocommit(self)
        except psycopg.Error:
            # A connection that cannot be reset is not lent again: closed here, the pool
            # discards it on return and connects a replacement (as its own reset hook would).
            await super().close()
        await pool.putconn(self)


def reading_cursor(conn: AsyncConnection[Any]) -> AsyncCursor[Any]:
    """A cursor for one hot read: the pooled connection's reused one, else a new one."""
    return conn.reading_cursor() if isinstance(conn, PoolConnection) else conn.cursor()


async def _back_to_autocommit(conn: AsyncConnection[Any]) -> None:
    """Back to the pool's resting state: no open transaction, autocommit on (no-op for raw reads)."""
    if conn.closed or conn.autocommit:
        return
    if conn.pgconn.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        await conn.rollback()
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
    zone are set after connecting (:mod:`leoflow.db.connection.connect`), never as startup options.
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
        connection_class=Recording, min_size=1, max_size=size, open=False,
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
    """The API's :class:`~leoflow.db.connection.database.Database`: one pool, three ways in, one error boundary.

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
        #: Hot reads' admission (see the module docstring): never more than the pool holds.
        self.raw_slots = asyncio.Semaphore(pool.max_size)

    @classmethod
    def create(cls, settings: DatabaseSettings, *, size: int, application_name: str) -> PooledDatabase:
        failures = ConnectFailures()
        pool = make_connection_pool(settings, size=size, application_name=application_name, failures=failures)
        return cls(pool, engine_on_pool(pool), failures)

    def translate(self, exc: BaseException) -> LeoflowError:
        """``exc`` as a Leoflow error; "cannot connect" carries the server's last refusal."""
        error = translate(exc)
        if isinstance(error, DatabaseUnavailable) and self.failures.last is not None:
            return DatabaseUnavailable(f"cannot connect to the database: {self.failures.last}")
        return error

    @asynccontextmanager
    async def translated(self) -> AsyncIterator[None]:
        """Driver errors as Leoflow errors (:meth:`translate`)."""
        try:
            yield
        except (*DRIVER_ERRORS, DatabaseUnavailable) as exc:
            error = self.translate(exc)
            if error is exc:
                raise
            raise error from exc

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

    def raw(self) -> RawRead:
        """A pooled connection in autocommit for one hot read; 503 after CHECKOUT_TIMEOUT of waiting.

        No transaction block around it (``pool.connection()`` would COMMIT-check on exit): the
        read is one statement in autocommit; a connection returned mid-statement (the request
        was cancelled) is closed and replaced by the pool.
        """
        return RawRead(self)

    async def _checkout(self) -> PoolConnection:
        slots = self.raw_slots
        timeout = CHECKOUT_TIMEOUT
        if slots.locked():
            started = time.monotonic()
            try:
                async with asyncio.timeout(CHECKOUT_TIMEOUT):
                    await slots.acquire()
            except TimeoutError:
                raise PoolTimeout(f"couldn't get a connection after {CHECKOUT_TIMEOUT:.2f} sec") from None
            # The whole wait stays within CHECKOUT_TIMEOUT (getconn refuses a timeout of 0).
            timeout = max(CHECKOUT_TIMEOUT - (time.monotonic() - started), 0.001)
        else:
            await slots.acquire()  # a free slot: returns at once
        try:
            return await self.pool.getconn(timeout)
        except BaseException:  # not swallowed: the slot goes back whatever ended the wait
            slots.release()
            raise


class RawRead:
    """``async with db.raw() as conn``: checkout, hand back, driver errors as Leoflow errors.

    A plain class rather than two nested ``@asynccontextmanager`` generators: this runs on every
    hot read, and the generators' machinery was a measurable share of its CPU (issue 21).
    """

    __slots__ = ("_conn", "_db")

    def __init__(self, db: PooledDatabase) -> None:
        self._db = db
        self._conn: PoolConnection | None = None

    async def __aenter__(self) -> PoolConnection:
        try:
            self._conn = await self._db._checkout()
        except DRIVER_ERRORS as exc:
            raise self._db.translate(exc) from exc
        return self._conn

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        conn, self._conn = self._conn, None
        assert conn is not None
        try:
            await self._db.pool.putconn(conn)
        except DRIVER_ERRORS as failed:
            raise self._db.translate(failed) from failed
        finally:
            self._db.raw_slots.release()
        if isinstance(exc, (*DRIVER_ERRORS, DatabaseUnavailable)):
            error = self._db.translate(exc)
            if error is not exc:
                raise error from exc
