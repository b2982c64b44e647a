"""``leoflow cluster leader|nodes|events``: which replica leads, every replica, and the cluster's history."""

from __future__ import annotations

import argparse
import json
from itertools import islice
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import emitted, short, table
from leoflow.cli.verbs import check_limit, connect, noun, verb

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings


def register(sub: Any) -> None:
    cluster = noun(sub, "cluster", "the leader, the replicas and cluster events (via the HTTP API)")
    verb(cluster, "leader", "which replica leads, under which term", cluster_leader, "GET /api/v2/cluster/leader")
    verb(cluster, "nodes", "every replica's heartbeat and version", cluster_nodes, "GET /api/v2/cluster/nodes")
    events = verb(cluster, "events", "leadership changes and other cluster events, newest first", cluster_events,
                  "GET /api/v2/cluster/events")
    events.add_argument("--limit", type=int, default=50, help="most events to show (default 50)")


def cluster_leader(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        leader = api.current_leader()
    if not emitted(args, leader):
        print(f"leader:   {leader['node_id']} (term {leader['term']}, since {short(leader['since'])})")
        if leader.get("api_url"):
            print(f"api:      {leader['api_url']}")
    return 0


def cluster_nodes(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        nodes = api.cluster_nodes().items
    if not emitted(args, nodes):
        table([[n["node_id"], n["state"], "yes" if n["is_leader"] else "", n["version"] or "-", short(n["last_seen"]),
                n["api_url"] or "-"] for n in nodes], ["NODE", "STATE", "LEADER", "VERSION", "LAST SEEN", "API"])
    return 0


def cluster_events(args: argparse.Namespace, client: ClientSettings) -> int:
    limit = check_limit(args.limit)
    with connect(client) as api:
        events = list(islice(api.iter_cluster_events(page_size=min(500, limit)), limit))
    if not emitted(args, events):
        table([[short(e["ts"]), e["kind"], e["node_id"] or "-", "-" if e["term"] is None else str(e["term"]),
                json.dumps(e["details"]) if e["details"] else ""] for e in events],
              ["TIME", "EVENT", "NODE", "TERM", "DETAILS"])
    return 0
