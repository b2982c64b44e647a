"""``leoflow cluster|notifications|audit|api ...``: what an operator asks a running install."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from leoflow.cli.api import Api, emitted_json, group, print_json, short, table, usage, verb

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings


def register(sub: Any) -> None:
    cluster = group(sub, "cluster", "the leader, the replicas and cluster events (via the HTTP API)")
    verb(cluster, "leader", "which replica leads, under which term", cluster_leader, "GET /api/v2/cluster/leader",
         read=True)
    verb(cluster, "nodes", "every replica's heartbeat and version", cluster_nodes, "GET /api/v2/cluster/nodes",
         read=True)
    events = verb(cluster, "events", "leadership changes and other cluster events, newest first", cluster_events,
                  "GET /api/v2/cluster/events", read=True)
    events.add_argument("--limit", type=int, default=50, help="most events to show (default 50)")

    notes = group(sub, "notifications", "webhook deliveries and their state (via the HTTP API)")
    lst = verb(notes, "list", "list notifications, newest first", notifications_list, "GET /api/v2/notifications",
               read=True)
    lst.add_argument("--dag", dest="dag_id", help="only this DAG's")
    lst.add_argument("--run", dest="run_id", help="only this run's")
    lst.add_argument("--state", choices=("pending", "delivered", "failed"), help="only in this state")
    lst.add_argument("--limit", type=int, default=50, help="most to show (default 50)")
    retry = verb(notes, "retry", "send a pending or failed notification again now", notifications_retry,
                 "POST /api/v2/notifications/{notification_id}/retry")
    retry.add_argument("notification_id", metavar="ID", type=int)

    audit = group(sub, "audit", "who changed what, when, from where (admin token; via the HTTP API)")
    alist = verb(audit, "list", "list API writes, newest first", audit_list, "GET /api/v2/audit", read=True)
    alist.add_argument("--actor", help="only this token name's writes")
    alist.add_argument("--dag", dest="dag_id", help="only writes to this DAG")
    alist.add_argument("--limit", type=int, default=50, help="most to show (default 50)")

    api = group(sub, "api", "the API server itself: probes, metrics, its OpenAPI document")
    verb(api, "health", "liveness of the replica at LEOFLOW_URL (exit 1 if it does not answer)", api_get,
         "GET /healthz", read=True, path="/healthz")
    verb(api, "ready", "readiness: database reachable and schema current (exit 1 if not)", api_get,
         "GET /readyz", read=True, path="/readyz")
    verb(api, "metrics", "the replica's Prometheus metrics (text)", api_text, "GET /metrics", path="/metrics")
    verb(api, "openapi", "the OpenAPI document of this API (JSON)", api_openapi, "GET /api/v2/openapi.json")


def _limit(value: int) -> int:
    if value < 1:
        usage("--limit must be at least 1")
    return value


def cluster_leader(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        leader = api.json("GET", "/api/v2/cluster/leader")
    if not emitted_json(args, leader):
        print(f"leader:   {leader['node_id']} (term {leader['term']}, since {short(leader['since'])})")
        if leader.get("api_url"):
            print(f"api:      {leader['api_url']}")
    return 0


def cluster_nodes(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        nodes = api.json("GET", "/api/v2/cluster/nodes")["items"]
    if not emitted_json(args, nodes):
        table([[n["node_id"], n["state"], "yes" if n["is_leader"] else "", n["version"] or "-", short(n["last_seen"]),
                n["api_url"] or "-"] for n in nodes], ["NODE", "STATE", "LEADER", "VERSION", "LAST SEEN", "API"])
    return 0


def cluster_events(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        events = api.pages("/api/v2/cluster/events", limit=_limit(args.limit))
    if not emitted_json(args, events):
        table([[short(e["ts"]), e["kind"], e["node_id"] or "-", "-" if e["term"] is None else str(e["term"]),
                json.dumps(e["details"]) if e["details"] else ""] for e in events],
              ["TIME", "EVENT", "NODE", "TERM", "DETAILS"])
    return 0


def notifications_list(args: argparse.Namespace, client: ClientSettings) -> int:
    params = {"dag_id": args.dag_id, "run_id": args.run_id, "state": args.state}
    with Api(client) as api:
        items = api.pages("/api/v2/notifications", {k: v for k, v in params.items() if v}, limit=_limit(args.limit))
    if not emitted_json(args, items):
        table([[str(n["id"]), short(n["created_at"]), n["event"], f"{n['dag_id']}/{n['run_id']}", n["target"],
                n["state"], str(n["attempts"]), n["last_error"] or ""] for n in items],
              ["ID", "CREATED", "EVENT", "RUN", "TO", "STATE", "TRIES", "LAST ERROR"])
    return 0


def notifications_retry(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        n = api.json("POST", f"/api/v2/notifications/{args.notification_id}/retry")
    print(f"notification {n['id']}: {n['state']}, next attempt {short(n['next_attempt_at'])}")
    return 0


def _status_times(event: dict[str, Any]) -> str:
    """``403 x1000`` for a token's counted refusals (one event per route and hour), else the status."""
    count = int(event.get("count", 1))
    return f"{event['status']} x{count}" if count > 1 else str(event["status"])


def audit_list(args: argparse.Namespace, client: ClientSettings) -> int:
    params = {"actor": args.actor, "dag_id": args.dag_id}
    with Api(client) as api:
        items = api.pages("/api/v2/audit", {k: v for k, v in params.items() if v}, limit=_limit(args.limit))
    if not emitted_json(args, items):
        table([[short(e["ts"]), e["actor"], e["method"], e["path"], _status_times(e), e["remote_addr"] or "-"]
               for e in items], ["TIME", "WHO", "METHOD", "PATH", "STATUS", "FROM"])
    return 0


def api_get(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        answer = api.request("GET", args.path, ok=(200, 503))
    body = answer.json()
    if not emitted_json(args, body):
        status = body.get("status") or body.get("error", {}).get("message", "")
        print(f"{args.path.strip('/')}: {status}")
    return 0 if answer.status_code == 200 else 1


def api_text(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        sys.stdout.write(api.request("GET", args.path).text)
    return 0


def api_openapi(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        print_json(api.json("GET", "/api/v2/openapi.json"))
    return 0
