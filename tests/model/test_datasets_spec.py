"""Datasets in the DAG spec: produces, the dataset schedule, their canonical form and hashes."""

from __future__ import annotations

from typing import Any

import pytest

from leoflow.errors import ValidationFailed
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.datasets import DatasetCondition


def _spec(**fields: Any) -> dict[str, Any]:
    return {"dag_id": "d", "tasks": [{"id": "t", "image": "busybox"}], **fields}


def test_a_dag_without_datasets_keeps_its_canonical_form_and_hash() -> None:
    plain = parse_dag_spec(_spec(schedule="@daily"))
    assert "produces" not in plain.to_canonical()["tasks"][0]
    assert plain.to_canonical()["schedule"] == "@daily"
    # The hash of this spec before datasets existed (computed at the parent commit).
    assert plain.spec_hash() == "ca964f73aef0c721c61d5b4b663e51bb0e3005c2c7130e4d0bd42dba80304194"
    assert plain.spec_hash() == parse_dag_spec(_spec(schedule="@daily", tasks=[
        {"id": "t", "image": "busybox", "produces": []}])).spec_hash()


def test_produces_and_a_dataset_schedule_round_trip_through_the_stored_form() -> None:
    spec = parse_dag_spec(_spec(schedule={"datasets": {"any": ["s3://b/orders", "pg://w/t"]}},
                                tasks=[{"id": "t", "image": "busybox", "produces": ["s3://b/report"]}]))
    assert spec.schedule is None
    assert spec.dataset_schedule == DatasetCondition("any", ("s3://b/orders", "pg://w/t"))
    assert spec.tasks[0].produces == ("s3://b/report",)
    stored = parse_dag_spec(spec.to_canonical(), stored=True)
    assert stored == spec and stored.spec_hash() == spec.spec_hash()
    assert spec.spec_hash() != parse_dag_spec(_spec(schedule={"datasets": {"all": ["s3://b/orders", "pg://w/t"]}},
                                                    tasks=[{"id": "t", "image": "busybox",
                                                            "produces": ["s3://b/report"]}])).spec_hash()


def test_uris_are_compared_as_written() -> None:
    spec = parse_dag_spec(_spec(schedule={"datasets": {"all": ["s3://b/x", "s3://b/x/", "S3://b/x"]}}))
    assert spec.dataset_schedule is not None and len(spec.dataset_schedule.uris) == 3


@pytest.mark.parametrize(("mode", "queued", "met"), [
    ("all", {"a"}, False), ("all", {"a", "b"}, True), ("all", {"a", "b", "z"}, True),
    ("any", set(), False), ("any", {"b"}, True), ("any", {"z"}, False),
])
def test_condition(mode: str, queued: set[str], met: bool) -> None:
    condition = DatasetCondition("all" if mode == "all" else "any", ("a", "b"))
    assert condition.met_by(queued) is met


def test_an_empty_task_cannot_produce() -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(_spec(tasks=[{"id": "t", "kind": "empty", "produces": ["u"]}]))
    assert info.value.path == "tasks[0].produces"


def test_a_dataset_schedule_needs_defaults_for_required_params() -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(_spec(schedule={"datasets": {"any": ["u"]}},
                             params={"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}}))
    assert info.value.path == "params"
