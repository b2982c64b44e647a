"""Reusable templates (``templates:``, ``uses:``, ``inputs:``, cluster templates), at the spec level.

What is pinned here: the inlined canonical task (fields, override order, the ``uses`` record); inputs
substituted on parsed pieces, so a ``{{`` in a value stays literal through apply *and* launch while
a reference in a value becomes the using task's own, checked like it; every refusal names its path.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.spec.dag import parse_cluster_template, parse_dag_spec
from leoflow.model.spec.rendering import RunFacts, Upstream, render_task
from leoflow.model.spec.reuse import ClusterTemplate, cluster_refs
from leoflow.model.spec.template_inputs import written
from leoflow.model.spec.templating import Reference, parse_template

PARAMS = {"type": "object", "properties": {"day": {"type": "string"}}}
ETL = {"name": "etl", "inputs": {"partition": {}, "mode": {"type": "string", "default": "full"},
                                 "n": {"type": "integer", "default": 3}},
       "image": "ghcr.io/acme/etl:5.1", "command": ["etl"],
       "args": ["--partition", "{{ inputs.partition }}", "--mode={{ inputs.mode }}", "{{ inputs.n }}"],
       "env": {"PART": "p={{ inputs.partition }}", "KEEP": "k"}, "retries": 2, "timeout_seconds": 60,
       "node_selector": {"pool": "etl", "zone": "a"}}


def dag(*tasks: dict[str, Any], templates: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"dag_id": "d", "params": PARAMS, "templates": [copy.deepcopy(ETL)] if templates is None else templates,
            "tasks": list(tasks), **extra}


def canonical_task(spec: dict[str, Any], i: int = 0, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = parse_dag_spec(spec, **kw).to_canonical()["tasks"][i]
    return out


def problem(spec: dict[str, Any], **kw: Any) -> str:
    with pytest.raises(ValidationFailed) as caught:
        parse_dag_spec(spec, **kw)
    return str(caught.value)


def facts() -> RunFacts:
    return RunFacts(params={"day": "2026-11-21"}, run_id="manual__1", logical_date="2026-11-21T00:00:00+00:00",
                    upstream={"list": Upstream("success", {"uri": "s3://b/x"})})


def test_a_task_that_uses_a_template_is_inlined_with_inputs_and_a_record() -> None:
    task = canonical_task(dag({"id": "p0", "uses": "etl", "inputs": {"partition": "p0", "n": 7}}))
    assert task["image"] == "ghcr.io/acme/etl:5.1" and task["command"] == ["etl"]
    assert task["args"] == ["--partition", "p0", "--mode=full", "7"]  # a default; an integer as JSON text
    assert task["env"] == {"KEEP": "k", "PART": "p=p0"}
    assert task["retries"] == 2 and task["timeout_seconds"] == 60
    assert task["uses"] == {"template": "etl"}
    assert "templates" not in parse_dag_spec(dag({"id": "p0", "uses": "etl", "inputs": {"partition": "p"}})) \
        .to_canonical()  # the scheduler never sees a template


def test_the_tasks_own_fields_override_the_templates_as_they_override_defaults() -> None:
    spec = dag({"id": "p0", "uses": "etl", "inputs": {"partition": "p0"}, "retries": 0, "args": ["own"],
                "env": {"KEEP": "mine", "NEW": "n"}, "node_selector": {"zone": "b"}},
               defaults={"env": {"FROM_DEFAULTS": "d", "KEEP": "default"}, "labels": {"team": "data"}})
    task = canonical_task(spec)
    assert task["retries"] == 0 and task["args"] == ["own"]  # replaced as a whole
    assert task["env"] == {"KEEP": "mine", "NEW": "n", "PART": "p=p0"}  # merged by name, the task winning
    assert task["node_selector"] == {"pool": "etl", "zone": "b"}  # merged key by key
    pod = parse_dag_spec(spec).tasks[0].pod
    assert pod.labels == {"team": "data"}  # defaults still apply below template and task
    assert {v.name: v.value for v in pod.env}["FROM_DEFAULTS"] == "d"
    assert {v.name: v.value for v in pod.env}["KEEP"] == "mine"


def test_an_input_holding_a_literal_open_stays_literal_through_apply_and_launch() -> None:
    spec = parse_dag_spec(dag({"id": "p0", "uses": "etl", "inputs": {"partition": '{{ "{{" }} params.day }}'}}))
    task = spec.tasks[0]
    assert task.to_canonical()["args"][1] == '{{ "{{" }} params.day }}'  # written back escaped
    assert task.templates is not None
    out = render_task(task.templates, task.command, task.args, task.env, task.pod.pod_template, facts())
    assert out.args[1] == "{{ params.day }}" and out.env["PART"] == "p={{ params.day }}"  # never rendered
    # A JSON value is text too: its braces are literal, whatever they spell.
    with pytest.raises(ValidationFailed, match=r"tasks\[0\].inputs: missing required input 'n'"):
        parse_dag_spec(dag({"id": "p0", "uses": "etl", "inputs": {"partition": "x"}},
                           templates=[{**ETL, "inputs": {**ETL["inputs"], "n": {"type": "object"}}}]))
    spec = parse_dag_spec(dag({"id": "p0", "uses": "etl", "inputs": {"partition": "x", "n": {"k": "{{ run.id }}"}}},
                              templates=[{**ETL, "inputs": {**ETL["inputs"], "n": {"type": "object"}}}]))
    task = spec.tasks[0]
    assert task.templates is not None
    out = render_task(task.templates, task.command, task.args, task.env, task.pod.pod_template, facts())
    assert out.args[3] == '{"k":"{{ run.id }}"}'


def test_an_input_holding_a_reference_becomes_the_using_tasks_reference_checked_there() -> None:
    spec = dag({"id": "list", "image": "busybox", "command": ["ls"], "outputs": {"uri": {"type": "string"}}},
               {"id": "p0", "uses": "etl", "depends_on": ["list"],
                "inputs": {"partition": "{{ params.day }}/{{ tasks.list.outputs.uri }}"}})
    task = parse_dag_spec(spec).tasks[1]
    assert task.to_canonical()["args"][1] == "{{ params.day }}/{{ tasks.list.outputs.uri }}"
    assert task.templates is not None
    out = render_task(task.templates, task.command, task.args, task.env, task.pod.pod_template, facts())
    assert out.args[1] == "2026-11-21/s3://b/x"
    spec["tasks"][1]["depends_on"] = []
    assert "task 'list' is not upstream of 'p0'" in problem(spec)
    spec["tasks"][1]["inputs"] = {"partition": "{{ params.nope }}"}
    assert "parameter 'nope' is not declared" in problem(spec)
    spec["tasks"][1]["inputs"] = {"partition": "{{ inputs.mode }}"}
    assert problem(spec).startswith("tasks[1].inputs.partition: {{ inputs.mode }}: an input's value cannot name")
    spec["tasks"][1]["inputs"] = {"partition": "{{ parmas.day }}"}
    assert problem(spec).startswith("tasks[1].inputs.partition: ") and "unknown name 'parmas'" in problem(spec)


@pytest.mark.parametrize(("task", "words"), [
    ({"uses": "nope"}, "tasks[0].uses: unknown template 'nope' (this DAG's templates: etl"),
    ({"uses": "etl"}, "tasks[0].uses: missing required input 'partition' of template 'etl'"),
    ({"uses": "etl", "inputs": {}}, "tasks[0].inputs: missing required input 'partition'"),
    ({"uses": "etl", "inputs": {"partition": "p", "zz": 1}}, "tasks[0].inputs.zz: unknown input of template 'etl'"),
    ({"uses": "etl", "inputs": {"partition": 3}}, "tasks[0].inputs.partition: must be of type string, got an int"),
    ({"uses": "etl", "inputs": {"partition": "p", "n": "7"}}, "tasks[0].inputs.n: must be of type integer"),
    ({"uses": "etl", "inputs": {"partition": "p", "n": True}}, "tasks[0].inputs.n: must be of type integer"),
    ({"uses": "etl", "inputs": ["partition"]}, "tasks[0].inputs: must be a mapping of input names"),
    ({"image": "busybox", "command": ["x"], "inputs": {"a": 1}}, "tasks[0].inputs: only a task that says uses:"),
    ({"uses": "cluster/etl"}, "tasks[0].uses: cluster template 'etl' does not exist"),
    ({"uses": "cluster/etl@0"}, "tasks[0].uses: 'cluster/etl@0' is not a template"),
    ({"uses": "Etl"}, "tasks[0].uses: 'Etl' is not a valid name"),
    ({"uses": 7}, "tasks[0].uses: must name a template (NAME, cluster/NAME or cluster/NAME@VERSION), got an int"),
    ({"image": "busybox", "command": ["{{ inputs.x }}"]}, "inputs.NAME is only available in a template's fields"),
])
def test_bad_uses_are_422s_naming_the_path(task: dict[str, Any], words: str) -> None:
    assert words in problem(dag({"id": "t", **task}))


@pytest.mark.parametrize(("template", "words"), [
    ({"depends_on": ["x"]}, "templates[0].depends_on: is not allowed in a template"),
    ({"when": "true"}, "templates[0].when: is not allowed in a template"),
    ({"uses": "etl"}, "templates[0].uses: is not allowed in a template"),
    ({"map_over": [1]}, "templates[0].map_over: is not allowed in a template"),
    ({"foo": 1}, "templates[0].foo: unknown field (allowed: affinity"),
    ({"image": None}, "templates[0].image: is required"),
    ({"args": ["{{ inputs.zz }}"]}, "templates[0].args[0]: {{ inputs.zz }}: the template declares no input 'zz'"),
    ({"args": ["{{ inputs.zz"]}, "templates[0].args[0]:"),
    ({"inputs": {"a": {"type": "str"}}}, "templates[0].inputs.a.type: must be one of string, integer"),
    ({"inputs": {"a": {"default": 1}}}, "templates[0].inputs.a.default: must be of type string"),
    ({"inputs": {"a": {"default": "x", "required": True}}}, "templates[0].inputs.a.required: an input with a "),
    ({"inputs": {"a-b": {}}}, "templates[0].inputs.a-b: 'a-b' is not a valid name"),
    ({"inputs": {"a": {"typo": 1}}}, "templates[0].inputs.a.typo: unknown field"),
    ({"inputs": {f"i{n}": {} for n in range(65)}}, "templates[0].inputs: has 65 inputs; 0 to 64 inputs"),
    ({"name": "Bad"}, "templates[0].name: 'Bad' is not a valid name"),
    ({"description": 5}, "templates[0].description: must be a string"),
    ({"description": "d" * 2_001}, "templates[0].description: must be at most 2,000 characters"),
    ({"inputs": {"a": {"description": 5}}}, "templates[0].inputs.a.description: must be a string"),
])
def test_bad_templates_are_422s_naming_the_path(template: dict[str, Any], words: str) -> None:
    body = {**ETL, **template}
    body = {k: v for k, v in body.items() if v is not None}
    assert words in problem(dag({"id": "t", "image": "busybox", "command": ["x"]}, templates=[body]))


def test_limits_templates_and_inputs() -> None:
    base = {"name": "t", "image": "busybox", "command": ["x"]}
    many = [{**base, "name": f"t{i}"} for i in range(limits.TEMPLATES.maximum)]
    parse_dag_spec(dag({"id": "a", "uses": "t0"}, templates=many))
    assert "templates: has 201 templates" in problem(dag({"id": "a", "uses": "t0"},
                                                        templates=[*many, {**base, "name": "t200"}]))
    assert "templates[1].name: duplicate template name 't'" in problem(dag({"id": "a", "uses": "t"},
                                                                           templates=[base, base]))
    inputs = {f"i{n}": {"default": ""} for n in range(64)}
    parse_dag_spec(dag({"id": "a", "uses": "t", "inputs": {k: "v" for k in inputs}},
                       templates=[{**base, "inputs": inputs}]))
    huge = "x" * 40_000
    assert "with its inputs substituted is over 65,536 characters" in problem(dag(
        {"id": "a", "uses": "etl", "inputs": {"partition": huge}},
        templates=[{**ETL, "args": ["{{ inputs.partition }}{{ inputs.partition }}"]}]))


def test_exit_tasks_may_use_templates_and_optional_inputs_render_empty() -> None:
    t = {"name": "note", "inputs": {"msg": {"required": False}}, "image": "busybox", "command": ["echo"],
         "args": ["[{{ inputs.msg }}]"]}
    spec = parse_dag_spec(dag({"id": "a", "image": "busybox", "command": ["x"]}, templates=[t],
                              on_exit=[{"id": "bye", "uses": "note"}]))
    assert spec.on_exit[0].args == ("[]",)


def cluster(spec: dict[str, Any], *versions: int) -> dict[tuple[str, int | None], ClusterTemplate]:
    found: dict[tuple[str, int | None], ClusterTemplate] = {}
    for v in versions:
        body = {**spec, "args": [*spec["args"], f"v{v}"]}
        found[("etl", v)] = ClusterTemplate("etl", v, body)
    found[("etl", None)] = found[("etl", max(versions))]
    return found


def test_cluster_templates_resolve_pinned_or_newest_and_record_the_version() -> None:
    stored = {k: v for k, v in ETL.items() if k != "name"}
    catalog = cluster(stored, 1, 2)
    newest = canonical_task(dag({"id": "a", "uses": "cluster/etl", "inputs": {"partition": "p"}}, templates=[]),
                            cluster_templates=catalog)
    assert newest["uses"] == {"template": "cluster/etl", "version": 2} and newest["args"][-1] == "v2"
    pinned = canonical_task(dag({"id": "a", "uses": "cluster/etl@1", "inputs": {"partition": "p"}}, templates=[]),
                            cluster_templates=catalog)
    assert pinned["uses"] == {"template": "cluster/etl", "version": 1} and pinned["args"][-1] == "v1"
    assert "cluster template 'etl' has no version 3" in problem(
        dag({"id": "a", "uses": "cluster/etl@3", "inputs": {"partition": "p"}}, templates=[]),
        cluster_templates=catalog)
    # The stored form re-parses without any template: the scheduler needs none.
    spec = parse_dag_spec(dag({"id": "a", "uses": "cluster/etl", "inputs": {"partition": "p"}}, templates=[]),
                          cluster_templates=catalog)
    again = parse_dag_spec(spec.to_canonical(), stored=True)
    assert again.spec_hash() == spec.spec_hash() == parse_dag_spec(spec.to_canonical()).spec_hash()
    # A stored template that a later release refuses is named, with its problem.
    broken = {("etl", None): ClusterTemplate("etl", 4, {**stored, "retries": -1})}
    assert "cluster template 'etl' version 4 is no longer valid: cluster/etl@4.retries" in problem(
        dag({"id": "a", "uses": "cluster/etl", "inputs": {"partition": "p"}}, templates=[]),
        cluster_templates=broken)


def test_cluster_template_bodies_name_their_own_fields() -> None:
    shape = parse_cluster_template({k: v for k, v in ETL.items() if k != "name"}, "etl")
    assert set(shape.inputs) == {"partition", "mode", "n"}
    for body, words in [({"image": "x", "depends_on": []}, "depends_on: is not allowed in a template"),
                        ({"image": "x", "args": ["{{ inputs.q }}"]}, "args[0]: {{ inputs.q }}: the template"),
                        ({"command": ["x"]}, "image: is required"), ([], "must be a mapping")]:
        with pytest.raises(ValidationFailed) as caught:
            parse_cluster_template(body, "etl")
        assert words in str(caught.value)


def test_stored_uses_records_are_checked() -> None:
    base = {"id": "a", "image": "busybox", "command": ["x"]}
    parse_dag_spec(dag({**base, "uses": {"template": "cluster/etl", "version": 3}}, templates=[]))
    for record, words in [({"template": "cluster/etl"}, "tasks[0].uses.version"),
                          ({"template": "etl", "version": 1}, "tasks[0].uses.version"),
                          ({"template": "cluster/etl", "version": True}, "tasks[0].uses.version"),
                          ({"template": "../x"}, "tasks[0].uses.template"),
                          ({"template": "etl", "extra": 1}, "tasks[0].uses.extra: unknown field")]:
        assert words in problem(dag({**base, "uses": record}, templates=[]))
    assert "tasks[0].inputs: only a task that says uses:" in problem(
        dag({**base, "uses": {"template": "etl"}, "inputs": {}}, templates=[]))


def test_cluster_refs_finds_every_mention_in_a_text() -> None:
    text = json.dumps({"tasks": [{"uses": "cluster/etl@4"}, {"uses": "cluster/load"}, {"uses": "etl"}]})
    assert cluster_refs(text) == {("etl", 4), ("load", None)}


_TEXT = st.text(alphabet="{} ab\"", max_size=12)
_REFS = st.sampled_from([Reference("params", "day", text="{{ params.day }}"),
                         Reference("run", "id", text="{{run.id}}")])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_TEXT, _REFS), max_size=8))
def test_written_pieces_parse_back_to_the_same_pieces(pieces: list[Any]) -> None:
    text = written(pieces, "x")
    parsed = parse_template(text, "x")
    got = parsed.pieces if parsed is not None else ((text,) if text else ())
    literal = "".join(p if isinstance(p, str) else "\x00" for p in pieces)
    assert "".join(p if isinstance(p, str) else "\x00" for p in got) == literal
    assert [p.name for p in got if isinstance(p, Reference)] == [p.name for p in pieces if isinstance(p, Reference)]


def test_inputs_reach_the_pod_template_and_list_form_env_and_are_checked_there() -> None:
    side = {"name": "side", "args": ["--for={{ inputs.partition }}"],
            "env": [{"name": "P", "value": "{{ inputs.partition }}!"}]}
    template = {**ETL, "env": [{"name": "PART", "value": "p={{ inputs.partition }}"}],
                "pod_template": {"spec": {"containers": [side]}}}
    task = parse_dag_spec(dag({"id": "a", "uses": "etl", "inputs": {"partition": "{{ params.day }}"}},
                              templates=[template])).tasks[0]
    assert task.templates is not None
    out = render_task(task.templates, task.command, task.args, task.env, task.pod.pod_template, facts())
    assert out.env["PART"] == "p=2026-11-21"
    rendered = out.pod_template["spec"]["containers"][0]
    assert rendered["args"] == ["--for=2026-11-21"] and rendered["env"] == [{"name": "P", "value": "2026-11-21!"}]
    side["args"] = ["{{ inputs.zz }}"]
    assert problem(dag({"id": "a", "uses": "etl", "inputs": {"partition": "x"}}, templates=[template])) \
        .startswith("templates[0].pod_template.spec.containers[0].args[0]: {{ inputs.zz }}: the template declares")


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text("{} ain.pux", max_size=20),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
                         ["name", "inputs", "type", "default", "required", "image", "args", "env", "uses", "p",
                          "value", "pod_template", "spec", "containers", "kind", "template", "version"]), inner,
                         max_size=4), max_leaves=12)
_STRINGS = st.sampled_from(["{{ inputs.p }}", "a{{ inputs.x }}b", "{{ params.day }}", '{{ "{{" }}', "{{", "plain",
                            "{{ inputs }}", "{{{ inputs.p }}}"])
_TEMPLATE = st.fixed_dictionaries({"name": st.sampled_from(["t", "u", "T"]), "image": st.just("busybox")}, optional={
    "inputs": st.dictionaries(st.sampled_from(["p", "x", "1"]), _JSON | st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["string", "integer", "any", "array", "bogus"]), "default": _JSON,
        "required": _JSON})),
    "args": st.lists(_STRINGS | _JSON, max_size=3), "command": st.lists(_STRINGS, max_size=2),
    "env": st.dictionaries(st.sampled_from(["A", "B"]), _STRINGS | _JSON)
    | st.lists(st.fixed_dictionaries({"name": st.just("E"), "value": _STRINGS})),
    "pod_template": _JSON, "kind": st.sampled_from(["container", "empty", 3])})
_TASK = st.fixed_dictionaries({"id": st.just("a")}, optional={
    "uses": st.sampled_from(["t", "u", "cluster/etl", "cluster/etl@1", "cluster/etl@0", 5]) | _JSON,
    "inputs": st.dictionaries(st.sampled_from(["p", "x"]), _STRINGS | _JSON) | _JSON,
    "image": st.just("busybox"), "args": st.lists(_STRINGS, max_size=2), "env": _JSON})


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEMPLATE | _JSON, max_size=3), st.lists(_TASK, min_size=1, max_size=2), _JSON)
def test_any_templates_and_uses_are_a_422_or_a_spec_whose_stored_form_means_the_same(
        templates: list[Any], tasks: list[Any], stored: Any) -> None:
    catalog = {key: ClusterTemplate("etl", 1, stored if isinstance(stored, dict) else {}) for key in
               (("etl", 1), ("etl", None))}
    try:
        spec = parse_dag_spec({"dag_id": "d", "params": PARAMS, "templates": templates, "tasks": tasks},
                              cluster_templates=catalog)
    except ValidationFailed:
        return
    assert parse_dag_spec(spec.to_canonical(), stored=True).spec_hash() == spec.spec_hash()
    assert parse_dag_spec(spec.to_canonical()).spec_hash() == spec.spec_hash()
