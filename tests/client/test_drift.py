"""The typed client cannot drift from the API: its generated modules are what the OpenAPI document renders to.

Three views of one promise. The checked-in :mod:`leoflow.client.models` and
:mod:`leoflow.client.operations` equal what :mod:`leoflow.client.codegen` renders from the
document in the code, and from the document a live server serves; and, read independently of
the rendering, every operation has a method on both clients taking each of its parameters and
body fields, and every schema a class with each of its fields. A new operation, a renamed or
retyped field fails here until ``python -m leoflow.cli.docs`` is run.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any

import pytest

from leoflow.api.app import create_app
from leoflow.api.openapi.document import openapi_document
from leoflow.client import AsyncClient, Client
from leoflow.client.codegen import WHOLE_DOCUMENTS, identifier, method_name, render_models, render_operations
from leoflow.client.models import MODELS
from tests.api.conftest import ADMIN_TOKEN, api_settings
from tests.api.live import serve

CLIENT = Path(__file__).resolve().parents[2] / "leoflow" / "client"
HINT = "the client is out of date: run `python -m leoflow.cli.docs`"


def checked_in() -> tuple[str, str]:
    return (CLIENT / "models.py").read_text(), (CLIENT / "operations.py").read_text()


def test_the_generated_modules_are_what_the_document_renders_to() -> None:
    models, operations = checked_in()
    assert render_models(openapi_document()) == models, HINT
    assert render_operations(openapi_document()) == operations, HINT


def test_the_docs_command_writes_them() -> None:
    from leoflow.cli.docs import client_modules

    models, operations = checked_in()
    assert client_modules() == {"leoflow/client/models.py": render_models(openapi_document()),
                                "leoflow/client/operations.py": render_operations(openapi_document())}
    assert len(models) > 1000 and len(operations) > 1000


def test_they_are_what_a_live_server_serves(database_url: str) -> None:
    with serve(create_app(api_settings(database_url))) as url, Client(url, ADMIN_TOKEN) as client:
        served = client.get_openapi_document()
    assert (render_models(served), render_operations(served)) == checked_in(), HINT


def _operations(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(method_name(op["operationId"]), op) for ops in document["paths"].values() for op in ops.values()]


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_every_operation_has_a_method_taking_its_parameters_and_body_fields(cls: type) -> None:
    document = openapi_document()
    schemas = document["components"]["schemas"]
    for name, op in _operations(document):
        method = getattr(cls, name, None)
        assert method is not None, f"{op['operationId']}: no method {name} on {cls.__name__}"
        taken = set(inspect.signature(method).parameters)
        wanted = {identifier(p["name"]) for p in op.get("parameters") or ()}
        body = op.get("requestBody")
        if body:
            ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
            wanted |= {"spec"} if ref in WHOLE_DOCUMENTS else {identifier(f) for f in schemas[ref]["properties"]}
        assert wanted <= taken, f"{cls.__name__}.{name} lacks {sorted(wanted - taken)}"
        assert inspect.iscoroutinefunction(method) == (cls is AsyncClient), name


def test_every_schema_has_a_class_with_its_fields() -> None:
    schemas = openapi_document()["components"]["schemas"]
    assert sorted(MODELS) == sorted(schemas)
    for name, schema in schemas.items():
        fields = tuple(schema.get("properties") or ())
        assert MODELS[name]._fields == fields, name
        annotated = set(inspect.get_annotations(MODELS[name])) - {"_fields", "_nested"}
        assert annotated == {f for f in fields if identifier(f) == f}, name


def test_the_check_notices_a_new_operation_and_a_changed_field() -> None:
    """Guards the tests above: a document the checked-in client was not made from renders differently."""
    document = copy.deepcopy(openapi_document())
    document["paths"]["/api/v2/imaginary"] = {"get": {"operationId": "get_imaginary", "responses": {"200": {
        "description": "OK", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Run"}}}}}}}
    run = document["components"]["schemas"]["Run"]["properties"]
    run["run_state"] = run.pop("state")
    run["dag_version"] = {"type": "string"}
    models, operations = checked_in()
    new_models, new_operations = render_models(document), render_operations(document)
    assert "def get_imaginary(self) -> Run:" in new_operations and new_operations != operations
    assert "    run_state: str\n" in new_models and "    dag_version: str\n" in new_models and new_models != models
    assert not hasattr(Client, "get_imaginary")


def test_numbers_in_paths_take_ints_and_whole_documents_take_yaml_text() -> None:
    def annotation(method: Any, name: str) -> Any:
        return inspect.signature(method).parameters[name].annotation

    assert annotation(Client.get_backfill, "backfill_id") == "int | str"
    assert annotation(Client.get_dag, "dag_id") == "str"
    assert annotation(Client.apply_dag, "spec") == "Mapping[str, Any] | str"
    assert annotation(Client.get_task_log, "try_") == "int | None"  # `try` is a keyword
