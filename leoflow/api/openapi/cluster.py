"""The OpenAPI description of the cluster routes: the leader, the nodes, the election's events."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import CURSOR, INT, LIMIT, STR, TIME, json_answer, nullable, obj, op, page, ref

SCHEMAS: dict[str, Any] = {
    "Leader": obj({"node_id": STR, "term": INT, "since": TIME, "api_url": nullable("string")}),
    "Node": obj({"node_id": STR, "api_url": nullable("string"), "version": nullable("string"),
                 "started_at": TIME, "last_seen": TIME, "is_leader": {"type": "boolean"}, "state": STR},
                extra=True),
    "NodeList": obj({"items": {"type": "array", "items": ref("Node")}}),
    "Event": obj({"id": INT, "ts": TIME, "kind": STR, "node_id": nullable("string"),
                  "term": nullable("integer"), "details": {"type": "object"}}, extra=True),
    "EventPage": page("Event"),
}


def operations() -> dict[str, dict[str, Any]]:
    return {
        "/api/v2/cluster/leader": {"get": op("Current leader", json_answer("200", "Leader"))},
        "/api/v2/cluster/nodes": {"get": op("Cluster nodes", json_answer("200", "NodeList"))},
        "/api/v2/cluster/events": {"get": op("Cluster events", json_answer("200", "EventPage"), errors="400",
                                             params=[LIMIT, CURSOR])},
    }
