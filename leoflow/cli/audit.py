"""``leoflow audit list``: who changed what, when, from where (an admin token reads it)."""

from __future__ import annotations

import argparse
from itertools import islice
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import emitted, short, table
from leoflow.cli.verbs import check_limit, connect, noun, verb

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings


def register(sub: Any) -> None:
    audit = noun(sub, "audit", "who changed what, when, from where (admin token; via the HTTP API)")
    alist = verb(audit, "list", "list API writes, newest first", audit_list, "GET /api/v2/audit")
    alist.add_argument("--actor", help="only this token name's writes")
    alist.add_argument("--dag", dest="dag_id", help="only writes to this DAG")
    alist.add_argument("--limit", type=int, default=50, help="most to show (default 50)")


def _status_times(event: Any) -> str:
    """``403 x1000`` for a token's counted refusals (one event per route and hour), else the status."""
    count = int(event.get("count", 1))
    return f"{event['status']} x{count}" if count > 1 else str(event["status"])


def audit_list(args: argparse.Namespace, client: ClientSettings) -> int:
    limit = check_limit(args.limit)
    with connect(client) as api:
        items = list(islice(api.iter_audit_events(actor=args.actor or None, dag_id=args.dag_id or None,
                                                  page_size=min(500, limit)), limit))
    if not emitted(args, items):
        table([[short(e["ts"]), e["actor"], e["method"], e["path"], _status_times(e), e["remote_addr"] or "-"]
               for e in items], ["TIME", "WHO", "METHOD", "PATH", "STATUS", "FROM"])
    return 0
