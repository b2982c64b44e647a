"""The handle every layer above ``leoflow.db`` holds instead of an engine.

A :class:`Database` wraps one bounded SQLAlchemy ``AsyncEngine`` and hands out connections
only inside context managers that translate driver errors (:mod:`leoflow.db.connection.driver_errors`), so the
scheduler, the executors, the election and the API deal in Leoflow errors alone:

- :meth:`Database.transaction` — a read-write transaction, committed when the block ends;
- :meth:`Database.fenced` — the same, opened with the fencing check of a leadership term
  (:mod:`leoflow.db.connection.fencing`): it commits only while that term is the newest, and raises
  :class:`~leoflow.errors.FencedOut` before anything is written otherwise;
- :meth:`Database.connect` — a connection for reads (SQLAlchemy's implicit transaction, rolled
  back at the end).

:data:`Connection` is the type the store functions take; code above ``db`` only passes it
through to them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from leoflow.db.connection.driver_errors import translated_async
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.connection.fencing import check_term_async
from leoflow.settings import DatabaseSettings

#: A connection inside a transaction, as the store functions take it.
Connection = AsyncConnection


class Database:
    """One bounded engine, reachable only through error-translating context managers."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @classmethod
    def with_pool(cls, settings: DatabaseSettings, *, application_name: str, pool_size: int) -> Database:
        """A database handle with its own pool of at most ``pool_size`` connections (opened lazily)."""
        return cls(make_async_engine(settings, application_name=application_name, pool_size=pool_size))

    def translated(self) -> AbstractAsyncContextManager[None]:
        """The error boundary of this handle (a pooled handle adds why it cannot connect)."""
        return translated_async()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        async with self.translated(), self.engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def fenced(self, cluster: str, term: int) -> AsyncIterator[Connection]:
        """A write transaction that commits only while ``term`` is the cluster's newest."""
        async with self.translated(), self.engine.begin() as conn:
            await check_term_async(conn, cluster, term)
            yield conn

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Connection]:
        async with self.translated(), self.engine.connect() as conn:
            yield conn

    async def check(self) -> None:
        """Open one connection and run a statement on it: can this handle's connections work at all?"""
        async with self.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        async with self.translated():
            await self.engine.dispose()
