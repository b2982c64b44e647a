"""``leoflow db upgrade|downgrade|current``: schema migrations."""

from __future__ import annotations

import argparse
from typing import Any

from leoflow.db import migrations
from leoflow.settings import Settings


def register(sub: Any) -> None:
    db = sub.add_parser("db", help="manage the database schema")
    verbs = db.add_subparsers(dest="db_command", metavar="VERB", parser_class=type(db))
    verbs.required = True

    up = verbs.add_parser("upgrade", help="migrate the schema to the newest revision (idempotent)")
    up.add_argument("revision", nargs="?", default="head", help="target revision (default: head)")
    up.set_defaults(handler=upgrade, configure_logging=False)

    down = verbs.add_parser("downgrade", help="migrate the schema back to REVISION ('base' drops everything)")
    down.add_argument("revision", help="target revision, e.g. base or 0001")
    down.set_defaults(handler=downgrade, configure_logging=False)

    cur = verbs.add_parser("current", help="print the schema revision the database is at")
    cur.set_defaults(handler=current, configure_logging=False)


def upgrade(args: argparse.Namespace, settings: Settings) -> int:
    url = settings.require_database_url()
    migrations.upgrade(url, args.revision)
    print(f"schema at {_current(settings) or 'base'} (head {migrations.head_revision()})")
    return 0


def downgrade(args: argparse.Namespace, settings: Settings) -> int:
    url = settings.require_database_url()
    migrations.downgrade(url, args.revision)
    print(f"schema at {_current(settings) or 'base'}")
    return 0


def _current(settings: Settings) -> str | None:
    return migrations.current_revision(settings.require_database_url())


def current(args: argparse.Namespace, settings: Settings) -> int:
    settings.require_database_url()
    revision = _current(settings)
    head = migrations.head_revision()
    state = "at head" if revision == head else f"head is {head}"
    print(f"{revision or 'base'} ({state})")
    return 0
