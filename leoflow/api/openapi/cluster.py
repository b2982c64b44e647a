"""OpenAPI schemas of the cluster routes: the leader, the nodes, the election's events."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import INT, STR, TIME, nullable, obj, page, ref

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
