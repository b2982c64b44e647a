"""The OpenAPI schemas of approval gates and task waits (operations: :mod:`leoflow.api.routes.approvals`)."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import STR, TIME, nullable, obj
from leoflow.model import limits

SCHEMAS: dict[str, Any] = {
    "ApprovalRequest": obj({
        "decision": {"type": "string", "enum": ["approve", "reject"]},
        "comment": {"type": "string", "maxLength": limits.APPROVAL_COMMENT.maximum,
                    "description": "Stored with the decision and audited; a rejection's comment is the task's reason"},
    }, required=["decision"]),
    "Approval": obj({
        "dag_id": STR, "run_id": STR, "task_id": STR,
        "decision": {"type": "string", "enum": ["approve", "reject"]},
        "decided_by": STR, "comment": STR,
    }),
    "TaskWait": obj({
        "kind": {"type": "string", "enum": ["dag", "dataset", "time", "approval", "past"]},
        "state": {"type": "string", "enum": ["waiting", "met", "failed", "closed"]},
        "reason": {"type": "string", "description": "What it waits for, in words"},
        "target": STR, "logical_date": TIME, "not_before": TIME, "timeout_at": TIME,
        "message": nullable("string"), "decision": nullable("string"), "decided_by": nullable("string"),
        "comment": nullable("string"), "failure": nullable("string"),
    }, extra=True),
}
