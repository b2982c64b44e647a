"""The API and the new task fields of conditions: ``when`` problems are 422s naming the field, a task
without ``command`` is accepted on Kubernetes and refused with the local executor (POST, PUT and
``dags:sync`` alike), and nothing is stored by a refused apply.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.model.spec.entrypoint import LOCAL_NEEDS_COMMAND
from tests.api.conftest import ADMIN, api_settings
from tests.api.live import client_for

ENTRYPOINT = {"dag_id": "entry", "tasks": [{"id": "serve", "image": "ghcr.io/acme/etl:5.1", "args": ["combine"]}]}


@pytest.fixture
def local_client(database_url: str) -> Iterator[httpx.Client]:
    with client_for(create_app(api_settings(database_url, LEOFLOW_EXECUTOR="local"))) as client:
        yield client


@pytest.fixture
def kube_client(database_url: str) -> Iterator[httpx.Client]:
    with client_for(create_app(api_settings(database_url, LEOFLOW_EXECUTOR="kubernetes"))) as client:
        yield client


def problem(answer: httpx.Response) -> tuple[str, str]:
    assert answer.status_code == 422, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert "Traceback" not in answer.text
    field = error["details"]["field"]
    return field, error["message"].removeprefix(f"{field}: ")


def test_a_task_without_command_is_stored_as_the_images_entrypoint_on_kubernetes(kube_client: httpx.Client) -> None:
    answer = kube_client.post("/api/v2/dags", json=ENTRYPOINT, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    stored = kube_client.get("/api/v2/dags/entry", headers=ADMIN).json()
    assert stored["spec"]["tasks"][0]["command"] == [] and stored["spec"]["tasks"][0]["args"] == ["combine"]


def test_the_local_executor_refuses_a_task_without_command(local_client: httpx.Client) -> None:
    field, message = problem(local_client.post("/api/v2/dags", json=ENTRYPOINT, headers=ADMIN))
    assert (field, message) == ("tasks[0].command", LOCAL_NEEDS_COMMAND)
    assert problem(local_client.put("/api/v2/dags/entry", json=ENTRYPOINT, headers=ADMIN))[1] == LOCAL_NEEDS_COMMAND
    assert local_client.get("/api/v2/dags/entry", headers=ADMIN).status_code == 404  # nothing stored
    sync = local_client.post("/api/v2/dags:sync", headers=ADMIN, json={"source": "git", "files": [
        {"name": "entry.yaml", "content": "dag_id: entry\ntasks:\n  - id: serve\n    image: x\n    args: [y]\n"}]})
    assert sync.status_code == 422 and LOCAL_NEEDS_COMMAND in sync.text and "Traceback" not in sync.text


@pytest.mark.parametrize(("when", "expected"), [
    ("params.day ==", "syntax error at line 1, column 14"),
    ("params.day", "unknown param 'day'"),
    ("[1].map(x, x).size() > 0", "map() is quadratic"),
    ("[1].exists(x, [2].all(y, y > x))", "all() inside another macro"),
    ("(" * 2000 + "true" + ")" * 2000, "must be at most 1,024 characters, got 4,004"),
    ("tasks.a.outputs.n > 1", "task 'a' is not upstream of this task"),
    ("nope == 1", "unknown name 'nope'"),
    (17, "must be a CEL expression (a string), got an integer"),
])
def test_bad_conditions_are_422_naming_the_field(kube_client: httpx.Client, when: object, expected: str) -> None:
    spec = {"dag_id": "cond", "tasks": [{"id": "a", "image": "x", "command": ["true"]},
                                        {"id": "b", "image": "x", "command": ["true"], "when": when}]}
    field, message = problem(kube_client.post("/api/v2/dags", json=spec, headers=ADMIN))
    assert field == "tasks[1].when" and expected in message, message


def test_bad_skip_on_exit_code_is_422_naming_the_item(kube_client: httpx.Client) -> None:
    spec = {"dag_id": "codes", "tasks": [{"id": "a", "image": "x", "command": ["true"], "skip_on_exit_code": [1, 300]}]}
    assert problem(kube_client.post("/api/v2/dags", json=spec, headers=ADMIN)) == (
        "tasks[0].skip_on_exit_code[1]", "must be an exit code, an integer from 0 to 255, got 300")
