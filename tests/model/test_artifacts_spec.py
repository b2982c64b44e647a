"""``artifacts:`` in the spec: its canonical form round-trips (the scheduler re-parses stored specs),
``from:`` is held to the graph (upstream, declared, not mapped), and a DAG without artifacts keeps
its canonical form."""

from __future__ import annotations

from typing import Any

import pytest

from leoflow.errors import ValidationFailed
from leoflow.model.spec.dag import parse_dag_spec


def _task(task_id: str, *deps: str, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], "depends_on": list(deps), **fields}


OUT = {"outputs": [{"name": "data", "path": "out/data"}, {"name": "log", "path": "run.log", "optional": True}]}
IN = {"inputs": [{"name": "d", "from": "{{tasks.a.artifacts.data}}", "path": "in"}]}  # spaces optional


def test_the_canonical_form_round_trips_and_a_dag_without_artifacts_is_unchanged() -> None:
    spec = parse_dag_spec({"dag_id": "d", "tasks": [_task("a", artifacts=OUT), _task("b", "a"),
                                                    _task("c", "b", artifacts=IN)]})  # a is c's upstream via b
    again = parse_dag_spec(spec.to_canonical(), stored=True)
    assert again.task_map["a"].artifacts == spec.task_map["a"].artifacts
    assert again.task_map["c"].artifacts.inputs[0].source == "{{ tasks.a.artifacts.data }}"
    assert again.to_canonical() == spec.to_canonical()
    plain = parse_dag_spec({"dag_id": "d", "tasks": [_task("a")]})
    assert "artifacts" not in plain.to_canonical()["tasks"][0]


@pytest.mark.parametrize(("tasks", "problem"), [
    ([_task("a", artifacts={**OUT, "inputs": [{"name": "d", "from": "{{ tasks.a.artifacts.data }}", "path": "i"}]})],
     "cannot read its own artifacts"),
    ([_task("a", artifacts=OUT), _task("c", artifacts=IN)], "is not upstream of 'c'"),
    ([_task("a", artifacts=OUT, map_over=[1, 2]), _task("c", "a", artifacts=IN)], "is mapped"),
    ([_task("a"), _task("c", "a", artifacts=IN)], "declares no output artifact 'data' (it declares: none)"),
])
def test_from_is_held_to_the_graph(tasks: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        parse_dag_spec({"dag_id": "d", "tasks": tasks})
    assert refused.value.path.endswith(".from") and problem in refused.value.problem


def test_a_template_may_declare_artifacts() -> None:
    spec = parse_dag_spec({"dag_id": "d", "templates": [{"name": "dump", "image": "busybox", "command": ["true"],
                                                         "artifacts": OUT}],
                           "tasks": [{"id": "a", "uses": "dump"}, _task("c", "a", artifacts=IN)]})
    assert [o.name for o in spec.task_map["a"].artifacts.outputs] == ["data", "log"]
