"""OpenAPI schemas of the webhook notifications and of the audit log of writes."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import (
    INT,
    STAMP,
    STR,
    TIME,
    nullable,
    obj,
    page,
    param,
)
from leoflow.model.states import NOTIFICATION_STATES

_NOTIFICATION = {
    "id": INT, "dag_id": STR, "run_id": STR, "task_id": nullable("string"), "try_number": nullable("integer"),
    "event": {"type": "string", "enum": ["failure", "success", "retry", "deadline"]},
    "target": {"type": "string", "enum": ["dag", "default"]},
    "state": {"type": "string", "enum": list(NOTIFICATION_STATES)}, "attempts": INT, "next_attempt_at": STAMP,
    "last_attempt_at": TIME, "last_status": nullable("integer"), "last_error": nullable("string"),
    "created_at": STAMP, "delivered_at": TIME, "give_up_at": STAMP, "payload": {"type": "object"},
    "url": nullable("string"),
}
_AUDIT = {
    "id": INT, "ts": STAMP, "actor": STR, "scope": STR, "method": STR, "route": STR, "path": STR,
    "status": INT, "remote_addr": nullable("string"), "forwarded_for": nullable("string"),
    "user_agent": nullable("string"), "dag_id": nullable("string"), "run_id": nullable("string"),
    "details": {"type": "object"},
    "count": {"type": "integer", "minimum": 1, "description": (
        "Writes this event stands for: 1, except for a token's refusals (403), counted in one event per "
        "route and hour (ts: the first, last_ts: the last).")},
    "last_ts": nullable("string", format="date-time", description="The last refusal a counted event holds."),
}

SCHEMAS: dict[str, Any] = {
    "Notification": obj(_NOTIFICATION),
    "NotificationPage": page("Notification"),
    "AuditEvent": obj(_AUDIT),
    "AuditPage": page("AuditEvent"),
}

NOTIFICATION_ID = {**param("notification_id", "path", {"type": "string"}, "Notification id"), "example": "1"}
