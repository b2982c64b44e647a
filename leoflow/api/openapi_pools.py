"""The OpenAPI description of the pool routes (:mod:`leoflow.api.routes_pools`).

Merged into the document by :mod:`leoflow.api.openapi`; the same test keeps it equal to the
route table.
"""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi import _json, _name, _nullable, _obj, _op, _param, _range
from leoflow.model import limits

_INT = {"type": "integer"}
_NAME = _name(limits.POOL_NAME)
_SLOTS = {**_range(limits.POOL_SLOTS),
          "description": "Task instances of the pool queued or running at once (0 holds them back)"}
_DESCRIPTION = {**_nullable("string"), "maxLength": limits.POOL_DESCRIPTION.maximum}

SCHEMAS: dict[str, Any] = {
    "Pool": _obj({
        "name": _NAME, "slots": _INT, "description": _nullable("string"),
        "builtin": {"type": "boolean", "description": "The default pool (its slots are LEOFLOW_PARALLELISM)"},
        "missing": {"type": "boolean", "description": "Tasks name this pool but it does not exist: they wait"},
        "occupied_slots": _INT, "queued_slots": _INT, "running_slots": _INT,
        "open_slots": {"type": "integer", "description": "slots - occupied_slots, at least 0"},
        "waiting_tasks": {"type": "integer", "description": "Ready tasks waiting for a slot (counted up to "
                          "100,000)"},
        "created_at": _nullable("string", format="date-time"), "updated_at": _nullable("string", format="date-time"),
    }),
    "PoolList": _obj({"items": {"type": "array", "items": {"$ref": "#/components/schemas/Pool"}}}),
    "PoolCreate": _obj({"name": _NAME, "slots": _SLOTS, "description": _DESCRIPTION}, required=["name", "slots"]),
    "PoolPatch": _obj({"slots": _SLOTS, "description": _DESCRIPTION}, required=[]),
}

POOL = {**_param("pool", "path", {"type": "string"}, "Pool name"), "example": "gpu"}


def operations() -> dict[str, dict[str, Any]]:
    return {
        "/api/v2/pools": {
            "get": _op("List pools", _json("200", "PoolList")),
            "post": _op("Create pool", _json("201", "Pool", "Created"), body="PoolCreate", auth="admin",
                        errors="409"),
        },
        "/api/v2/pools/{pool}": {
            "get": _op("Get pool", _json("200", "Pool"), errors="404", params=[POOL]),
            "patch": _op("Resize pool", _json("200", "Pool"), body="PoolPatch", auth="admin", errors="404 409",
                         params=[POOL]),
            "delete": _op("Delete pool", {"204": {"description": "Deleted"}}, auth="admin", errors="404 409",
                          params=[POOL]),
        },
    }
