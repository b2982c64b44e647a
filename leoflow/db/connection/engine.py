"""SQLAlchemy engines whose connections come from :mod:`leoflow.db.connection.connect`.

SQLAlchemy only needs to know the dialect (``postgresql+psycopg``); it never sees the user's
URL, which goes to libpq unchanged (multi-host lists, sockets, ``options`` — see
:mod:`leoflow.db.connection.connect`). Pools are bounded (no overflow): a replica's engines together stay
within the budget of :mod:`leoflow.db.connection.budget` (``LEOFLOW_DB_POOL_SIZE`` plus the one lock
connection). The HTTP API's pool lives in :mod:`leoflow.db.connection.api_pool`.
"""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy import Engine, create_engine, pool
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from leoflow.db.connection.connect import SessionSetup, connect_async, connect_sync, libpq_url
from leoflow.settings import DatabaseSettings

#: The dialect; the URL itself never passes through SQLAlchemy.
DIALECT_URL = "postgresql+psycopg://"

__all__ = ["libpq_url", "make_async_engine", "make_sync_engine", "sqlalchemy_url"]


def sqlalchemy_url(url: str) -> str:
    """``postgresql://...`` → ``postgresql+psycopg://...`` (for tools that want SQLAlchemy's form)."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def make_async_engine(settings: DatabaseSettings, *, application_name: str = "leoflow",
                      pool_size: int | None = None) -> AsyncEngine:
    """The one engine factory: bounded, asyncio (the leader's services, membership, replica
    services, the CLI's short checks); wrapped by :class:`leoflow.db.connection.database.Database`."""
    assert settings.url, "database URL required"
    url = settings.url
    setup = SessionSetup.for_statements(settings.statement_timeout)

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await connect_async(url, setup, application_name=application_name)

    return create_async_engine(
        DIALECT_URL, async_creator=connect,
        pool_size=pool_size or settings.pool_size,
        max_overflow=0,
        pool_pre_ping=True,
        pool_timeout=10,
    )


def make_sync_engine(url: str, *, application_name: str, connect_timeout: int = 10) -> Engine:
    """An unpooled synchronous engine (alembic): one libpq connection per use, no timeouts set
    (a migration may legitimately run long)."""

    def connect() -> psycopg.Connection[Any]:
        return connect_sync(url, None, application_name=application_name, connect_timeout=connect_timeout,
                            autocommit=False)

    return create_engine(DIALECT_URL, creator=connect, poolclass=pool.NullPool)
