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


def test_a_tasks_outputs_are_documented_readable_with_a_read_token() -> None:
    """ADR 0014: ``GET …/tasks/{task_id}/outputs`` and ``outputs`` in the task-instance document."""
    document = openapi_document()
    path = "/api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/outputs"
    [operation] = [o for o in OPERATIONS if o.path == path]
    assert (operation.method, operation.auth) == ("GET", "read")
    answer = document["paths"][path]["get"]
    assert answer["operationId"] == "get_task_outputs" and "404" in answer["responses"]
    assert answer["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/TaskOutputs"}
    schemas = document["components"]["schemas"]
    assert schemas["TaskOutputs"]["required"] == ["try_number", "state", "outputs"]
    assert schemas["TaskOutputs"]["properties"]["outputs"]["type"] == ["object", "null"]
    assert schemas["TaskDetail"]["properties"]["outputs"] == schemas["TaskOutputs"]["properties"]["outputs"]
    assert "outputs" in schemas["TaskDetail"]["required"]
