"""``leoflow datasets event|list``: record an outside dataset event, list datasets (via the HTTP API).

``event URI [--extra JSON]`` is what an upstream team's loader (or a webhook relay) runs when the
data it owns has landed: every DAG whose ``schedule: {datasets: …}`` names the URI gets the event
queued, and the leader starts their runs. ``list`` shows each URI's producers, consumers, last event
and the events queued per consumer (``no producer`` marks a URI only outside events feed).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import emitted, short, table
from leoflow.cli.verbs import noun, verb
from leoflow.client.api import Api

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings

EVENTS = "/api/v2/datasets/events"


def register(sub: Any) -> None:
    datasets = noun(sub, "datasets", "dataset events and the DAGs they start: record an event, list (via the HTTP API)")
    event = verb(datasets, "event", "record an event of a dataset URI (queued for every DAG waiting on it)",
                 datasets_event, f"POST {EVENTS}")
    event.add_argument("uri", metavar="URI")
    event.add_argument("--extra", type=_extra, default=None, help="a JSON object stored with the event")
    listing = verb(datasets, "list", "datasets with producers, consumers, last event and queued events",
                   datasets_list, "GET /api/v2/datasets")
    listing.add_argument("--uri", help="only this URI (also one known from its events alone)")


def _extra(value: str) -> dict[str, Any]:
    try:
        extra = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise argparse.ArgumentTypeError(f"--extra must be a JSON object ({str(exc)[:120]})") from None
    if not isinstance(extra, dict):
        raise argparse.ArgumentTypeError("--extra must be a JSON object, e.g. '{\"rows\": 1200}'")
    return extra


def datasets_event(args: argparse.Namespace, client: ClientSettings) -> int:
    body: dict[str, Any] = {"uri": args.uri}
    if args.extra is not None:
        body["extra"] = args.extra
    with Api(client) as api:
        recorded = api.request("POST", EVENTS, ok=(201,), json=body).json()
    if not emitted(args, recorded):
        print(f"event of {recorded['uri']} recorded, queued for {recorded['queued_for']} DAG(s)")
    return 0


def datasets_list(args: argparse.Namespace, client: ClientSettings) -> int:
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 500}
    if args.uri:
        params["uri"] = args.uri
    with Api(client) as api:
        while True:
            found = api.json("GET", "/api/v2/datasets", params=params)
            items += found["items"]
            if not found.get("next_cursor"):
                break
            params["cursor"] = found["next_cursor"]
    if emitted(args, items):
        return 0
    table([[d["uri"], ", ".join(f"{p['dag_id']}.{p['task_id']}" for p in d["producers"]) or "no producer",
            ", ".join(d["consumers"]) or "-",
            short(d["last_event"]["created_at"]) if d["last_event"] else "-",
            ", ".join(f"{q['dag_id']}:{q['events']}" for q in d["queued"]) or "-"]
           for d in items], ["URI", "PRODUCERS", "CONSUMERS", "LAST EVENT", "QUEUED"])
    return 0
