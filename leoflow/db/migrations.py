"""Schema migrations: thin wrappers over alembic for ``leoflow db ...`` and readiness checks.

The migration scripts live in the top-level ``alembic/`` directory; the package reaches them
through ``leoflow/migrations`` (a link in the source tree, real files in the wheel), so
``leoflow db upgrade`` works from a checkout, an editable install and the container image alike.
Concurrent upgrades (N replicas or hook Jobs racing) are serialised by an advisory lock taken in
``alembic/env.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from alembic import command
from leoflow.db.engine import sqlalchemy_url

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
#: Advisory lock key (two-int form) serialising concurrent migrations: namespace 'LEOF', 'MIGR'.
MIGRATION_LOCK = (0x4C454F46, 0x4D494752)


def alembic_config(database_url: str, *, stdout: TextIO | None = None) -> Config:
    cfg = Config(stdout=stdout) if stdout is not None else Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # '%' must be escaped for configparser interpolation.
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(database_url).replace("%", "%%"))
    cfg.attributes["configure_logging"] = False
    return cfg


def head_revision() -> str:
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    head = script.get_current_head()
    assert head is not None
    return head


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)
