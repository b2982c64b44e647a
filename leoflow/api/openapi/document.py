"""The OpenAPI 3.1 document of the HTTP API, assembled from one module per resource.

Written by hand (the routes are plain Starlette functions) and kept honest by tests: one
proves the documented operations are exactly the app's routes, and a schemathesis run against
a live server checks every answer against this document (status codes, content types, bodies).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from leoflow import __version__
from leoflow.api.openapi import backfills, cluster, components, dags, notifications, pools, runs, system, versions

#: The resources in the order the document lists their paths.
_PATHS_ORDER = (system, cluster, dags, runs, versions, backfills, notifications, pools)
#: The resources in the order the document lists their schemas.
_SCHEMAS_ORDER = (components, dags, runs, cluster, system, versions, backfills, notifications, pools)


def schemas() -> dict[str, Any]:
    """Every named schema of the document (``components.schemas``)."""
    return {name: schema for module in _SCHEMAS_ORDER for name, schema in module.SCHEMAS.items()}


@cache
def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Leoflow API", "version": __version__,
                 "description": "The stateless HTTP API served by every Leoflow replica."},
        "paths": {path: ops for module in _PATHS_ORDER for path, ops in module.operations().items()},
        "components": {"schemas": schemas(), "responses": components.RESPONSES,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
