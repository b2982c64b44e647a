"""Templates refused at apply through the API: 422 naming every bad string's path (and line:column for files)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import ADMIN

PARAMS = {"type": "object", "properties": {"day": {"type": "string"}}}


def body(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"dag_id": "tpl", "params": PARAMS, "tasks": list(tasks)}


def task(task_id: str, *deps: str, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["echo"], "depends_on": list(deps), **fields}


def test_a_dag_with_valid_references_applies_and_stores_them_as_written(api_client: httpx.Client) -> None:
    answer = api_client.post("/api/v2/dags", json=body(
        task("list", outputs={"n": {"type": "integer"}}),
        task("use", "list", args=["{{ params.day }}", "{{ run.id }}", "{{ tasks.list.outputs.n }}"])),
        headers=ADMIN)
    assert answer.status_code == 201, answer.text
    assert answer.json()["spec"]["tasks"][1]["args"] == ["{{ params.day }}", "{{ run.id }}",
                                                         "{{ tasks.list.outputs.n }}"]


def test_every_bad_reference_is_a_422_naming_its_path(api_client: httpx.Client) -> None:
    answer = api_client.post("/api/v2/dags", json=body(
        task("list", outputs={"n": {"type": "integer"}}),
        task("use", "list", args=["ok", "{{ params.dya }}", "{{ tasks.after.outputs.n }}", "{{ item }}"],
             env={"X": "{{ params.day | upper }}"}),
        task("after", "use", outputs={"n": {"type": "integer"}})), headers=ADMIN)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "validation_failed"
    assert error["details"]["field"] == "tasks[1].env.X"  # syntax first, then every name
    found = {e["field"]: e["message"] for e in error["details"]["errors"]}
    assert set(found) == {"tasks[1].args[1]", "tasks[1].args[2]", "tasks[1].args[3]", "tasks[1].env.X"}
    assert "parameter 'dya' is not declared" in found["tasks[1].args[1]"]
    assert "task 'after' is downstream of 'use'" in found["tasks[1].args[2]"]
    assert "item is only available in a mapped task" in found["tasks[1].args[3]"]
    assert "no filters, calls, operators" in found["tasks[1].env.X"]
    assert api_client.get("/api/v2/dags/tpl", headers=ADMIN).status_code == 404  # nothing stored


@pytest.mark.parametrize("text", ["{{ params.day", "{{ run.state }}", "{{ map_index }}", "{{ inputs.x }}",
                                  "{{ nope.x }}", "{{ tasks.ghost.outputs.n }}", "{{" * 20_000,
                                  "{{ run.id }}" * 65, "{{ params." + "a" * 300 + " }}", "{{ \x00 }}",
                                  "{{ params.day[99999999999] }}"], ids=lambda text: repr(text[:30]))
def test_poisoned_templates_are_422s_never_500s(api_client: httpx.Client, text: str) -> None:
    answer = api_client.post("/api/v2/dags", json=body(task("t", args=[text])), headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == "tasks[0].args[0]"


def test_a_synced_file_names_line_and_column(api_client: httpx.Client) -> None:
    content = ("dag_id: synced\n"
               "params: {type: object, properties: {day: {type: string}}}\n"
               "tasks:\n"
               "  - id: t\n"
               "    image: busybox\n"
               "    command: [echo]\n"
               "    env: {DAY: '{{ params.dya }}'}\n")
    answer = api_client.post("/api/v2/dags:sync", json={"source": "s", "files": [{"name": "a.yaml",
                                                                                   "content": content}]},
                             headers=ADMIN)
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["error"]["details"]["errors"]
    assert (problem["file"], problem["path"], problem["line"], problem["column"]) == \
        ("a.yaml", "tasks[0].env.DAY", 7, 11)  # an env entry of the mapping form is located at its name
    assert "parameter 'dya' is not declared" in problem["problem"]
