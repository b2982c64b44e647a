"""Secrets stay secrets: a read token never sees a plain env value of a spec; pod fields 422 with their path."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.api.conftest import ADMIN, READ, spec

PASSWORD = "hunter2-pasted-into-env"
TEMPLATE_TOKEN = "tmpl-token-pasted-too"


def _secretive() -> dict[str, object]:
    doc = spec("secretive")
    doc["defaults"] = {"env": {"SHARED_KEY": "shared-secret-value"},
                       "pod_template": {"spec": {"initContainers": [
                           {"name": "init", "image": "x", "env": [{"name": "T", "value": TEMPLATE_TOKEN}]}]}}}
    doc["tasks"][0].update(env={"DB_PASSWORD": PASSWORD})  # type: ignore[index]
    doc["tasks"][1].update(env=[{"name": "USER", "value": "etl-user-value"},  # type: ignore[index]
                                {"name": "PASSWORD", "secret": {"name": "pg", "key": "password"}}],
                           pod_template={"spec": {"containers": [{"name": "agent", "image": "a",
                                                                  "env": [{"name": "K", "value": "agent-key"}]}]}})
    return doc


def test_read_tokens_never_see_plain_env_values(api_client: httpx.Client) -> None:
    created = api_client.post("/api/v2/dags", json=_secretive(), headers=ADMIN)
    assert created.status_code == 201, created.text
    assert created.json()["env_values_hidden"] is False

    admin = api_client.get("/api/v2/dags/secretive", headers=ADMIN)
    assert PASSWORD in admin.text and admin.json()["env_values_hidden"] is False  # admins see what they wrote

    read = api_client.get("/api/v2/dags/secretive", headers=READ)
    assert read.status_code == 200
    body = read.json()
    for value in (PASSWORD, TEMPLATE_TOKEN, "shared-secret-value", "etl-user-value", "agent-key"):
        assert value not in read.text
    assert body["env_values_hidden"] is True
    extract, load = body["spec"]["tasks"]
    assert extract["env"] == {"DB_PASSWORD": "<hidden>"}  # the names stay: they say what the task needs
    assert load["env"] == [{"name": "USER", "value": "<hidden>"},
                           {"name": "PASSWORD", "secret": {"name": "pg", "key": "password"}}]
    assert body["spec"]["defaults"]["env"] == {"SHARED_KEY": "<hidden>"}
    # Nothing else about the DAG is hidden.
    admin_spec = admin.json()["spec"]
    assert body["spec"]["tasks"][0]["image"] == admin_spec["tasks"][0]["image"]
    assert json.dumps(body["spec"]["defaults"]["pod_template"]).count("<hidden>") == 1
    # Lists never carried the spec.
    listed = api_client.get("/api/v2/dags", headers=READ)
    assert PASSWORD not in listed.text
    # Nor does a DAG's history: a version's spec is hidden the same way.
    versions = api_client.get("/api/v2/dags/secretive/versions", headers=READ)
    assert versions.status_code == 200 and PASSWORD not in versions.text
    old = api_client.get("/api/v2/dags/secretive/versions/1", headers=READ)
    assert old.status_code == 200 and old.json()["env_values_hidden"] is True
    for value in (PASSWORD, TEMPLATE_TOKEN, "shared-secret-value", "etl-user-value", "agent-key"):
        assert value not in old.text
    assert PASSWORD in api_client.get("/api/v2/dags/secretive/versions/1", headers=ADMIN).text
    # Both answers say what their documents say (schemathesis found the version's flag
    # undeclared: its schema allows no other property).
    conforms(api_client.get("/api/v2/dags/secretive", headers=READ).json(), "DagDetail")
    conforms(old.json(), "DagVersionDetail")


def conforms(body: Any, schema: str) -> None:
    """``body`` is valid against the OpenAPI document's component ``schema``."""
    import jsonschema

    from leoflow.api.openapi.document import openapi_document

    document = openapi_document()
    jsonschema.validate(body, {**document["components"]["schemas"][schema], "components": document["components"]})


def test_pod_fields_are_validated_by_the_api(api_client: httpx.Client) -> None:
    doc = spec("bad-pod")
    doc["tasks"][0]["volume_mounts"] = [{"name": "data", "mountPath": "relative"}]  # type: ignore[index]
    answer = api_client.post("/api/v2/dags", json=doc, headers=ADMIN)
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["details"]["field"] == "tasks[0].volume_mounts[0].mountPath"
    assert "absolute path" in error["message"]
