"""Server administration statements for the embedded PostgreSQL and test harnesses.

Starting a private server (standalone mode, tests, benchmarks) needs two things of SQL: wait
until the server accepts connections, and create a database. They live here so that every
statement Leoflow runs stays in the data layer (docs/adr/0008-layers.md); driver errors leave
as Leoflow errors.
"""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from leoflow.db.errors import translated
from leoflow.db.session import connect_sync
from leoflow.errors import DatabaseUnavailable


def wait_until_accepting(url: str, *, timeout: float) -> None:
    """Return once ``url`` accepts a connection; DatabaseUnavailable after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with connect_sync(url, None, application_name="leoflow-admin", connect_timeout=2):
                return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise DatabaseUnavailable(f"the server does not accept connections: {exc}") from None
            time.sleep(0.1)


def create_database(admin_url: str, name: str, *, template: str | None = None) -> bool:
    """``CREATE DATABASE name [TEMPLATE template]``; False when it exists already."""
    query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
    with translated(), connect_sync(admin_url, None, application_name="leoflow-admin") as conn:
        try:
            conn.execute(query)
        except psycopg.errors.DuplicateDatabase:
            return False
    return True
