"""The OpenAPI description of the day-2 routes: versions, backfills, notifications, audit.

Kept apart from :mod:`leoflow.api.openapi` (which merges these in) so each file stays one
screenful of routes; the same helpers, the same rules, the same test keeps them equal to the
route table.
"""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi import (
    CURSOR,
    DAG_ID,
    ENV_VALUES_HIDDEN,
    LIMIT,
    _json,
    _nullable,
    _obj,
    _op,
    _page,
    _param,
    _state,
)
from leoflow.model.states import NOTIFICATION_STATES

_TIME = _nullable("string", format="date-time")
_STAMP = {"type": "string", "format": "date-time"}
_STR = {"type": "string"}
_INT = {"type": "integer"}

_SPEC_HASH = _nullable("string", description="SHA-256 of the version's canonical spec; null for read-scoped "
                       "tokens (beside a spec with hidden env values it would confirm guessed values).")
_VERSION = {"version": _INT, "spec_hash": _SPEC_HASH, "created_at": _STAMP, "current": {"type": "boolean"},
            "runs": _INT}
_BACKFILL = {
    "id": _INT, "dag_id": _STR, "start": _STAMP, "end": _STAMP, "max_active_runs": _INT,
    "rerun_failed": {"type": "boolean"}, "state": {"type": "string", "enum": ["running", "completed", "cancelled"]},
    "next_logical_date": _TIME, "slots_total": _INT, "runs_created": _INT, "runs_rerun": _INT,
    "slots_skipped": _INT, "created_by": _STR, "created_at": _STAMP, "updated_at": _STAMP, "completed_at": _TIME,
    "runs": {"type": "object", "additionalProperties": _INT, "description": "The backfill's runs by state."},
}
_NOTIFICATION = {
    "id": _INT, "dag_id": _STR, "run_id": _STR, "task_id": _nullable("string"), "try_number": _nullable("integer"),
    "event": {"type": "string", "enum": ["failure", "success", "retry", "deadline"]},
    "target": {"type": "string", "enum": ["dag", "default"]},
    "state": {"type": "string", "enum": list(NOTIFICATION_STATES)}, "attempts": _INT, "next_attempt_at": _STAMP,
    "last_attempt_at": _TIME, "last_status": _nullable("integer"), "last_error": _nullable("string"),
    "created_at": _STAMP, "delivered_at": _TIME, "give_up_at": _STAMP, "payload": {"type": "object"},
    "url": _nullable("string"),
}
_AUDIT = {
    "id": _INT, "ts": _STAMP, "actor": _STR, "scope": _STR, "method": _STR, "route": _STR, "path": _STR,
    "status": _INT, "remote_addr": _nullable("string"), "forwarded_for": _nullable("string"),
    "user_agent": _nullable("string"), "dag_id": _nullable("string"), "run_id": _nullable("string"),
    "details": {"type": "object"},
    "count": {"type": "integer", "minimum": 1, "description": (
        "Writes this event stands for: 1, except for a token's refusals (403), counted in one event per "
        "route and hour (ts: the first, last_ts: the last).")},
    "last_ts": _nullable("string", format="date-time", description="The last refusal a counted event holds."),
}

SCHEMAS: dict[str, Any] = {
    "DagVersion": _obj(_VERSION),
    "DagVersionDetail": _obj({**_VERSION, "spec": {"type": "object"}, "env_values_hidden": ENV_VALUES_HIDDEN}),
    "DagVersionPage": _page("DagVersion"),
    "BackfillRequest": _obj({
        "start": {"type": "string", "description": "ISO 8601 date or date-time (inclusive)"},
        "end": {"type": "string", "description": "ISO 8601 date or date-time (exclusive, not in the future)"},
        "max_active_runs": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
        "rerun_failed": {"type": "boolean", "default": False}}, required=["start", "end"]),
    "Backfill": _obj(_BACKFILL),
    "BackfillPage": _page("Backfill"),
    "Notification": _obj(_NOTIFICATION),
    "NotificationPage": _page("Notification"),
    "AuditEvent": _obj(_AUDIT),
    "AuditPage": _page("AuditEvent"),
}

VERSION = {**_param("version", "path", {"type": "string"}, "Version number"), "example": "1"}
BACKFILL_ID = {**_param("backfill_id", "path", {"type": "string"}, "Backfill id"), "example": "1"}
NOTIFICATION_ID = {**_param("notification_id", "path", {"type": "string"}, "Notification id"), "example": "1"}


def operations() -> dict[str, dict[str, Any]]:
    dag = "/api/v2/dags/{dag_id}"
    backfill = dag + "/backfills/{backfill_id}"
    return {
        dag + "/versions": {"get": _op("List DAG versions", _json("200", "DagVersionPage"), errors="400 404",
                                       params=[DAG_ID, LIMIT, CURSOR])},
        dag + "/versions/{version}": {"get": _op("Get DAG version", _json("200", "DagVersionDetail"), errors="404",
                                                 params=[DAG_ID, VERSION])},
        dag + "/backfill": {"post": _op("Start backfill", _json("201", "Backfill", "Created"), body="BackfillRequest",
                                        auth="admin", errors="404 409", params=[DAG_ID])},
        dag + "/backfills": {"get": _op("List backfills", _json("200", "BackfillPage"), errors="400 404",
                                        params=[DAG_ID, LIMIT, CURSOR])},
        backfill: {"get": _op("Get backfill", _json("200", "Backfill"), errors="404", params=[DAG_ID, BACKFILL_ID])},
        backfill + "/cancel": {"post": _op("Cancel backfill", _json("200", "Backfill"), auth="admin",
                                           errors="404 409", params=[DAG_ID, BACKFILL_ID])},
        "/api/v2/notifications": {"get": _op(
            "List notifications", _json("200", "NotificationPage"), errors="400",
            params=[LIMIT, CURSOR, _state(NOTIFICATION_STATES), _param("dag_id", "query", _STR, "Only this DAG's"),
                    _param("run_id", "query", _STR, "Only this run's (with dag_id)")])},
        "/api/v2/notifications/{notification_id}/retry": {"post": _op(
            "Retry notification", _json("200", "Notification"), auth="admin", errors="404 409",
            params=[NOTIFICATION_ID])},
        "/api/v2/audit": {"get": _op(
            "List audit events", _json("200", "AuditPage"), errors="400", auth="admin",
            params=[LIMIT, CURSOR, _param("actor", "query", _STR, "Only this token name's writes"),
                    _param("dag_id", "query", _STR, "Only writes to this DAG")])},
    }
