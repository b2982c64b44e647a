"""DAG spec validation, canonical hashing and cron helpers (pure unit tests, no database)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from leoflow.errors import ValidationFailed
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.timetable import (
    first_scheduled_run,
    last_fire_at_or_before,
    next_fire_after,
    next_fire_at_or_after,
)

EXAMPLE = """
dag_id: etl-daily
schedule: "0 3 * * *"
timezone: UTC
catchup: false
start_date: 2026-01-01T00:00:00Z
max_active_runs: 1
paused: false
default_retries: 0
tasks:
  - id: extract
    image: python:3.12-slim
    command: ["python", "-c", "print('extract')"]
    args: []
    env: {KEY: value}
    retries: 2
    retry_delay_seconds: 30
    timeout_seconds: 600
    resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 256Mi}}
  - id: load
    image: python:3.12-slim
    command: ["sh", "-c", "echo load"]
    depends_on: [extract]
"""


def base() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE)


def rejected(doc: object) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(doc)
    return info.value


def test_issue_example_parses_with_defaults_resolved() -> None:
    spec = parse_dag_spec(base())
    assert spec.dag_id == "etl-daily"
    assert spec.start_date == datetime(2026, 1, 1, tzinfo=UTC)
    extract, load = spec.tasks
    assert extract.retries == 2 and extract.max_tries == 3 and extract.timeout_seconds == 600
    assert load.retries == 0 and load.depends_on == ("extract",) and load.kind == "container"
    assert extract.resources == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}


def test_json_and_yaml_forms_hash_alike_and_canonical_round_trips() -> None:
    from_yaml = parse_dag_spec(base())
    doc = base()
    doc["start_date"] = "2026-01-01T00:00:00+00:00"
    doc["tasks"][0]["retry_delay_seconds"] = 30.0
    from_json = parse_dag_spec(doc)
    assert from_yaml.spec_hash() == from_json.spec_hash()
    again = parse_dag_spec(from_yaml.to_canonical())
    assert again == from_yaml and again.spec_hash() == from_yaml.spec_hash()


def test_paused_is_not_part_of_the_hash_but_other_fields_are() -> None:
    doc = base()
    original = parse_dag_spec(doc).spec_hash()
    doc["paused"] = True
    assert parse_dag_spec(doc).spec_hash() == original
    doc["tasks"][1]["command"] = ["sh", "-c", "echo LOAD"]
    assert parse_dag_spec(doc).spec_hash() != original


def test_fairness_fields_keep_old_hashes_and_enter_the_canonical_form_when_set() -> None:
    plain = parse_dag_spec(base())
    explicit = copy.deepcopy(base())
    explicit["tasks"][0].update(pool="default", priority=0)
    assert parse_dag_spec(explicit).spec_hash() == plain.spec_hash()  # defaults spelled out change nothing
    assert "pool" not in plain.to_canonical()["tasks"][0] and "max_active_tasks" not in plain.to_canonical()
    tuned = copy.deepcopy(base())
    tuned["max_active_tasks"] = 4
    tuned["tasks"][0].update(pool="gpu", priority=-7)
    spec = parse_dag_spec(tuned)
    canonical = spec.to_canonical()
    assert canonical["max_active_tasks"] == 4
    assert (canonical["tasks"][0]["pool"], canonical["tasks"][0]["priority"]) == ("gpu", -7)
    assert parse_dag_spec(canonical).spec_hash() == spec.spec_hash() != plain.spec_hash()
    assert (spec.tasks[0].pool, spec.tasks[0].priority, spec.tasks[1].pool) == ("gpu", -7, "default")


def test_default_retries_applies_to_tasks_without_their_own() -> None:
    doc = base()
    doc["default_retries"] = 4
    spec = parse_dag_spec(doc)
    assert [t.retries for t in spec.tasks] == [2, 4]


def test_naive_start_date_is_in_the_dag_timezone() -> None:
    doc = base()
    doc["timezone"] = "Europe/Berlin"
    doc["start_date"] = "2026-07-01T00:00:00"
    assert parse_dag_spec(doc).start_date == datetime(2026, 6, 30, 22, tzinfo=UTC)


def _mutate(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(base())
    target: Any = doc
    parts = path.replace("]", "").replace("[", ".").split(".")
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    last = parts[-1]
    if value is _DELETE:
        del target[int(last) if last.isdigit() else last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return doc


class _Delete:
    """Marks a field to remove; a stable repr keeps test ids equal across pytest-xdist workers."""

    def __repr__(self) -> str:
        return "<deleted>"


_DELETE = _Delete()

REJECTIONS = [
    # (mutation path, value, expected error path, words in the problem)
    ("dag_id", "ETL_daily", "dag_id", "not a valid name"),
    ("dag_id", "x" * 51, "dag_id", "not a valid name"),
    ("dag_id", 7, "dag_id", "must be a string"),
    ("dag_id", _DELETE, "dag_id", "is required"),
    ("owner", "me", "owner", "unknown field"),
    ("schedule", "0 25 * * *", "schedule", "not a valid cron"),
    ("schedule", "* * * *", "schedule", "5-field"),
    ("schedule", "@fortnightly", "schedule", "unknown preset"),
    ("schedule", 5, "schedule", "cron expression"),
    ("timezone", "Mars/Olympus", "timezone", "unknown time zone"),
    ("timezone", "../etc/passwd", "timezone", "unknown time zone"),
    ("catchup", "yes", "catchup", "true or false"),
    ("start_date", "yesterday", "start_date", "ISO 8601"),
    ("max_active_runs", 0, "max_active_runs", "between"),
    ("max_active_runs", True, "max_active_runs", "integer"),
    ("default_retries", -1, "default_retries", "between"),
    ("tasks", [], "tasks", "at least one"),
    ("tasks", {"id": "a"}, "tasks", "list"),
    ("tasks[1]", "load", "tasks[1]", "mapping"),
    ("tasks[1].id", "extract", "tasks[1].id", "duplicate task id"),
    ("tasks[1].id", "Load!", "tasks[1].id", "not a valid name"),
    ("tasks[1].depends_on[0]", "extrct", "tasks[1].depends_on[0]", "unknown task 'extrct'"),
    ("tasks[1].depends_on", ["extract", "extract"], "tasks[1].depends_on[1]", "duplicate dependency"),
    ("tasks[1].depends_on", "extract", "tasks[1].depends_on", "list"),
    ("tasks[1].depends_on", ["load"], "tasks[1].depends_on[0]", "depends on itself"),
    ("tasks[0].depends_on", ["load"], "tasks[1].depends_on[0]", "cycle extract -> load -> extract"),
    ("tasks[0].colour", "red", "tasks[0].colour", "unknown field"),
    ("tasks[0].retries", "2", "tasks[0].retries", "integer"),
    ("tasks[0].retries", 1.5, "tasks[0].retries", "integer"),
    ("tasks[0].retry_delay_seconds", -1, "tasks[0].retry_delay_seconds", "between 0 and 604,800"),
    ("tasks[0].timeout_seconds", 0, "tasks[0].timeout_seconds", "greater than"),
    ("tasks[0].command", "python -c 1", "tasks[0].command", "list of strings"),
    ("tasks[0].command", ["python", 3], "tasks[0].command[1]", "string"),
    ("tasks[0].image", _DELETE, "tasks[0].image", "required"),
    ("tasks[0].env", {"KEY": 1}, "tasks[0].env.KEY", "must be a string"),
    ("tasks[0].env", {"1BAD": "x"}, "tasks[0].env.1BAD", "environment variable name"),
    ("tasks[0].resources", {"requests": {"cpu": "lots"}}, "tasks[0].resources.requests.cpu", "quantity"),
    ("tasks[0].resources", {"maximum": {}}, "tasks[0].resources.maximum", "unknown field"),
    ("tasks[0].kind", "python", "tasks[0].kind", "'container' or 'empty'"),
    # Fairness (issue 19): pools, priorities, max_active_tasks.
    ("max_active_tasks", 0, "max_active_tasks", "between 1 and 100,000"),
    ("max_active_tasks", 100_001, "max_active_tasks", "between 1 and 100,000"),
    ("max_active_tasks", True, "max_active_tasks", "integer"),
    ("max_active_tasks", "4", "max_active_tasks", "integer"),
    ("tasks[0].pool", "GPU!", "tasks[0].pool", "not a valid name"),
    ("tasks[0].pool", "x" * 51, "tasks[0].pool", "not a valid name"),
    ("tasks[0].pool", "", "tasks[0].pool", "not a valid name"),
    ("tasks[0].pool", 5, "tasks[0].pool", "must be a string"),
    ("tasks[0].pool", ["gpu"], "tasks[0].pool", "must be a string"),
    ("tasks[0].priority", 1_000_001, "tasks[0].priority", "between -1,000,000 and 1,000,000"),
    ("tasks[0].priority", -(10**30), "tasks[0].priority", "between -1,000,000 and 1,000,000"),
    ("tasks[0].priority", 1.5, "tasks[0].priority", "integer"),
    ("tasks[0].priority", "high", "tasks[0].priority", "integer"),
    ("tasks[0].priority", False, "tasks[0].priority", "integer"),
]


@pytest.mark.parametrize(("path", "value", "error_path", "words"), REJECTIONS,
                         ids=[f"{p}={v!r}"[:60] for p, v, _, _ in REJECTIONS])
def test_rejection_names_the_offending_path(path: str, value: Any, error_path: str, words: str) -> None:
    error = rejected(_mutate(path, value))
    assert error.path == error_path
    assert words in error.problem
    assert str(error).startswith(f"{error_path}: ")


def test_non_mapping_document_is_rejected() -> None:
    for doc in (None, [], "dag_id: x", 3):
        assert "must be a mapping" in rejected(doc).problem


def test_longer_cycle_reports_the_whole_loop() -> None:
    doc = {"dag_id": "cyc", "tasks": [
        {"id": "a", "kind": "empty", "depends_on": ["c"]},
        {"id": "b", "kind": "empty", "depends_on": ["a"]},
        {"id": "c", "kind": "empty", "depends_on": ["b"]},
    ]}
    error = rejected(doc)
    assert error.path.startswith("tasks[") and "depends_on[0]" in error.path
    assert "cycle" in error.problem and error.problem.count("->") == 3


def test_deep_chain_does_not_hit_the_recursion_limit() -> None:
    tasks = [{"id": "t0", "kind": "empty"}] + [
        {"id": f"t{i}", "kind": "empty", "depends_on": [f"t{i - 1}"]} for i in range(1, 5000)]
    assert len(parse_dag_spec({"dag_id": "chain", "tasks": tasks}).tasks) == 5000


# --------------------------------------------------------------------------- empty tasks (issue 11)

def test_empty_task_needs_no_image_or_command() -> None:
    spec = parse_dag_spec({"dag_id": "e", "tasks": [{"id": "join", "kind": "empty"}]})
    assert spec.tasks[0].kind == "empty" and spec.tasks[0].image is None


@pytest.mark.parametrize("field", ["image", "command", "args", "env", "pool", "priority"])
def test_empty_task_rejects_container_fields(field: str) -> None:
    values = {"image": "busybox", "command": ["true"], "args": ["x"], "env": {"A": "b"}, "pool": "gpu", "priority": 3}
    error = rejected({"dag_id": "e", "tasks": [{"id": "join", "kind": "empty", field: values[field]}]})
    assert error.path == f"tasks[0].{field}" and "empty task" in error.problem


def test_container_task_requires_image_but_not_command() -> None:
    assert rejected({"dag_id": "e", "tasks": [{"id": "a", "command": ["true"]}]}).path == "tasks[0].image"
    # Without command the image's entrypoint runs with args: stored as command [], which parses back alike.
    spec = parse_dag_spec({"dag_id": "e", "tasks": [{"id": "a", "image": "x", "args": ["serve"]}]})
    assert spec.tasks[0].command == () and spec.to_canonical()["tasks"][0]["command"] == []
    assert parse_dag_spec(spec.to_canonical()) == spec
    assert parse_dag_spec({"dag_id": "e", "tasks": [{"id": "a", "image": "x", "command": [],
                                                      "args": ["serve"]}]}).spec_hash() == spec.spec_hash()


# --------------------------------------------------------------------------- retries

def test_retry_delay_doubles_and_is_capped_by_task_and_global_limits() -> None:
    spec = parse_dag_spec({"dag_id": "r", "tasks": [
        {"id": "a", "image": "x", "command": ["true"], "retry_delay_seconds": 10},
        {"id": "b", "image": "x", "command": ["true"], "retry_delay_seconds": 10, "max_retry_delay_seconds": 25},
    ]})
    a, b = spec.tasks
    assert [a.retry_delay(n, 3600) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert a.retry_delay(20, 3600) == 3600
    assert a.retry_delay(4, 50) == 50
    assert [b.retry_delay(n, 3600) for n in (1, 2, 3)] == [10, 20, 25]


# --------------------------------------------------------------------------- cron

def test_cron_helpers_in_a_timezone_with_dst() -> None:
    berlin = "Europe/Berlin"
    # 03:00 Berlin in winter is 02:00 UTC, in summer 01:00 UTC.
    assert next_fire_at_or_after("0 3 * * *", berlin, datetime(2026, 3, 28, 0, tzinfo=UTC)) == \
        datetime(2026, 3, 28, 2, tzinfo=UTC)
    assert next_fire_after("0 3 * * *", berlin, datetime(2026, 3, 28, 2, tzinfo=UTC)) == \
        datetime(2026, 3, 29, 1, tzinfo=UTC)
    assert last_fire_at_or_before("@hourly", "UTC", datetime(2026, 1, 1, 5, 0, tzinfo=UTC)) == \
        datetime(2026, 1, 1, 5, tzinfo=UTC)
    assert last_fire_at_or_before("@hourly", "UTC", datetime(2026, 1, 1, 5, 59, tzinfo=UTC)) == \
        datetime(2026, 1, 1, 5, tzinfo=UTC)
    assert next_fire_at_or_after("@daily", "UTC", datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2026, 1, 1, tzinfo=UTC)


def test_first_scheduled_run_starts_at_start_date_or_now() -> None:
    doc = base()
    spec = parse_dag_spec(doc)
    assert first_scheduled_run(spec, datetime(2026, 5, 1, tzinfo=UTC)) == datetime(2026, 1, 1, 3, tzinfo=UTC)
    doc["start_date"] = None
    spec = parse_dag_spec(doc)
    assert first_scheduled_run(spec, datetime(2026, 5, 1, 4, tzinfo=UTC)) == datetime(2026, 5, 2, 3, tzinfo=UTC)
    doc["schedule"] = None
    assert first_scheduled_run(parse_dag_spec(doc), datetime(2026, 5, 1, tzinfo=UTC)) is None


def test_shipped_example_dag_is_valid() -> None:
    from importlib.resources import files
    doc = yaml.safe_load(files("leoflow").joinpath("examples/example.yaml").read_text())
    spec = parse_dag_spec(doc)
    assert spec.dag_id == "example" and {t.kind for t in spec.tasks} == {"container", "empty"}
