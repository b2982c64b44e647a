"""``on_exit:`` through the API: stored apart, every bad value a 422 naming its field (ADR 0014, decision 7)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import ADMIN


def task(task_id: str, *deps: str, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["echo"], "depends_on": list(deps), **fields}


def body(on_exit: object, **extra: Any) -> dict[str, Any]:
    return {"dag_id": "exits", "tasks": [task("a"), task("b", "a")], "on_exit": on_exit, **extra}


def test_exit_tasks_are_stored_apart_from_the_tasks(api_client: httpx.Client) -> None:
    answer = api_client.post("/api/v2/dags", json=body([task("notify", env={"URL": "https://hooks.example"}),
                                                        {"id": "done", "kind": "empty", "depends_on": ["notify"]}]),
                             headers=ADMIN)
    assert answer.status_code == 201, answer.text
    spec = answer.json()["spec"]
    assert [t["id"] for t in spec["tasks"]] == ["a", "b"]
    assert [t["id"] for t in spec["on_exit"]] == ["notify", "done"]


def test_a_dag_without_exit_tasks_keeps_its_hash(api_client: httpx.Client) -> None:
    plain = api_client.post("/api/v2/dags", json={"dag_id": "exits", "tasks": [task("a")]}, headers=ADMIN)
    again = api_client.post("/api/v2/dags", json={"dag_id": "exits", "tasks": [task("a")], "on_exit": []},
                            headers=ADMIN)
    assert plain.status_code == 201 and again.status_code in (200, 201), again.text
    assert again.json()["version"] == plain.json()["version"]  # the same spec: no new version
    assert "on_exit" not in again.json()["spec"]


@pytest.mark.parametrize(("on_exit", "field", "words"), [
    ("notify", "on_exit", "must be a list of tasks"),
    ([task(f"n{i}") for i in range(21)], "on_exit", "0 to 20 exit tasks"),
    ([task("a")], "on_exit[0].id", "duplicate task id 'a'"),
    ([task("n", "b")], "on_exit[0].depends_on[0]", "may depend on other exit tasks only"),
    ([task("n", "ghost")], "on_exit[0].depends_on[0]", "unknown task 'ghost'"),
    ([task("n", "m"), task("m", "n")], "on_exit[1].depends_on[0]", "dependency cycle"),
    ([task("n"), task("n")], "on_exit[1].id", "duplicate task id 'n'"),
    ([task("n", image="")], "on_exit[0].image", "is required"),
    ([task("n", args=["{{ params.nope }}"])], "on_exit[0].args[0]", "not declared"),
    ([task("n", when="1 +")], "on_exit[0].when", ""),
    ([task("n", bogus=1)], "on_exit[0].bogus", "unknown field"),
    ([{"id": "n" * 300, "kind": "empty"}], "on_exit[0].id", ""),
], ids=lambda v: repr(v)[:40])
def test_bad_exit_tasks_are_422s_naming_the_field(api_client: httpx.Client, on_exit: object, field: str,
                                                  words: str) -> None:
    answer = api_client.post("/api/v2/dags", json=body(on_exit), headers=ADMIN)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["details"]["field"] == field, error
    assert words in error["message"], error
    assert api_client.get("/api/v2/dags/exits", headers=ADMIN).status_code == 404  # nothing stored
