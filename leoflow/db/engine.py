"""Database engines and connection URLs.

Users give a libpq-style ``postgresql://`` URL; SQLAlchemy needs the driver named
(``postgresql+psycopg://``) and raw psycopg wants the plain form. These helpers convert between
them in one place. Pools are bounded (no overflow): a replica's engines together stay within the
budget of :mod:`leoflow.db.budget` (``LEOFLOW_DB_POOL_SIZE`` plus the one lock connection).
The HTTP API's pool lives in :mod:`leoflow.db.pool`.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from leoflow.settings import DatabaseSettings


def sqlalchemy_url(url: str) -> str:
    """``postgresql://...`` → ``postgresql+psycopg://...`` (psycopg 3 driver)."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def libpq_url(url: str) -> str:
    """``postgresql+psycopg://...`` → ``postgresql://...`` for psycopg.connect()."""
    if url.startswith("postgresql+psycopg://"):
        return "postgresql://" + url[len("postgresql+psycopg://"):]
    return url


def connect_args(settings: DatabaseSettings, application_name: str) -> dict[str, object]:
    timeout_ms = int(settings.statement_timeout * 1000)
    return {
        "application_name": application_name,
        "connect_timeout": 5,
        "options": f"-c statement_timeout={timeout_ms} -c lock_timeout={timeout_ms}",
        # Detect a dead server on pooled connections too (the lock connection sets its own).
        "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
    }


def make_async_engine(settings: DatabaseSettings, *, application_name: str = "leoflow",
                      pool_size: int | None = None) -> AsyncEngine:
    """The one engine factory: bounded, asyncio (the leader's services, membership, replica
    services, the CLI's short checks); wrapped by :class:`leoflow.db.database.Database`."""
    assert settings.url, "database URL required"
    return create_async_engine(
        sqlalchemy_url(settings.url),
        pool_size=pool_size or settings.pool_size,
        max_overflow=0,
        pool_pre_ping=True,
        pool_timeout=10,
        connect_args=connect_args(settings, application_name),
    )
