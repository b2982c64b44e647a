"""Schema migrations: thin wrappers over alembic for ``leoflow db ...`` and readiness checks.

Driver errors leave as Leoflow errors (:mod:`leoflow.db.connection.driver_errors`): an unreachable server is a
:class:`~leoflow.errors.DatabaseUnavailable` the CLI prints as one line.

The migration scripts live in the top-level ``alembic/`` directory; the package reaches them
through ``leoflow/migrations`` (a link in the source tree, real files in the wheel), so
``leoflow db upgrade`` works from a checkout, an editable install and the container image alike.
Concurrent upgrades (N replicas or hook Jobs racing) are serialised by an advisory lock taken in
``alembic/env.py`` (:func:`prepare`).

**Compatibility (ADR 0006).** A revision may declare, in its script, which *older code* still
runs correctly against its schema: ``compatible_code = ("0001",)`` (expand-only changes). The
declaration of the revision the database is at is recorded in ``schema_compatibility`` by every
upgrade or downgrade (:func:`record_compatibility`), so a replica of an older build — which
cannot know a newer revision — learns from the database that it may stay ready
(:func:`readiness_problem`). During a rolling upgrade the old replicas stay ready; after a code
rollback (schema left migrated) the rolled-back replicas are ready again.

**Downgrades that lose data.** Every revision declares ``drops_data_on_downgrade`` (a test
checks): whether its ``downgrade()`` drops tables or columns that hold data. ``leoflow db
downgrade`` asks for ``--yes`` before any downgrade that runs one of those
(:func:`data_dropping_downgrades`), so ``db downgrade 0003`` cannot drop the backfills, pools and
run commands of later revisions by accident. A revision without the declaration counts as losing data.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import psycopg
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection

from alembic import command
from leoflow.db.connection.connect import connect_sync
from leoflow.db.connection.driver_errors import translated
from leoflow.settings.database_url import parse_database_url

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
#: Advisory lock key (two-int form) serialising concurrent migrations: namespace 'LEOF', 'MIGR'.
MIGRATION_LOCK = (0x4C454F46, 0x4D494752)
#: A schema name Leoflow creates on its own (what an unquoted identifier may be).
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_$]{0,62}")


def alembic_config(database_url: str, *, stdout: TextIO | None = None) -> Config:
    cfg = Config(stdout=stdout) if stdout is not None else Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["database_url"] = database_url
    cfg.attributes["configure_logging"] = False
    return cfg


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory(str(MIGRATIONS_DIR))


@functools.cache
def head_revision() -> str:
    """This build's head revision (read from the scripts once per process)."""
    head = _scripts().get_current_head()
    assert head is not None
    return head


@functools.cache
def known_revisions() -> frozenset[str]:
    return frozenset(s.revision for s in _scripts().walk_revisions())


def declared_compatible_code(revision: str) -> tuple[str, ...]:
    """The older code heads ``revision``'s script declares able to run on its schema."""
    script = _scripts().get_revision(revision)
    module = script.module if script is not None else None
    declared: Sequence[str] = getattr(module, "compatible_code", ())
    return tuple(declared)


# --------------------------------------------------------------------------- running alembic

def current_revision(database_url: str) -> str | None:
    """The revision the database is at (None when it has no schema yet)."""
    with translated(), connect_sync(database_url, None, application_name="leoflow-cli") as conn:
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


def drops_everything(database_url: str, revision: str) -> bool:
    """Would downgrading to ``revision`` (``base``, ``-N``) drop every table?"""
    if revision == "base":
        return True
    if _is_relative(revision):
        current = current_revision(database_url)
        return int(revision[1:]) >= _depth(current)
    return False


def drops_data_on_downgrade(revision: str) -> bool:
    """What ``revision``'s script declares about its ``downgrade()`` (undeclared: it does, to be safe)."""
    script = _scripts().get_revision(revision)
    module = script.module if script is not None else None
    return bool(getattr(module, "drops_data_on_downgrade", True))


def data_dropping_downgrades(database_url: str, target: str) -> list[str]:
    """The revisions whose ``downgrade()`` would run to reach ``target`` and that declare they lose data.

    Resolved as alembic resolves it (``base``, ``0003``, ``-2``, ``0003+1``), from the revision the
    database is at; ``-N`` past the first revision counts as ``base``. A target alembic cannot
    resolve answers ``[]``: the downgrade itself then fails before it changes anything.
    """
    current = current_revision(database_url)
    if current is None:
        return []
    if _is_relative(target) and int(target[1:]) >= _depth(current):
        target = "base"
    try:
        steps = _scripts()._downgrade_revs(target, current)  # what ``command.downgrade`` runs
    except CommandError:
        return []
    return [step.revision.revision for step in steps if drops_data_on_downgrade(step.revision.revision)]


def _is_relative(revision: str) -> bool:
    return revision.startswith("-") and revision[1:].isascii() and revision[1:].isdigit()


def _depth(current: str | None) -> int:
    return len(list(_scripts().walk_revisions(base="base", head=current))) if current else 0


def prepare(conn: Connection, database_url: str) -> None:
    """First statements of every migration transaction (``alembic/env.py``).

    Takes :data:`MIGRATION_LOCK` (until commit), then creates the schema the URL's
    ``search_path`` names when it does not exist yet — one install per schema (ADR 0010) must
    be able to start from an empty schema exactly like one per database.
    """
    conn.execute(text("SELECT pg_advisory_xact_lock(:a, :b)"), {"a": MIGRATION_LOCK[0], "b": MIGRATION_LOCK[1]})
    schema = target_schema(database_url)
    if schema is not None:
        conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))


def target_schema(database_url: str) -> str | None:
    """The first schema of the URL's ``search_path`` when it is a plain name Leoflow may create."""
    search_path = parse_database_url(database_url).search_path
    if not search_path:
        return None
    first = search_path.split(",")[0].strip().strip('"')
    return first if _SCHEMA_NAME.fullmatch(first) and first not in ("public", "$user") else None


def record_compatibility(conn: Connection, revision: str | None) -> None:
    """Record the declaration of the revision the schema is now at (nothing before the table exists)."""
    if revision is None or not conn.execute(text("SELECT to_regclass('schema_compatibility') IS NOT NULL")).scalar():
        return
    conn.execute(text("DELETE FROM schema_compatibility"))
    conn.execute(text("INSERT INTO schema_compatibility (revision, compatible_code) VALUES (:r, CAST(:c AS jsonb))"),
                 {"r": revision, "c": json.dumps(list(declared_compatible_code(revision)))})


# --------------------------------------------------------------------------- readiness

@dataclass(frozen=True)
class SchemaState:
    """Where the database's schema is, and which code its revision declared compatible."""

    revision: str | None
    compatible_code: tuple[str, ...] = ()


#: Which of the two tables exist; then the version and its declaration (or the version alone).
_TABLES = ("SELECT to_regclass('alembic_version') IS NOT NULL,"
           " to_regclass('schema_compatibility') IS NOT NULL")
_VERSION = "SELECT version_num FROM alembic_version LIMIT 1"
_DECLARED = ("SELECT v.version_num, c.compatible_code FROM alembic_version v"
             " LEFT JOIN schema_compatibility c ON c.revision = v.version_num LIMIT 1")


async def schema_state(conn: AsyncConnection) -> SchemaState:
    """Two cheap statements: which tables exist, then the version and its declaration."""
    found = (await conn.execute(text(_TABLES))).one()
    if not found[0]:
        return SchemaState(None)
    if not found[1]:
        return SchemaState((await conn.execute(text(_VERSION))).scalar())
    row = (await conn.execute(text(_DECLARED))).first()
    return SchemaState(None) if row is None else SchemaState(row[0], tuple(row[1] or ()))


def schema_state_sync(conn: psycopg.Connection[Any]) -> SchemaState:
    """:func:`schema_state` on a plain psycopg connection (the election's lock session)."""
    found = conn.execute(_TABLES).fetchone()
    if not found or not found[0]:
        return SchemaState(None)
    if not found[1]:
        version = conn.execute(_VERSION).fetchone()
        return SchemaState(version[0] if version else None)
    row = conn.execute(_DECLARED).fetchone()
    return SchemaState(None) if row is None else SchemaState(row[0], tuple(row[1] or ()))


def readiness_problem(state: SchemaState, head: str | None = None) -> str | None:
    """Why code at ``head`` (this build's) must not serve this schema; None when it may."""
    head = head or head_revision()
    if state.revision == head or head in state.compatible_code:
        return None
    if state.revision is None:
        return f"the database has no schema (head is {head}); run `leoflow db upgrade`"
    if state.revision not in known_revisions():
        return (f"database schema is at {state.revision}, newer than this build's head {head} and not "
                f"declared compatible with it; upgrade this replica")
    return f"database schema is at {state.revision}, head is {head}; run `leoflow db upgrade`"
