"""Templates in command/args/env: the grammar, the checks at apply, and rendering (ADR 0014 decision 2)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.files.dag_files import DagFile, parse_dag_files
from leoflow.model.spec.dag import DagSpec, parse_dag_spec
from leoflow.model.spec.rendering import RunFacts, Upstream, render, render_task
from leoflow.model.spec.templating import (
    Reference,
    TaskTemplates,
    Templated,
    TemplateUnresolved,
    parse_template,
)

PARAMS = {"type": "object", "properties": {"day": {"type": "string"}, "cfg": {"type": "object"}}}


def task(task_id: str, *deps: str, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["echo"], "depends_on": list(deps), **fields}


def dag(*tasks: dict[str, Any], params: object = PARAMS, **extra: Any) -> dict[str, Any]:
    return {"dag_id": "d", "params": params, "tasks": list(tasks), **extra}


def problems(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationFailed) as caught:
        parse_dag_spec(spec)
    return [str(p) for p in (caught.value, *caught.value.also)]


def parsed(text: str) -> tuple[Any, ...]:
    template = parse_template(text, "x")
    assert template is not None
    return template.pieces


# --------------------------------------------------------------------------- grammar

def test_a_string_without_braces_is_not_a_template() -> None:
    assert parse_template("echo { } }} plain", "x") is None


@pytest.mark.parametrize(("text", "pieces"), [
    ("{{ params.day }}", (Reference("params", "day", text="{{ params.day }}"),)),
    ("--day={{params.day}}!", ("--day=", Reference("params", "day", text="{{params.day}}"), "!")),
    ("{{\tparams.cfg.a[2][\"b.c\"] }}", (Reference("params", "cfg", ("a", 2, "b.c"),
                                                   text="{{\tparams.cfg.a[2][\"b.c\"] }}"),)),
    ("{{ run.id }}/{{ run.logical_date }}", (Reference("run", "id", text="{{ run.id }}"), "/",
                                             Reference("run", "logical_date", text="{{ run.logical_date }}"))),
    ("{{ tasks.load-data.outputs.uri }}", (Reference("tasks", "uri", task="load-data",
                                                     text="{{ tasks.load-data.outputs.uri }}"),)),
    ('{{ tasks["load-data"].outputs.rows[0] }}', (Reference("tasks", "rows", (0,), task="load-data",
                                                            text='{{ tasks["load-data"].outputs.rows[0] }}'),)),
    ('a {{ "{{" }} b }}', ("a {{ b }}",)),
    ('{{"{{"}}{{ params.day }}', ("{{", Reference("params", "day", text="{{ params.day }}"))),
    ("{{{ run.id }}}", ("{", Reference("run", "id", text="{{ run.id }}"), "}")),
    ('{{{{ run.id }}', ("{{", Reference("run", "id", text="{{ run.id }}"))),
])
def test_valid_references(text: str, pieces: tuple[Any, ...]) -> None:
    assert parsed(text) == pieces


@pytest.mark.parametrize(("text", "words"), [
    ("{{ params.day", "no closing }}"),
    ("x {{", "never closed"),
    ("{{ }}", "opens no reference"),
    ("{{ params.day | upper }}", "no filters, calls, operators"),
    ("{{ params.day + 1 }}", "no filters, calls, operators"),
    ("{{ lower(params.day) }}", "got '('"),
    ("{{ params.day if x }}", "got 'i'"),
    ("{{ params }}", "name a parameter"),
    ("{{ params[0] }}", "name a parameter"),
    ("{{ run.failed_count }}", "a run has run.id"),
    ("{{ run.data_interval_begin }}", "run.data_interval_start, run.data_interval_end"),
    ("{{ run }}", "run.id, run.logical_date"),
    ("{{ map_index.k }}", "map_index is a number"),
    ("{{ inputs }}", "name an input of the template"),
    ("{{ inputs.x.y }}", "name an input of the template"),
    ("{{ conf.day }}", "unknown name 'conf'"),
    ("{{ tasks.list.n }}", "name an output"),
    ("{{ tasks.list.outputs }}", "name an output"),
    ('{{ "x" }}', "opens no reference"),
    ("{{ params.day[-1] }}", "got '['"),
])
def test_invalid_references_are_errors_never_literals(text: str, words: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_template(text, "tasks[0].args[1]")
    assert caught.value.path == "tasks[0].args[1]"
    assert words in caught.value.problem


def test_at_most_64_references_per_string() -> None:
    assert len(parsed("{{ run.id }}" * 64)) == 64
    with pytest.raises(ValidationFailed, match="more than 64 references"):
        parse_template("{{ run.id }}" * 65, "x")
    assert limits.TEMPLATE_REFS.maximum == 64


# --------------------------------------------------------------------------- checks at apply

def test_a_dag_with_references_applies_and_flags_only_its_templated_tasks() -> None:
    spec = parse_dag_spec(dag(
        task("list", outputs={"n": {"type": "integer"}, "parts": {"type": "array"}}),
        task("mid", "list"),
        task("use", "mid", args=["{{ tasks.list.outputs.parts[0] }}", "{{ params.day }}", "{{ run.id }}"],
             env={"N": "{{ tasks.list.outputs.n }}", "PLAIN": "x"}),
    ))
    plain, _, templated = spec.tasks
    assert not plain.has_references and plain.templates is None
    assert templated.has_references and templated.templates is not None
    assert templated.templates.upstream == {"list"}
    assert [s.where for s in templated.templates.strings] == ["tasks[2].args[0]", "tasks[2].args[1]",
                                                              "tasks[2].args[2]", "tasks[2].env.N"]
    # The stored form keeps what was written; re-validating it (the scheduler) gives the same templates.
    again = parse_dag_spec(spec.to_canonical())
    assert again.tasks[2].templates == templated.templates
    assert again.spec_hash() == spec.spec_hash()


def test_every_reference_problem_of_a_document_at_once_with_its_path() -> None:
    found = problems(dag(
        task("list", outputs={"n": {"type": "integer"}}),
        task("use", "list", command=["echo", "{{ params.dya }}", "{{ tasks.list.outputs.m }}"],
             args=["{{ tasks.later.outputs.n }}", "{{ tasks.ghost.outputs.n }}", "{{ tasks.use.outputs.n }}",
                   "{{ tasks.side.outputs.n }}", "{{ nope }}"]),
        task("later", "use", outputs={"n": {"type": "integer"}}),
        task("side", outputs={"n": {"type": "integer"}}),
    ))
    assert found == [
        "tasks[1].args[4]: \"{{ nope }}\" at character 1: unknown name 'nope'; a reference is params.NAME, run.id, "
        "run.logical_date, tasks.TASK.outputs.NAME or, in a mapped task, item and map_index (then .KEY or [INDEX]); "
        "{{ \"{{\" }} writes a literal {{",
        "tasks[1].command[1]: {{ params.dya }}: parameter 'dya' is not declared in params.properties",
        "tasks[1].command[2]: {{ tasks.list.outputs.m }}: task 'list' declares no output 'm' (its outputs: n)",
        "tasks[1].args[0]: {{ tasks.later.outputs.n }}: task 'later' is downstream of 'use': only an upstream "
        "task (one it depends on, directly or through others) has finished when this one runs",
        "tasks[1].args[1]: {{ tasks.ghost.outputs.n }}: unknown task 'ghost'",
        "tasks[1].args[2]: {{ tasks.use.outputs.n }}: a task cannot read its own outputs ('use')",
        "tasks[1].args[3]: {{ tasks.side.outputs.n }}: task 'side' is not upstream of 'use': only an upstream "
        "task (one it depends on, directly or through others) has finished when this one runs",
    ]


def test_params_must_be_declared_in_the_schema() -> None:
    assert problems(dag(task("t", args=["{{ params.day }}"]), params=None)) == [
        "tasks[0].args[0]: {{ params.day }}: parameter 'day' is not declared: the DAG has no params schema "
        "with properties (declare it under params.properties)"]


def test_ancestors_are_transitive_and_cheap_on_a_long_chain() -> None:
    chain = [task("t0", outputs={"v": {"type": "string"}})]
    chain += [task(f"t{i}", f"t{i - 1}", args=["{{ tasks.t0.outputs.v }}"]) for i in range(1, 3000)]
    spec = parse_dag_spec(dag(*chain))
    assert all(t.has_references for t in spec.tasks[1:])


def test_env_and_pod_template_paths_name_where_the_string_was_written() -> None:
    found = problems(dag(
        task("t", env=[{"name": "A", "value": "{{ params.nope }}"}],
             pod_template={"spec": {"containers": [{"name": "side", "args": ["ok", "{{ run.nope }}"],
                                                    "env": [{"name": "B", "value": "{{ params.bad }}"}]}]}}),
        defaults={"env": {"D": "{{ params.nodef }}"}},
    ))
    assert sorted(found) == sorted([
        "defaults.env.D: {{ params.nodef }}: parameter 'nodef' is not declared in params.properties",
        "tasks[0].env[0].value: {{ params.nope }}: parameter 'nope' is not declared in params.properties",
        "tasks[0].pod_template.spec.containers[0].args[1]: \"{{ run.nope }}\" at character 1: a run has run.id, "
        "run.logical_date, run.data_interval_start, run.data_interval_end, run.triggering_events, and in exit "
        "tasks run.state, run.reason and run.failed_tasks",
        "tasks[0].pod_template.spec.containers[0].env[0].value: {{ params.bad }}: parameter 'bad' is not "
        "declared in params.properties",
    ])


def test_a_defaults_string_inherited_by_many_tasks_is_reported_once() -> None:
    assert problems(dag(*[task(f"t{i}") for i in range(5)], defaults={"env": {"D": "{{ params.nope }}"}})) == [
        "defaults.env.D: {{ params.nope }}: parameter 'nope' is not declared in params.properties"]


def test_a_file_error_has_line_and_column() -> None:
    text = ("dag_id: d\n"
            "params: {type: object, properties: {day: {type: string}}}\n"
            "tasks:\n"
            "  - id: t\n"
            "    image: busybox\n"
            "    command: [echo]\n"
            "    args: [ok, '{{ params.dya }}']\n")
    result = parse_dag_files([DagFile("etl.yaml", text)])
    assert [str(e) for e in result.errors] == [
        "etl.yaml:7:16: tasks[0].args[1]: {{ params.dya }}: parameter 'dya' is not declared in params.properties"]


def test_an_empty_task_has_no_outputs_to_read() -> None:
    assert problems(dag(task("gate", kind="empty", image=None, command=None),
                        task("t", "gate", args=["{{ tasks.gate.outputs.x }}"]))) == [
        "tasks[1].args[0]: {{ tasks.gate.outputs.x }}: task 'gate' declares no output 'x' (its outputs: none)"]


# --------------------------------------------------------------------------- rendering

def facts(**upstream: Upstream) -> RunFacts:
    return RunFacts(params={"day": "2026-11-21", "cfg": {"a": [1, {"b": None}]}, "token": "{{ params.day }}"},
                    run_id="manual__1", logical_date="2026-11-21T00:00:00+00:00", upstream=upstream)


def one(text: str, f: RunFacts | None = None) -> str:
    template = parse_template(text, "args[0]")
    assert template is not None
    return render(template, f or facts(), "args[0]")


def test_one_reference_becomes_one_string_json_when_not_a_string() -> None:
    out = facts(list=Upstream("success", {"n": 3, "parts": ["a", "b"], "o": {"z": 1, "a": [True, None]}}))
    assert one("{{ params.day }}") == "2026-11-21"
    assert one("--day={{ params.day }};{{ run.id }}@{{ run.logical_date }}") == \
        "--day=2026-11-21;manual__1@2026-11-21T00:00:00+00:00"
    assert one("{{ params.cfg }}") == '{"a":[1,{"b":null}]}'
    assert one("{{ params.cfg.a[1].b }}") == "null"
    assert one("{{ tasks.list.outputs.n }}", out) == "3"
    assert one("{{ tasks.list.outputs.parts }}", out) == '["a","b"]'
    assert one("{{ tasks.list.outputs.o }}", out) == '{"a":[true,null],"z":1}'
    assert one('{{ "{{" }} run.id }}') == "{{ run.id }}"


def test_rendered_values_are_never_scanned_again() -> None:
    hostile = "{{ params.day }} $(rm -rf /) `x` ; '\" {{"
    out = facts(list=Upstream("success", {"s": hostile}))
    assert one("{{ tasks.list.outputs.s }}", out) == hostile
    assert one("{{ params.token }}") == "{{ params.day }}"  # a `{{` in a param value stays literal


@pytest.mark.parametrize(("text", "upstream", "reason"), [
    ("{{ tasks.list.outputs.x }}", Upstream("success", {"n": 1}),
     "args[0]: {{ tasks.list.outputs.x }}: task 'list' has no output 'x'"),
    ("{{ tasks.list.outputs.n }}", Upstream("skipped"), "args[0]: {{ tasks.list.outputs.n }}: task 'list' was skipped"),
    ("{{ tasks.list.outputs.n[0] }}", Upstream("success", {"n": 1}), "tasks.list.outputs.n is not a list"),
    ("{{ tasks.list.outputs.n[3] }}", Upstream("success", {"n": [1]}), "tasks.list.outputs.n has 1 items (no [3])"),
    ("{{ tasks.list.outputs.n.k }}", Upstream("success", {"n": {}}), "tasks.list.outputs.n has no key 'k'"),
    ("{{ params.missing }}", None, "the run's conf has no parameter 'missing'"),
])
def test_what_cannot_be_resolved_fails_the_try_with_a_reason(text: str, upstream: Upstream | None,
                                                             reason: str) -> None:
    with pytest.raises(TemplateUnresolved) as caught:
        one(text, facts(**({"list": upstream} if upstream else {})))
    assert reason in str(caught.value)


def test_sizes_are_checked_once_rendered() -> None:
    big = "x" * (limits.RENDERED_ARG.maximum + 1)
    with pytest.raises(TemplateUnresolved, match="rendered to 131,072 bytes"):
        one("{{ tasks.list.outputs.s }}", facts(list=Upstream("success", {"s": big})))
    spec = _spec(args=[f"{{{{ tasks.list.outputs.s }}}}{i}" for i in range(3)])
    t = spec.tasks[1]
    assert t.templates is not None
    half = "y" * 30_000
    with pytest.raises(TemplateUnresolved, match=r"args: .*once rendered"):
        render_task(t.templates, t.command, t.args, t.env, t.pod.pod_template,
                    facts(list=Upstream("success", {"s": half})))


def _spec(**fields: Any) -> DagSpec:
    return parse_dag_spec(dag(task("list", outputs={"s": {"type": "string"}, "n": {"type": "integer"}}),
                              task("t", "list", **fields)))


def test_render_task_writes_every_templated_place_and_leaves_the_spec_alone() -> None:
    spec = _spec(command=["run", "{{ params.day }}"], args=["{{ tasks.list.outputs.n }}", "plain"],
                 env={"A": "{{ run.id }}", "B": "b"},
                 pod_template={"spec": {"containers": [{"name": "side", "args": ["{{ params.day }}"],
                                                        "env": [{"name": "C", "value": "{{ run.id }}"}]}]}})
    t = spec.tasks[1]
    assert t.templates is not None
    before = json.dumps(t.pod.pod_template, sort_keys=True)
    out = render_task(t.templates, t.command, t.args, t.env, t.pod.pod_template,
                      facts(list=Upstream("success", {"n": 7})))
    assert out.command == ("run", "2026-11-21")
    assert out.args == ("7", "plain")
    assert out.env == {"A": "manual__1", "B": "b"}
    side = out.pod_template["spec"]["containers"][0]
    assert side["args"] == ["2026-11-21"] and side["env"] == [{"name": "C", "value": "manual__1"}]
    assert json.dumps(t.pod.pod_template, sort_keys=True) == before
    again = render_task(t.templates, t.command, t.args, t.env, t.pod.pod_template,
                        facts(list=Upstream("success", {"n": 7})))
    assert again == out  # a failover renders the same argv


# --------------------------------------------------------------------------- properties

_TEXT = st.lists(st.sampled_from(["{", "}", "{{", "}}", " ", "a", "params.day", "run.id", '"', "\\", "é", "\x01"]),
                max_size=12).map("".join)
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _TEXT,
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
                     max_leaves=12)


@given(prefix=_TEXT, value=_JSON, suffix=_TEXT)
@settings(max_examples=300, deadline=None)
def test_a_value_is_inserted_as_text_and_never_scanned_again(prefix: str, value: Any, suffix: str) -> None:
    escaped = [p.replace("{{", '{{ "{{" }}') for p in (prefix, suffix)]
    for name, got in (("params", {"x": value}), ("tasks", None)):
        text = (f"{escaped[0]}{{{{ params.x }}}}{escaped[1]}" if name == "params"
                else f"{escaped[0]}{{{{ tasks.up.outputs.x }}}}{escaped[1]}")
        run = RunFacts(params=got or {}, run_id="r", logical_date="",
                       upstream={"up": Upstream("success", {"x": value})})
        shown = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), sort_keys=True,
                                                                 ensure_ascii=False)
        assert one(text, run) == prefix + shown + suffix


@given(_TEXT)
@settings(max_examples=300, deadline=None)
def test_escaped_literal_text_renders_back_to_itself(text: str) -> None:
    escaped = text.replace("{{", '{{ "{{" }}')
    template = parse_template(escaped, "x")
    assert (escaped if template is None else render(template, facts(), "x")) == text


# --------------------------------------------------------------------------- versions stored before templates

def test_a_version_stored_before_templates_keeps_its_braces_as_text() -> None:
    old = {"dag_id": "d", "tasks": [task("t", command=["docker", "inspect", "-f", "{{.Id}}", "{{ run.id }}"])]}
    with pytest.raises(ValidationFailed, match="opens no reference"):
        parse_dag_spec(old)  # applied today: a 422 until it is written with {{ "{{" }}
    stored = parse_dag_spec(old, stored=True)  # the scheduler compiling what an older release stored
    assert stored.tasks[0].templates is None and stored.tasks[0].command[3:] == ("{{.Id}}", "{{ run.id }}")
    assert "template_syntax" not in stored.to_canonical()


def test_a_version_with_templates_is_marked_and_compiles_as_it_was_applied() -> None:
    applied = parse_dag_spec(dag(task("t", args=["{{ params.day }}"])))
    canonical = applied.to_canonical()
    assert canonical["template_syntax"] == 1
    assert parse_dag_spec(canonical, stored=True).tasks[0].templates == applied.tasks[0].templates
    plain = parse_dag_spec(dag(task("t", args=["x"]), template_syntax=1))
    assert "template_syntax" not in plain.to_canonical()  # no templates, no mark: hashes as before
    assert plain.spec_hash() == parse_dag_spec(dag(task("t", args=["x"]))).spec_hash()
    assert problems(dag(task("t"), template_syntax=2)) == [
        "template_syntax: must be 1 (the template syntax of this release), or left out"]


def test_a_syntax_problem_never_renders_as_text() -> None:
    spec = parse_dag_spec(dag(task("t", args=["x"])))
    broken = parse_template("{{ run.id }}", "x")
    assert broken is not None
    templates = TaskTemplates((Templated("tasks[0].args[0]", "args", (0,), broken),),
                              (ValidationFailed("tasks[0].args[1]", "bad"),))
    with pytest.raises(TemplateUnresolved, match=r"tasks\[0\].args\[1\]: bad"):
        render_task(templates, spec.tasks[0].command, ["a", "{{ x"], {}, {}, facts())
