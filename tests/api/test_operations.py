"""Each API operation is declared once (:mod:`leoflow.api.operations`), and the routing table and
the OpenAPI document are both read from those declarations."""

from __future__ import annotations

from leoflow.api.app import api_routes
from leoflow.api.openapi.document import openapi_document
from leoflow.api.routes.table import OPERATIONS
from tests.api.conftest import api_settings


def test_every_method_and_path_is_declared_once_with_its_own_operation_id() -> None:
    routes = [(operation.method, operation.path) for operation in OPERATIONS]
    assert len(routes) == len(set(routes))
    ids = [operation.document["operationId"] for operation in OPERATIONS]
    assert len(ids) == len(set(ids))
    assert len({operation.handler for operation in OPERATIONS}) == len(OPERATIONS)


def test_the_routing_table_and_the_document_come_from_the_declarations() -> None:
    served = [(route.method, route.path, route.handler) for route in api_routes(api_settings("postgresql://h/db"))]
    assert served == [(operation.method, operation.path, operation.handler) for operation in OPERATIONS]
    paths = openapi_document()["paths"]
    for operation in OPERATIONS:
        documented = paths[operation.path][operation.method.lower()]
        assert documented is operation.document
        # The declared auth is the documented one: open routes need no token, the rest a bearer.
        if operation.auth == "open":
            assert documented["security"] == []
        elif operation.auth != "metrics":
            assert "security" not in documented and "401" in documented["responses"]
            assert ("403" in documented["responses"]) == (operation.auth == "admin")
