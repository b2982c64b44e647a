"""OpenAPI schemas of backfills (runs created for a past range of a DAG's schedule)."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import (
    INT,
    STAMP,
    STR,
    TIME,
    obj,
    page,
    param,
)

_BACKFILL = {
    "id": INT, "dag_id": STR, "start": STAMP, "end": STAMP, "max_active_runs": INT,
    "rerun_failed": {"type": "boolean"}, "state": {"type": "string", "enum": ["running", "completed", "cancelled"]},
    "next_logical_date": TIME, "slots_total": INT, "runs_created": INT, "runs_rerun": INT,
    "slots_skipped": INT, "created_by": STR, "created_at": STAMP, "updated_at": STAMP, "completed_at": TIME,
    "runs": {"type": "object", "additionalProperties": INT, "description": "The backfill's runs by state."},
}

SCHEMAS: dict[str, Any] = {
    "BackfillRequest": obj({
        "start": {"type": "string", "description": "ISO 8601 date or date-time (inclusive)"},
        "end": {"type": "string", "description": "ISO 8601 date or date-time (exclusive, not in the future)"},
        "max_active_runs": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
        "rerun_failed": {"type": "boolean", "default": False}}, required=["start", "end"]),
    "Backfill": obj(_BACKFILL),
    "BackfillPage": page("Backfill"),
}

BACKFILL_ID = {**param("backfill_id", "path", {"type": "string"}, "Backfill id"), "example": "1"}
