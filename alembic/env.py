"""Alembic environment for Leoflow.

The URL comes from the config (set by ``leoflow db ...``) or ``LEOFLOW_DATABASE_URL`` (plain
``alembic`` from a checkout). Migrations run under a transaction-level advisory lock so that
replicas or hook Jobs upgrading at the same moment apply each revision exactly once.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from sqlalchemy import Connection, create_engine, pool, text

from alembic import context
from leoflow.db.engine import sqlalchemy_url
from leoflow.db.migrations import MIGRATION_LOCK
from leoflow.db.models import Base

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name)

target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("LEOFLOW_DATABASE_URL")
    if not url:
        raise SystemExit("LEOFLOW_DATABASE_URL: is not set (expected postgresql://...)")
    return sqlalchemy_url(url)


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True,
                      compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool,
                           connect_args={"application_name": "leoflow-migrate", "connect_timeout": 10})
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, compare_type=True,
                      transaction_per_migration=False)
    with context.begin_transaction():
        context.execute(text("SELECT pg_advisory_xact_lock(:a, :b)").bindparams(
            a=MIGRATION_LOCK[0], b=MIGRATION_LOCK[1]))
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
