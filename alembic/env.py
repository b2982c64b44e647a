"""Alembic environment for Leoflow.

The URL comes from the config (set by ``leoflow db ...``) or ``LEOFLOW_DATABASE_URL`` (plain
``alembic`` from a checkout); it goes to libpq unchanged (multi-host lists, sockets, a schema in
``options=-csearch_path%3D...``), see ``leoflow.db.connection.connect``. Migrations run under a
transaction-level advisory lock so that replicas or hook Jobs upgrading at the same moment apply
each revision exactly once; a schema named by the URL's ``search_path`` is created first if it
does not exist; and the current revision's compatibility declaration is recorded for
``/readyz`` (``leoflow.db.migrations``).
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from sqlalchemy import Connection

from alembic import context
from leoflow.db import migrations
from leoflow.db.connection.engine import make_sync_engine
from leoflow.db.tables import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name)

target_metadata = Base.metadata


def _url() -> str:
    url = (config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
           or os.environ.get("LEOFLOW_DATABASE_URL"))
    if not url:
        raise SystemExit("LEOFLOW_DATABASE_URL: is not set (expected postgresql://...)")
    return str(url)


def run_migrations_offline() -> None:
    context.configure(url="postgresql+psycopg://", target_metadata=target_metadata, literal_binds=True,
                      compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_sync_engine(_url(), application_name="leoflow-migrate")
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, compare_type=True,
                      transaction_per_migration=False)
    with context.begin_transaction():
        migrations.prepare(connection, _url())
        context.run_migrations()
        migrations.record_compatibility(connection, context.get_context().get_current_revision())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
