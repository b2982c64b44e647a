"""OpenAPI schemas of the probes, ``/metrics`` and the document itself."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import STR, obj

SCHEMAS: dict[str, Any] = {
    "Health": obj({"status": STR}),
    "Ready": obj({"status": STR, "schema": STR, "pooler": {"type": "boolean"}}),
}
