"""A DAG spec's validation reports every problem at once (issue 38): a missing field no longer
hides a typo in ``depends_on``. The first problem is the one a single-error validation raised."""

from __future__ import annotations

from typing import Any

import pytest

from leoflow.errors import ValidationFailed
from leoflow.model.spec.dag import MAX_PROBLEMS, parse_dag_spec


def problems(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationFailed) as raised:
        parse_dag_spec(spec)
    return [str(p) for p in (raised.value, *raised.value.also)]


def test_a_missing_field_does_not_hide_a_typo_in_depends_on() -> None:
    spec = {"dag_id": "etl", "catchup": 3, "tasks": [
        {"id": "extract", "command": ["run"]},
        {"id": "load", "image": "busybox", "command": ["true"], "depends_on": ["extract", "extrct"]}]}
    assert problems(spec) == ["catchup: must be true or false, got an integer",
                              "tasks[0].image: is required (or set kind: empty)",
                              "tasks[1].depends_on[1]: unknown task 'extrct'"]


def test_the_graph_is_checked_at_the_tasks_written_positions() -> None:
    spec = {"dag_id": "etl", "tasks": [
        {"id": "bad", "image": "busybox", "retries": -1},
        {"id": "a", "image": "busybox", "command": ["true"], "depends_on": ["b", "bad"]},
        {"id": "b", "image": "busybox", "command": ["true"], "depends_on": ["a"]}]}
    found = problems(spec)
    assert found[0].startswith("tasks[0].retries: must be between 0 and")
    assert len(found) == 2 and found[1].startswith("tasks[2].depends_on[0]: dependency cycle")


def test_problems_stop_at_the_bound() -> None:
    spec = {"dag_id": "etl", "tasks": [{"id": f"t{i}", "command": ["true"]} for i in range(50)]}
    found = problems(spec)
    assert len(found) == MAX_PROBLEMS and found[-1] == f"tasks[{MAX_PROBLEMS - 1}].image: is required (or set kind: " \
                                                      "empty)"


def test_one_problem_is_raised_as_before() -> None:
    with pytest.raises(ValidationFailed) as raised:
        parse_dag_spec({"dag_id": "etl", "tasks": []})
    assert (raised.value.path, raised.value.also) == ("tasks", ())
