"""The OpenAPI 3.1 document of the HTTP API, assembled from the operations' declarations.

Each operation's method, path, auth and description are declared once, beside its handler
(:mod:`leoflow.api.routes`); the named schemas come from one module per resource here. A
schemathesis run against a live server checks every answer against this document (status
codes, content types, bodies).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from leoflow import __version__
from leoflow.api.openapi import (
    approvals,
    artifacts,
    audit,
    backfills,
    cluster,
    components,
    dags,
    datasets,
    notifications,
    pools,
    runs,
    system,
    templates,
    tokens,
    versions,
)
from leoflow.api.routes.table import OPERATIONS

#: The resources in the order the document lists their schemas.
_SCHEMAS_ORDER = (components, dags, runs, cluster, system, versions, backfills, notifications, audit, pools,
                  tokens, templates, datasets, approvals, artifacts)


def schemas() -> dict[str, Any]:
    """Every named schema of the document (``components.schemas``)."""
    return {name: schema for module in _SCHEMAS_ORDER for name, schema in module.SCHEMAS.items()}


def paths() -> dict[str, dict[str, Any]]:
    """``{path: {method: operation}}`` for every declared operation."""
    found: dict[str, dict[str, Any]] = {}
    for operation in OPERATIONS:
        found.setdefault(operation.path, {})[operation.method.lower()] = operation.document
    return found


@cache
def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Leoflow API", "version": __version__,
                 "description": "The stateless HTTP API served by every Leoflow replica."},
        "paths": paths(),
        "components": {"schemas": schemas(), "responses": components.RESPONSES,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
