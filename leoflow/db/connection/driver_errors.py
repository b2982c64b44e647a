"""The database error boundary: driver exceptions become Leoflow's, once, here.

Everything above :mod:`leoflow.db` catches :mod:`leoflow.errors` types only; psycopg,
psycopg_pool and SQLAlchemy exceptions never leave this package. The mapping is by *meaning*,
so callers can decide without knowing the driver:

- the server is not answering (connection refused or lost, pool exhausted or its reconnection
  failing, a statement cancelled by ``statement_timeout``) → :class:`DatabaseUnavailable`:
  retry later, answer 503;
- the server rolled a transaction back for meeting a concurrent one (``deadlock_detected``,
  ``serialization_failure``) → :class:`WriteConflict`, a kind of ``DatabaseUnavailable``: the
  whole transaction may run again;
- ``lock_timeout`` expired → :class:`LockTimeout`;
- the schema is older than this build (a table or column is missing) → :class:`SchemaNotCurrent`;
- a uniqueness or foreign-key rule refused the write → :class:`Conflict`;
- a value the server cannot store (out of range, bad encoding) → :class:`ValueRejected`;
- anything else the server or driver refused → :class:`DatabaseError` (a bug, usually).

Translating twice is harmless: Leoflow errors pass through :func:`translated` untouched.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import psycopg
import psycopg.errors
import psycopg_pool
import sqlalchemy.exc

from leoflow.errors import (
    Conflict,
    DatabaseError,
    DatabaseUnavailable,
    LeoflowError,
    LockTimeout,
    SchemaNotCurrent,
    ValueRejected,
    WriteConflict,
)

#: What counts as "the driver failed" (OSError: a socket error psycopg did not wrap).
DRIVER_ERRORS = (sqlalchemy.exc.SQLAlchemyError, psycopg.Error, psycopg_pool.PoolTimeout)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def translate(exc: BaseException) -> LeoflowError:
    """The Leoflow error that says what ``exc`` (raised by the driver or SQLAlchemy) means."""
    if isinstance(exc, LeoflowError):
        return exc
    # SQLAlchemy wraps what psycopg raised in ``.orig``; raw psycopg code raises it bare.
    driver = getattr(exc, "orig", None) or exc
    detail = _first_line(driver)
    if isinstance(driver, psycopg.errors.LockNotAvailable):
        return LockTimeout(f"a lock was not granted in time: {detail}")
    if isinstance(driver, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure):
        return WriteConflict(f"the write met a concurrent one and was rolled back: {detail}")
    if isinstance(driver, psycopg.errors.QueryCanceled):
        return DatabaseUnavailable(f"the database did not answer in time: {detail}")
    if isinstance(exc, sqlalchemy.exc.TimeoutError) or isinstance(driver, psycopg_pool.PoolTimeout):
        return DatabaseUnavailable("no database connection became free in time (pool exhausted or database down)")
    if isinstance(driver, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return SchemaNotCurrent(f"the database schema is not current ({detail}); run `leoflow db upgrade`")
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
        return DatabaseUnavailable(f"the database connection was lost: {detail}")
    if isinstance(driver, psycopg.OperationalError | psycopg.InterfaceError) or isinstance(
            exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return DatabaseUnavailable(f"database unavailable: {detail}")
    if isinstance(driver, psycopg.IntegrityError) or isinstance(exc, sqlalchemy.exc.IntegrityError):
        return Conflict(f"the write conflicts with existing state: {detail}")
    if isinstance(driver, psycopg.DataError) or isinstance(exc, sqlalchemy.exc.DataError):
        return ValueRejected(f"a value is not acceptable to the database: {detail}")
    return DatabaseError(f"{type(driver).__name__}: {detail}")


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Re-raise driver exceptions from the block as Leoflow errors (the cause is kept)."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        raise translate(exc) from exc


@contextlib.asynccontextmanager
async def translated_async() -> AsyncIterator[None]:
    """Async twin of :func:`translated`, for blocks that ``await`` the driver."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        raise translate(exc) from exc
