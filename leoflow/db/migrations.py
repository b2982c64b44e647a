"""Schema migrations: thin wrappers over alembic for ``leoflow db ...`` and readiness checks.

Driver errors leave as Leoflow errors (:mod:`leoflow.db.errors`): an unreachable server is a
:class:`~leoflow.errors.DatabaseUnavailable` the CLI prints as one line.

The migration scripts live in the top-level ``alembic/`` directory; the package reaches them
through ``leoflow/migrations`` (a link in the source tree, real files in the wheel), so
``leoflow db upgrade`` works from a checkout, an editable install and the container image alike.
Concurrent upgrades (N replicas or hook Jobs racing) are serialised by an advisory lock taken in
``alembic/env.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

import psycopg
from alembic.config import Config
from alembic.script import ScriptDirectory

from alembic import command
from leoflow.db.engine import libpq_url, sqlalchemy_url
from leoflow.db.errors import translated

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


def current_revision(database_url: str) -> str | None:
    """The revision the database is at (None when it has no schema yet)."""
    with translated(), psycopg.connect(libpq_url(database_url), connect_timeout=5, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('alembic_version') IS NOT NULL").fetchone()
        if not row or not row[0]:
            return None
        found = conn.execute("SELECT version_num FROM alembic_version LIMIT 1").fetchone()
        return str(found[0]) if found else None


def upgrade(database_url: str, revision: str = "head") -> None:
    with translated():
        command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    with translated():
        command.downgrade(alembic_config(database_url), revision)
