"""The OpenAPI schemas of the task pools (operations: :mod:`leoflow.api.routes.pools`)."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import INT, name, nullable, number_range, obj, param, ref
from leoflow.model import limits

_NAME = name(limits.POOL_NAME)
_SLOTS = {**number_range(limits.POOL_SLOTS),
          "description": "Task instances of the pool queued or running at once (0 holds them back)"}
_DESCRIPTION = {**nullable("string"), "maxLength": limits.POOL_DESCRIPTION.maximum}

SCHEMAS: dict[str, Any] = {
    "Pool": obj({
        "name": _NAME, "slots": INT, "description": nullable("string"),
        "builtin": {"type": "boolean", "description": "The default pool (its slots are LEOFLOW_PARALLELISM)"},
        "missing": {"type": "boolean", "description": "Tasks name this pool but it does not exist: they wait"},
        "occupied_slots": INT, "queued_slots": INT, "running_slots": INT,
        "open_slots": {"type": "integer", "description": "slots - occupied_slots, at least 0"},
        "waiting_tasks": {"type": "integer", "description": "Ready tasks waiting for a slot (counted up to "
                          "100,000)"},
        "created_at": nullable("string", format="date-time"), "updated_at": nullable("string", format="date-time"),
    }),
    "PoolList": obj({"items": {"type": "array", "items": ref("Pool")}}),
    "PoolCreate": obj({"name": _NAME, "slots": _SLOTS, "description": _DESCRIPTION}, required=["name", "slots"]),
    "PoolPatch": obj({"slots": _SLOTS, "description": _DESCRIPTION}, required=[]),
}

POOL = {**param("pool", "path", {"type": "string"}, "Pool name"), "example": "gpu"}
