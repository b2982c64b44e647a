"""The OpenAPI description of a DAG's versions (every spec it was applied with)."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import (
    CURSOR,
    DAG_ID,
    INT,
    LIMIT,
    STAMP,
    json_answer,
    nullable,
    obj,
    op,
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


def operations() -> dict[str, dict[str, Any]]:
    dag = "/api/v2/dags/{dag_id}"
    return {
        dag + "/versions": {"get": op("List DAG versions", json_answer("200", "DagVersionPage"), errors="400 404",
                                      params=[DAG_ID, LIMIT, CURSOR])},
        dag + "/versions/{version}": {"get": op("Get DAG version", json_answer("200", "DagVersionDetail"),
                                                errors="404", params=[DAG_ID, VERSION])},
    }
