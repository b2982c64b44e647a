"""How every Leoflow database connection is opened and set up, in one place.

**The URL goes to libpq unchanged** (only a ``+psycopg`` driver suffix is dropped): every form
libpq accepts works everywhere — multi-host lists with ``target_session_attrs=read-write``,
``?host=...&port=...``, unix sockets, ``options=-csearch_path%3D...`` for a schema. SQLAlchemy
never parses it: engines get their connections from :func:`connect_async` / :func:`connect_sync`
(``async_creator``/``creator``), so the lock session, the pools, the LISTEN connection, alembic
and the CLI all connect the same way.

**Timeouts are set after connecting** (:func:`setup_session`: one ``SELECT set_config(...)``
round trip), never as the startup parameter ``options``: connection poolers refuse unknown
startup parameters (Debian's stock PgBouncer answers ``FATAL: unsupported startup parameter:
options``), and a Leoflow ``options`` would replace the user's own (their ``search_path``).

**A protocol-level pooler is detected, deterministically,** by the same round trip: the backend
pid the server announced at connect (``BackendKeyData``) is the real backend's pid when nothing
sits in between — or only a TCP proxy such as HAProxy, which relays it — and a pooler's own
random cancel key otherwise (PgBouncer, Odyssey, pgcat...). Behind such a pooler a connection
runs without server-side prepared statements (``prepare_threshold = None``): in transaction
mode the next statement may land on a backend that never saw the ``PREPARE``. Whether the
pooler also keeps a backend per session is the lock session's question, answered there
(:mod:`leoflow.db.connection.lock_connection`).

Failure semantics: connecting and setting up raise the driver's errors; callers translate them
(:mod:`leoflow.db.connection.driver_errors`) — the server's own message (e.g. the pooler's ``FATAL``) is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

#: Seconds libpq waits for each host of the URL before trying the next one.
CONNECT_TIMEOUT = 5


def libpq_url(url: str) -> str:
    """``postgresql+psycopg://...`` → ``postgresql://...``; anything else is passed on as given."""
    if url.startswith("postgresql+psycopg://"):
        return "postgresql://" + url[len("postgresql+psycopg://"):]
    return url


@dataclass(frozen=True)
class SessionSetup:
    """What a pooled connection sets once connected (see the module docstring for why not at startup)."""

    statement_timeout_ms: int
    lock_timeout_ms: int
    #: Render timestamps in UTC (the API's JSON built by PostgreSQL carries ``+00:00``).
    utc: bool = False

    @classmethod
    def for_statements(cls, statement_timeout: float, *, utc: bool = False) -> SessionSetup:
        timeout_ms = max(1, int(statement_timeout * 1000))
        return cls(statement_timeout_ms=timeout_ms, lock_timeout_ms=timeout_ms, utc=utc)


def connect_kwargs(application_name: str, *, connect_timeout: int = CONNECT_TIMEOUT) -> dict[str, Any]:
    """Client-side connection parameters every pooled connection uses (none a pooler refuses)."""
    return {
        "application_name": application_name[:63],
        "connect_timeout": connect_timeout,
        # Detect a dead server on pooled connections too (the lock session sets its own).
        "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
    }


_SETUP = ("SELECT pg_backend_pid(), set_config('statement_timeout', %s, false),"
          " set_config('lock_timeout', %s, false), set_config('TimeZone', %s, false)")
_SETUP_KEEP_ZONE = ("SELECT pg_backend_pid(), set_config('statement_timeout', %s, false),"
                    " set_config('lock_timeout', %s, false)")


def _apply(row: tuple[Any, ...] | None, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    assert row is not None
    if int(row[0]) != conn.info.backend_pid:
        conn.prepare_threshold = None  # behind a pooler: see the module docstring


def _setup_query(setup: SessionSetup) -> tuple[str, tuple[str, ...]]:
    params = (str(setup.statement_timeout_ms), str(setup.lock_timeout_ms))
    return (_SETUP, (*params, "UTC")) if setup.utc else (_SETUP_KEEP_ZONE, params)


async def setup_session(conn: psycopg.AsyncConnection[Any], setup: SessionSetup) -> None:
    """Apply ``setup`` to a fresh connection (committed, so it lasts the session)."""
    query, params = _setup_query(setup)
    row = await (await conn.execute(query, params)).fetchone()
    if not conn.autocommit:
        await conn.commit()
    _apply(row, conn)


def setup_session_sync(conn: psycopg.Connection[Any], setup: SessionSetup) -> None:
    query, params = _setup_query(setup)
    row = conn.execute(query, params).fetchone()
    if not conn.autocommit:
        conn.commit()
    _apply(row, conn)


def behind_pooler(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when a protocol-level pooler sits between us and the server (after :func:`setup_session`)."""
    return conn.prepare_threshold is None


async def connect_async(url: str, setup: SessionSetup, *, application_name: str,
                        autocommit: bool = False) -> psycopg.AsyncConnection[Any]:
    """A new, set-up asyncio connection (SQLAlchemy's ``async_creator`` for the leader's engine)."""
    conn = await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True,
                                                 **connect_kwargs(application_name))
    try:
        await setup_session(conn, setup)
        if not autocommit:
            await conn.set_autocommit(False)
    except BaseException:  # not swallowed: never leak a half-set-up connection
        await conn.close()
        raise
    return conn


def connect_sync(url: str, setup: SessionSetup | None, *, application_name: str,
                 connect_timeout: int = CONNECT_TIMEOUT, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A new synchronous connection (alembic, the CLI's checks, server administration)."""
    conn = psycopg.connect(libpq_url(url), autocommit=True,
                           **connect_kwargs(application_name, connect_timeout=connect_timeout))
    try:
        if setup is not None:
            setup_session_sync(conn, setup)
        if not autocommit:
            conn.autocommit = False
    except BaseException:  # not swallowed: never leak a half-set-up connection
        conn.close()
        raise
    return conn
