"""The Python SDK builds the spec YAML would give, and every mistake is located at the Python line that made it."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pytest

from leoflow.model.files.yaml_loader import load_yaml
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.sdk import (
    DAG,
    DagError,
    Empty,
    Env,
    KeyRef,
    Output,
    Pod,
    Resources,
    RetryPolicy,
    Task,
    Toleration,
    Volume,
    VolumeMount,
    container_task,
    item,
    map_index,
    run,
)

TUTORIAL_YAML = """\
dag_id: daily-partitions
params:
  type: object
  properties:
    day: {type: string}
    mode: {enum: [full, delta], default: full}
  required: [day]
defaults:
  node_selector: {pool: etl}
tasks:
  - id: list
    image: ghcr.io/acme/tools:2.3
    command: [list-partitions, --day, "{{ params.day }}"]
    outputs: {partitions: {type: array}}
  - id: process
    image: ghcr.io/acme/etl:5.1
    args: [--partition, "{{ item }}", --index, "{{ map_index }}"]
    outputs: {uri: {type: string}, rows: {type: integer, optional: true}}
    depends_on: [list]
    map_over: "{{ tasks.list.outputs.partitions }}"
    max_parallel: 32
    retries: 3
    retry_policy: {factor: 3, max_duration_seconds: 3600, when: "try.oom_killed || try.exit_code == 75"}
  - id: combine
    image: ghcr.io/acme/etl:5.1
    args: [combine]
    env: {URIS: "{{ tasks.process.outputs.uri }}"}
    resources: {requests: {cpu: 500m, memory: 1Gi}}
    depends_on: [process]
    when: size(tasks.list.outputs.partitions) > 0 && params.day != "2026-12-25"
    skip_on_exit_code: [99]
    tolerations: [{key: dedicated, operator: Equal, value: etl, effect: NoSchedule}]
on_exit:
  - id: notify
    image: curlimages/curl:8.10.1
    args: [-fsS, -d, "{{ run.state }}", "https://hooks.example/leoflow"]
"""


@dataclass
class Conf:
    day: str
    mode: Literal["full", "delta"] = "full"


def tutorial() -> DAG:
    with DAG("daily-partitions", params=Conf, defaults=Pod(node_selector={"pool": "etl"})) as dag:
        listing = Task("list", image="ghcr.io/acme/tools:2.3", command=["list-partitions", "--day", dag.params.day],
                       outputs={"partitions": "array"})
        process = Task("process", image="ghcr.io/acme/etl:5.1",
                       args=["--partition", item, "--index", map_index],
                       outputs={"uri": "string", "rows": Output("integer", optional=True)}, retries=3,
                       retry_policy=RetryPolicy(factor=3, max_duration_seconds=3600,
                                                when="try.oom_killed || try.exit_code == 75"),
                       ).map(over=listing.outputs["partitions"], max_parallel=32)
        combine = Task("combine", image="ghcr.io/acme/etl:5.1", args=["combine"],
                       env={"URIS": process.outputs.uri}, resources=Resources(requests={"cpu": "500m",
                                                                                        "memory": "1Gi"}),
                       when='size(tasks.list.outputs.partitions) > 0 && params.day != "2026-12-25"',
                       skip_on_exit_code=[99],
                       pod=Pod(tolerations=[Toleration(key="dedicated", operator="Equal", value="etl",
                                                       effect="NoSchedule")]))
        listing >> process >> combine
        with dag.exit_handlers():
            Task("notify", image="curlimages/curl:8.10.1",
                 args=["-fsS", "-d", run.state, "https://hooks.example/leoflow"])
    return dag


def test_the_tutorial_dag_in_python_is_the_yaml_mapping_and_validates_alike() -> None:
    dag = tutorial()
    expected = load_yaml(TUTORIAL_YAML)
    assert dag.to_spec() == expected
    assert parse_dag_spec(dag.to_spec()).to_canonical() == parse_dag_spec(expected).to_canonical()
    assert load_yaml(dag.to_yaml()) == expected


def test_reading_an_output_adds_the_edge_the_language_needs_and_not_twice() -> None:
    with DAG("reads") as dag:
        a = Task("a", image="x", outputs={"files": "array", "n": "integer"})
        b = Task("b", image="x", args=[f"--files={a.outputs['files']}"])  # formatted: the text still names a
        c = Task("c", image="x", when="tasks.a.outputs.n > 2")           # CEL reads count too
        d = Task("d", image="x", env={"N": a.outputs.n})
        b >> d
    tasks = {t["id"]: t for t in dag.to_spec()["tasks"]}
    assert tasks["b"]["depends_on"] == ["a"] and tasks["c"]["depends_on"] == ["a"]
    assert tasks["d"]["depends_on"] == ["b"]  # a is already an ancestor through b
    assert tasks["b"]["args"] == ["--files={{ tasks.a.outputs.files }}"]
    assert "depends_on" not in tasks["a"] and c.id == "c"


def test_a_task_id_with_a_dash_is_referenced_in_brackets() -> None:
    with DAG("dash") as dag:
        load = Task("load-data", image="x", outputs={"rows": "integer"})
        Task("report", image="x", args=[load.outputs.rows])
    spec = dag.to_spec()
    assert spec["tasks"][1]["args"] == ['{{ tasks["load-data"].outputs.rows }}']
    assert spec["tasks"][1]["depends_on"] == ["load-data"]


def test_lists_join_both_ways_and_empty_tasks_join_branches() -> None:
    with DAG("fan") as dag:
        start = Empty("start")
        a, b = Task("a", image="x"), Task("b", image="x")
        end = Empty("end", trigger_rule="all_done")
        start >> [a, b] >> end
        [a, b] << Task("first", image="x")
    spec = {t["id"]: t for t in dag.to_spec()["tasks"]}
    assert spec["a"]["depends_on"] == ["start", "first"] and spec["end"]["depends_on"] == ["a", "b"]
    assert spec["end"] == {"id": "end", "kind": "empty", "depends_on": ["a", "b"], "trigger_rule": "all_done"}


def test_pod_settings_are_typed_and_written_as_the_spec_spells_them() -> None:
    pod = Pod(env=[Env("A", value="1"), Env("TOKEN", secret=KeyRef("creds", "token"))],
              volumes=[Volume.secret("creds", "creds"), Volume.empty_dir("scratch", "1Gi")],
              volume_mounts=[VolumeMount("scratch", "/scratch"), VolumeMount("creds", "/creds", read_only=True)],
              service_account="etl", image_pull_policy="IfNotPresent", labels={"team": "data"})
    with DAG("pods", defaults=Pod(node_selector={"disk": "ssd"})) as dag:
        Task("t", image="x", pod=pod)
    task = dag.to_spec()["tasks"][0]
    assert task["env"] == [{"name": "A", "value": "1"}, {"name": "TOKEN", "secret": {"name": "creds", "key": "token"}}]
    assert task["volumes"] == [{"name": "creds", "secret": {"secretName": "creds"}},
                               {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}]
    assert task["volume_mounts"][1] == {"name": "creds", "mountPath": "/creds", "readOnly": True}
    parse_dag_spec(dag.to_spec())  # the validator accepts what the typed objects wrote


@dataclass
class Window:
    days: int = 7


@dataclass
class Typed:
    day: str
    regions: list[str] = field(default_factory=lambda: ["eu"])
    limit: int | None = None
    ratio: float = 0.5
    flags: dict[str, bool] = field(default_factory=dict)
    window: Window = field(default_factory=Window)


def test_params_from_a_dataclass_become_the_json_schema() -> None:
    with DAG("typed", params=Typed) as dag:
        Task("t", image="x", args=[dag.params.day, dag.params["regions"][0]])
    spec = dag.to_spec()
    assert spec["params"] == {"type": "object", "required": ["day"], "properties": {
        "day": {"type": "string"}, "regions": {"type": "array", "items": {"type": "string"}, "default": ["eu"]},
        "limit": {"type": ["integer", "null"], "default": None}, "ratio": {"type": "number", "default": 0.5},
        "flags": {"type": "object", "additionalProperties": {"type": "boolean"}, "default": {}},
        "window": {"type": "object", "properties": {"days": {"type": "integer", "default": 7}},
                   "default": {"days": 7}}}}
    assert spec["tasks"][0]["args"] == ["{{ params.day }}", "{{ params.regions[0] }}"]


def _line_of(marker: str) -> int:
    source = inspect.getsource(sys.modules[__name__]).splitlines()
    return next(i for i, text in enumerate(source, 1) if marker in text)


HERE = os.path.abspath(__file__)


def test_a_validator_problem_names_the_python_line_that_made_the_task() -> None:
    with DAG("located") as dag:
        Task("ok", image="x")
        Task("no-image")  # MARK: no image
        Task("bad-retries", image="x", retries=-1)  # MARK: retries
    with pytest.raises(DagError) as caught:
        dag.to_spec()
    assert caught.value.lines() == [
        f"{HERE}:{_line_of('MARK: no image')}: tasks[1].image: is required (or set kind: empty)",
        f"{HERE}:{_line_of('MARK: retries')}: tasks[2].retries: must be between 0 and 1,000, got -1",
    ]


def test_a_cycle_is_the_validators_error_at_the_edge_that_closed_it() -> None:
    with DAG("cycle") as dag:
        a, b, c = Task("a", image="x"), Task("b", image="x"), Task("c", image="x")
        a >> b >> c  # MARK: first edges
        c >> a
    with pytest.raises(DagError) as caught:
        dag.to_spec()
    # The validator names b's edge from a, which the first >> line made (not the task's line).
    assert caught.value.path == "tasks[1].depends_on[0]" and "dependency cycle a -> b -> c -> a" in caught.value.problem
    assert caught.value.where.line == _line_of("MARK: first edges")


def test_duplicate_ids_fail_where_the_second_is_made() -> None:
    with DAG("dup"):
        Task("t", image="x")
        with pytest.raises(DagError) as caught:
            Task("t", image="y")  # MARK: duplicate
    assert caught.value.where.line == _line_of("MARK: duplicate")
    assert "duplicate task id 't'" in caught.value.problem and f"{HERE}:" in caught.value.problem


def test_tasks_of_another_dag_cannot_be_joined_or_read() -> None:
    with DAG("one"):
        a = Task("a", image="x", outputs={"k": "string"})
    with DAG("two") as two:
        b = Task("b", image="x")
        with pytest.raises(DagError, match="cannot depend on task 'a' of DAG 'one'"):
            a >> b
        Task("c", image="x", args=[a.outputs.k])  # MARK: reads another DAG
    with pytest.raises(DagError) as caught:
        two.to_spec()
    assert "reads outputs of task 'a' of DAG 'one'" in caught.value.problem
    assert caught.value.where.line == _line_of("MARK: reads another DAG")


def test_reading_outputs_of_a_task_downstream_is_refused() -> None:
    with DAG("backwards") as dag:
        early = Task("early", image="x", args=["{{ tasks.late.outputs.k }}"])  # MARK: reads downstream
        late = Task("late", image="x", outputs={"k": "string"})
        early >> late
    with pytest.raises(DagError) as caught:
        dag.to_spec()
    assert caught.value.where.line == _line_of("MARK: reads downstream")
    assert "which runs after it" in caught.value.problem


def test_an_undeclared_output_or_param_fails_at_once() -> None:
    with DAG("undeclared", params=Conf) as dag:
        a = Task("a", image="x", outputs={"k": "string"})
        with pytest.raises(DagError, match=r"declares no output 'nope' \(declared: k\)"):
            _ = a.outputs["nope"]
        with pytest.raises(DagError, match=r"'days' is not a declared parameter \(declared: day, mode\)"):
            _ = dag.params.days


def test_a_task_outside_a_dag_is_refused() -> None:
    with pytest.raises(DagError, match="made outside a DAG"):
        Task("lonely", image="x")


@pytest.mark.parametrize("default", [datetime(2026, 1, 1), {1, 2}, float("nan"), {3: "x"}, object()])
def test_params_that_json_cannot_carry_are_refused_naming_the_field(default: object) -> None:
    bad = dataclasses.make_dataclass("Bad", [("when", Any, field(default_factory=lambda: default))])
    with pytest.raises(DagError) as caught:
        DAG("bad-params", params=bad)  # MARK: bad params
    assert caught.value.path == "params.properties.when.default"
    assert "JSON" in caught.value.problem
    assert caught.value.where.line == _line_of("MARK: bad params")
    with pytest.raises(DagError, match=r"params.properties.x.default: a datetime is not JSON-serialisable"):
        DAG("raw", params={"type": "object", "properties": {"x": {"default": datetime(2026, 1, 1)}}})


def test_a_container_task_runs_its_function_with_json_arguments_and_writes_its_outputs(tmp_path: Path) -> None:
    @container_task(image="python:3.12-slim", outputs={"total": "integer", "echo": "string"})
    def add(numbers: list[int], label: str, scale: int = 1) -> dict[str, object]:
        import json as j  # imports inside: only the function is shipped
        return {"total": sum(numbers) * scale, "echo": label + " {{ not a template }}", "dump": j.dumps(scale)}

    with DAG("scripts") as dag:
        source = Task("source", image="x", outputs={"numbers": "array"})
        task = add(numbers=source.outputs.numbers, label="sum", scale=3)
        add.task("add-again", retries=2)(numbers=[1, 2], label=source.outputs.numbers)
    spec = dag.to_spec()
    first = spec["tasks"][1]
    assert task.id == "add" and first["depends_on"] == ["source"] and spec["tasks"][2]["retries"] == 2
    canonical = parse_dag_spec(spec).task_map["add"]
    # Run it as the pod would: the server renders each reference once (an array as compact JSON).
    rendered = [a.replace("{{ tasks.source.outputs.numbers }}", "[1,2,3]") for a in canonical.args]
    script = canonical.command[2].replace('{{ "{{" }}', "{{")
    outputs = tmp_path / "outputs.json"
    done = subprocess.run([sys.executable, "-c", script, *rendered], capture_output=True, text=True, check=False,
                          env={**os.environ, "LEOFLOW_OUTPUTS": str(outputs)})
    assert done.returncode == 0, done.stderr
    assert json.loads(outputs.read_text()) == {"total": 18, "echo": "sum {{ not a template }}", "dump": "3"}
    assert add([1, 2], "plain") == {"total": 3, "echo": "plain {{ not a template }}", "dump": "1"}  # outside a DAG


GLOBAL_HELPER = 3


def test_a_container_task_that_reads_a_module_global_is_refused_naming_it() -> None:
    with pytest.raises(DagError, match="reads 'GLOBAL_HELPER' from outside the function"):
        @container_task(image="python:3.12-slim")
        def uses_global() -> int:
            return GLOBAL_HELPER


def test_a_container_task_argument_json_cannot_carry_is_refused() -> None:
    @container_task(image="python:3.12-slim")
    def takes(when: str) -> None:
        print(when)

    with DAG("args"), pytest.raises(DagError, match=r"args\.when: a datetime is not JSON-serialisable"):
        takes(datetime(2026, 1, 1))
