"""OpenAPI schemas of the audit log of writes."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import INT, STAMP, STR, nullable, obj, page

_AUDIT = {
    "id": INT, "ts": STAMP, "actor": STR, "scope": STR, "method": STR, "route": STR, "path": STR,
    "status": INT, "remote_addr": nullable("string"), "forwarded_for": nullable("string"),
    "user_agent": nullable("string"), "dag_id": nullable("string"), "run_id": nullable("string"),
    "details": {"type": "object"},
    "count": {"type": "integer", "minimum": 1, "description": (
        "Writes this event stands for: 1, except for a token's refusals (403), counted in one event per "
        "route and hour (ts: the first, last_ts: the last).")},
    "last_ts": nullable("string", format="date-time", description="The last refusal a counted event holds."),
    "actor_kind": nullable("string", description="How the writer proved who it is: static, token, oidc or "
                           "anonymous (null: written before this was recorded)"),
    "actor_subject": nullable("string", description="A stable id of the writer: a token's id, an OpenID Connect "
                              "subject, a static token's name"),
    "team": nullable("string", description="The team the write concerned, when it concerned one"),
}

SCHEMAS: dict[str, Any] = {
    "AuditEvent": obj(_AUDIT),
    "AuditPage": page("AuditEvent"),
}
