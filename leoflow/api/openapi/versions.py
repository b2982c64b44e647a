"""OpenAPI schemas of a DAG's versions (every spec it was applied with)."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import (
    INT,
    STAMP,
    nullable,
    obj,
    page,
    param,
)
from leoflow.api.openapi.dags import ENV_VALUES_HIDDEN

_SPEC_HASH = nullable("string", description="SHA-256 of the version's canonical spec; null for read-scoped "
                      "tokens (beside a spec with hidden env values it would confirm guessed values).")
_VERSION = {"version": INT, "spec_hash": _SPEC_HASH, "created_at": STAMP, "current": {"type": "boolean"},
            "runs": INT}

SCHEMAS: dict[str, Any] = {
    "DagVersion": obj(_VERSION),
    "DagVersionDetail": obj({**_VERSION, "spec": {"type": "object"}, "env_values_hidden": ENV_VALUES_HIDDEN}),
    "DagVersionPage": page("DagVersion"),
}

VERSION = {**param("version", "path", {"type": "string"}, "Version number"), "example": "1"}
