"""``leoflow notifications list|retry``: webhook deliveries, their state, and sending one again."""

from __future__ import annotations

import argparse
from itertools import islice
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import emitted, short, table
from leoflow.cli.verbs import check_limit, connect, noun, verb

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings


def register(sub: Any) -> None:
    notes = noun(sub, "notifications", "webhook deliveries and their state (via the HTTP API)")
    lst = verb(notes, "list", "list notifications, newest first", notifications_list, "GET /api/v2/notifications")
    lst.add_argument("--dag", dest="dag_id", help="only this DAG's")
    lst.add_argument("--run", dest="run_id", help="only this run's")
    lst.add_argument("--state", choices=("pending", "delivered", "failed"), help="only in this state")
    lst.add_argument("--limit", type=int, default=50, help="most to show (default 50)")
    retry = verb(notes, "retry", "send a pending or failed notification again now", notifications_retry,
                 "POST /api/v2/notifications/{notification_id}/retry")
    retry.add_argument("notification_id", metavar="ID", type=int)


def notifications_list(args: argparse.Namespace, client: ClientSettings) -> int:
    limit = check_limit(args.limit)
    with connect(client) as api:
        items = list(islice(api.iter_notifications(dag_id=args.dag_id or None, run_id=args.run_id or None,
                                                   state=args.state or None, page_size=min(500, limit)), limit))
    if not emitted(args, items):
        table([[str(n["id"]), short(n["created_at"]), n["event"], f"{n['dag_id']}/{n['run_id']}", n["target"],
                n["state"], str(n["attempts"]), n["last_error"] or ""] for n in items],
              ["ID", "CREATED", "EVENT", "RUN", "TO", "STATE", "TRIES", "LAST ERROR"])
    return 0


def notifications_retry(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        n = api.retry_notification(args.notification_id)
    if not emitted(args, n):
        print(f"notification {n['id']}: {n['state']}, next attempt {short(n['next_attempt_at'])}")
    return 0
