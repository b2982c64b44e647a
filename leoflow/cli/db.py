"""``leoflow db upgrade|downgrade|current``: schema migrations; ``leoflow db purge``: one-off clean-ups.

``db purge --before DATE [--dry-run]`` deletes, in the same small batches as the leader's
retention (``LEOFLOW_RETENTION_DAYS``, :mod:`leoflow.housekeeping.retention`), the history that
ended before DATE: finished runs with their task instances, tries and logs, DAG versions
nothing refers to, deleted DAGs without runs. Runs with work still in flight are kept.

``downgrade`` to ``base`` (or ``-N`` reaching it) drops every Leoflow table — every DAG, run and
log — and a downgrade to any revision whose way down runs a ``downgrade()`` declared to lose data
(``drops_data_on_downgrade`` in each migration, :mod:`leoflow.db.migrations`) drops tables or
columns that hold data: both ask for ``yes`` on a terminal and require ``--yes`` otherwise
(scripts, CI, an init container), so neither happens by accident. ``upgrade`` prints the
revision the schema is at (exit 0 once applied) and ``current`` which cluster owns the database
(ADR 0010). Every verb takes ``-o/--output table|json|yaml``: a script reads the revision,
the owning cluster or the purge counts from one JSON or YAML document.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import add_output, emitted
from leoflow.cli.verbs import noun

if TYPE_CHECKING:
    from leoflow.db.stores.installation import Ownership
    from leoflow.db.stores.retention import PurgeCounts
    from leoflow.settings import Settings


def register(sub: Any) -> None:
    verbs = noun(sub, "db", "manage the database schema; purge old history")

    up = verbs.add_parser("upgrade", help="migrate the schema to the newest revision (idempotent)")
    up.add_argument("revision", nargs="?", default="head", help="target revision (default: head)")
    up.set_defaults(handler=upgrade, configure_logging=False)
    add_output(up)

    down = verbs.add_parser("downgrade", help="migrate the schema back to REVISION ('base' drops everything)")
    down.add_argument("revision", help="target revision, e.g. base or 0001")
    down.add_argument("--yes", action="store_true",
                      help="confirm a downgrade that drops tables or columns holding data (required off a "
                           "terminal)")
    down.set_defaults(handler=downgrade, configure_logging=False)
    add_output(down)

    cur = verbs.add_parser("current", help="print the schema revision the database is at, and its cluster")
    cur.set_defaults(handler=current, configure_logging=False)
    add_output(cur)

    prg = verbs.add_parser("purge", help="delete history that ended before DATE (finished runs with their "
                                         "task instances, tries and logs; unused DAG versions)")
    prg.add_argument("--before", required=True, type=cutoff_arg, metavar="DATE",
                     help="a date (2026-01-01, midnight UTC) or a time (2026-01-01T12:00:00+01:00; UTC when no "
                          "offset is given); not in the future")
    prg.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    prg.set_defaults(handler=purge_history, configure_logging=False)
    add_output(prg)


def upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from leoflow.db import migrations  # imported by the verb: client verbs never load alembic

    url = settings.require_database_url()
    migrations.upgrade(url, args.revision)
    revision, head = _current(settings), migrations.head_revision()
    if not emitted(args, {"revision": revision, "head": head}):
        print(f"schema at {revision or 'base'} (head {head})")
    return 0


def downgrade(args: argparse.Namespace, settings: Settings) -> int:
    from leoflow.db import migrations

    url = settings.require_database_url()
    if not args.yes and not _confirmed(_loss_warning(url, args.revision)):
        return 2
    migrations.downgrade(url, args.revision)
    revision = _current(settings)
    if not emitted(args, {"revision": revision, "head": migrations.head_revision()}):
        print(f"schema at {revision or 'base'}")
    return 0


def _loss_warning(url: str, revision: str) -> str | None:
    """What downgrading to ``revision`` would drop, in one line; None when it loses no data."""
    from leoflow.db import migrations
    from leoflow.logging_setup import redact_url

    if migrations.drops_everything(url, revision):
        return f"downgrading to base drops every Leoflow table in {redact_url(url)} (all DAGs, runs and logs)"
    losing = migrations.data_dropping_downgrades(url, revision)
    if not losing:
        return None
    return (f"downgrading to {revision} drops tables or columns holding data in {redact_url(url)} "
            f"(the downgrades of revisions {', '.join(losing)})")


def _confirmed(warning: str | None) -> bool:
    """Ask on a terminal; off a terminal, say that ``--yes`` is needed (nothing to confirm: True)."""
    if warning is None:
        return True
    if not sys.stdin.isatty():
        print(f"leoflow: error: {warning}; pass --yes to confirm", file=sys.stderr)
        return False
    try:
        answer = input(f"{warning}. Type 'yes' to continue: ")
    except EOFError:
        answer = ""
    if answer.strip().lower() != "yes":
        print("leoflow: nothing changed", file=sys.stderr)
        return False
    return True


def _current(settings: Settings) -> str | None:
    from leoflow.db import migrations

    return migrations.current_revision(settings.require_database_url())


def current(args: argparse.Namespace, settings: Settings) -> int:
    from leoflow.db import migrations

    url = settings.require_database_url()
    revision = _current(settings)
    head = migrations.head_revision()
    owner = _owner(url)
    document = {"revision": revision, "head": head, "at_head": revision == head,
                "owner": None if owner is None else {"cluster": owner.cluster, "claimed_by": owner.claimed_by,
                                                     "claimed_at": owner.claimed_at.isoformat()}}
    if not emitted(args, document):
        state = "at head" if revision == head else f"head is {head}"
        print(f"{revision or 'base'} ({state}); {_owner_text(revision, owner)}")
    return 0


def _owner(url: str) -> Ownership | None:
    from leoflow.db.stores import installation
    from leoflow.errors import DatabaseError

    try:
        return installation.owner_of(url)
    except DatabaseError:  # no schema yet (or not this far): nothing owns it
        return None


def _owner_text(revision: str | None, owner: Ownership | None) -> str:
    if owner is None:
        return ("not claimed by any cluster" if revision is None
                else "not claimed by any cluster yet (the first replica to start claims it)")
    return f"cluster {owner.cluster} (claimed {owner.claimed_at:%Y-%m-%d %H:%M} UTC by {owner.claimed_by})"


def cutoff_arg(value: str) -> datetime:
    """``--before``: an ISO date or date-time, as an aware UTC datetime, not in the future."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--before must be an ISO date or time like 2026-01-01, got {value!r}") \
            from None
    cutoff = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    if cutoff > datetime.now(UTC):
        raise argparse.ArgumentTypeError("--before must not be in the future")
    return cutoff.astimezone(UTC)


async def _purge(settings: Settings, cutoff: datetime, dry_run: bool) -> PurgeCounts:
    # Imported by the verb: parsing any command line (client verbs too) loads no database code.
    from leoflow.db.connection.database import Database
    from leoflow.housekeeping.retention import deletes_archived_logs, policy_for, purge

    db = Database.with_pool(settings.database, application_name="leoflow-purge", pool_size=1)
    try:
        policy = policy_for(cutoff, settings.executor.kind, delete_archived_logs=deletes_archived_logs(settings))
        return await purge(db, policy, dry_run=dry_run)
    finally:
        await db.dispose()


def purge_history(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio  # tens of milliseconds: loaded by the verb, not by every command line

    from leoflow.housekeeping.retention import CutoffInFuture

    settings.require_database_url()
    try:
        counts = asyncio.run(_purge(settings, args.before, args.dry_run))
    except CutoffInFuture as exc:  # this host's clock is ahead of the database's
        print(f"leoflow: error: --before must not be in the future ({exc})", file=sys.stderr)
        return 2
    per_table = {table: n for table, n in counts.items()}
    if emitted(args, {"before": args.before.isoformat(), "dry_run": args.dry_run, "rows": per_table}):
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} the history that ended before {args.before.isoformat()}:")
    for table, rows in counts.items():
        print(f"  {table:<15} {rows}")
    return 0
