"""OpenAPI schemas of the webhook notifications."""

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
SCHEMAS: dict[str, Any] = {
    "Notification": obj(_NOTIFICATION),
    "NotificationPage": page("Notification"),
}

NOTIFICATION_ID = {**param("notification_id", "path", {"type": "string"}, "Notification id"), "example": "1"}
