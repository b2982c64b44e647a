"""Server administration statements for the embedded PostgreSQL and test harnesses.

Starting a private server (standalone mode, tests, benchmarks) needs a few things of SQL: wait
until the server accepts connections, create a database, and (standalone) the statement that
sets the superuser's password in single-user mode. They live here so that every
statement Leoflow runs stays in the data layer (docs/adr/0008-layers.md); driver errors leave
as Leoflow errors.
"""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from leoflow.db.connection.connect import connect_sync
from leoflow.db.connection.driver_errors import translated
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


def set_password_script(role: str, password: str) -> str:
    """The statement setting ``role``'s password, for a server in single-user mode (no connection to run it on).

    ``password`` must be URL-safe base64 (what standalone generates): it is quoted as a literal.
    """
    if not password.replace("-", "").replace("_", "").isalnum() or not role.isidentifier():
        raise ValueError("role must be an identifier and password URL-safe base64")
    return f"ALTER ROLE {role} PASSWORD '{password}';\n"
