"""The OpenAPI description of the probes, ``/metrics`` and the document itself."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import JSON, STR, TEXT, json_answer, obj, op

SCHEMAS: dict[str, Any] = {
    "Health": obj({"status": STR}),
    "Ready": obj({"status": STR, "schema": STR, "pooler": {"type": "boolean"}}),
}


def operations() -> dict[str, dict[str, Any]]:
    return {
        "/healthz": {"get": op("Liveness", json_answer("200", "Health"), auth="open")},
        "/readyz": {"get": op("Readiness", json_answer("200", "Ready"), auth="open", errors="503")},
        "/metrics": {"get": op("Prometheus metrics", {"200": {"description": "Text exposition", **TEXT}},
                               auth="metrics", errors="401")},
        "/api/v2/openapi.json": {"get": op("OpenAPI document", {"200": {
            "description": "This document", "content": {JSON: {"schema": {"type": "object"}}}}}, auth="open")},
    }
