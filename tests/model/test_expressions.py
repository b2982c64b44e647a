"""``when:`` conditions (leoflow.model.spec.expressions): the static bounds, names and paths checked
at apply, the column of a syntax error, and the one-line failures of evaluation.

The semantics of the CEL library over our expression shapes are pinned apart, in
``test_cel_conformance.py``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.outputs import OutputDecl
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.expressions import (
    Condition,
    WhenFailed,
    activation,
    check_activation_size,
    compile_when,
    evaluate_when,
)

PARAMS = {"type": "object", "properties": {"day": {"type": "string"}, "n": {"type": "integer"}}}
ANCESTORS = {"list": {"partitions": OutputDecl("array")}, "load-data": {"rows": OutputDecl("integer")},
             "plain": {}}


def compiled(source: str) -> Condition:
    return compile_when(source, "tasks[3].when", params=PARAMS, ancestors=ANCESTORS)


def refused(source: object) -> str:
    with pytest.raises(ValidationFailed) as info:
        compile_when(source, "tasks[3].when", params=PARAMS, ancestors=ANCESTORS)
    assert info.value.path == "tasks[3].when"
    assert "\n" not in info.value.problem
    return info.value.problem


#: Params without a type: the dry run at apply has no sample for them, so only evaluation judges.
UNTYPED = {"type": "object", "properties": {"day": {}, "n": {}}}


def failure(source: str, variables: dict[str, Any]) -> str:
    condition = compile_when(source, "tasks[3].when", params=UNTYPED, ancestors=ANCESTORS)
    with pytest.raises(WhenFailed) as info:
        evaluate_when(condition, variables)
    message = str(info.value)
    assert "\n" not in message
    return message


VARIABLES = activation({"day": "2026-11-29", "n": 3}, "manual__1", datetime(2026, 11, 29, tzinfo=UTC),
                       {"list": {"partitions": ["p0", "p1"]}})


# ------------------------------------------------------------------------------------ accepted


def test_the_adr_example_compiles_and_names_the_tasks_it_reads() -> None:
    condition = compiled('size(tasks.list.outputs.partitions) > 0 && params.day != "2026-12-25"')
    assert condition.tasks == frozenset({"list"})
    assert evaluate_when(condition, VARIABLES) is True
    assert compiled('params.day == "2026-11-29"').tasks == frozenset()


def test_ids_with_dashes_are_read_by_index_and_macros_bind_their_variables() -> None:
    assert compiled('tasks["load-data"].outputs.rows > 0').tasks == frozenset({"load-data"})
    assert compiled("tasks.list.outputs.partitions.exists(p, p == 'p1')").tasks == frozenset({"list"})
    assert evaluate_when(compiled("tasks.list.outputs.partitions.exists(p, p == 'p1')"), VARIABLES) is True


def test_run_fields_and_has_on_an_optional_param() -> None:
    assert evaluate_when(compiled("run.id.startsWith('manual') && run.logical_date.getDayOfWeek() == 0"),
                         VARIABLES) is True
    assert evaluate_when(compiled("has(params.n) && !has(params.day) || true"), VARIABLES) is True


def test_four_sequential_macros_are_allowed() -> None:
    clause = "tasks.list.outputs.partitions.all(p, p != '')"
    compiled(" && ".join([clause] * 4))


def test_text_in_string_literals_is_not_scanned() -> None:
    condition = compiled("params.day != '[1].map(x, x) tasks.nope.outputs' && params.day != \"x.filter(\"")
    assert evaluate_when(condition, VARIABLES) is True


# ------------------------------------------------------------------------------------ refused at apply


def test_bounds_length_and_type() -> None:
    assert refused("true || " * 200 + "true") == (
        f"must be at most {limits.WHEN.maximum:,} characters, got {len('true || ' * 200 + 'true'):,}")
    assert refused(True) == "must be a CEL expression (a string), got a boolean"
    assert refused("  ") == "must not be empty"


def test_two_thousand_parentheses_are_refused_quickly() -> None:
    start = time.perf_counter()
    problem = refused("(" * 2000 + "true" + ")" * 2000)
    assert time.perf_counter() - start < 0.05
    assert problem.startswith("must be at most 1,024 characters")
    # Within the length, the parser's own nesting limit answers with a column, never a RecursionError.
    assert refused("(" * 500 + "true" + ")" * 500).startswith("syntax error at line 1, column")


def test_syntax_errors_name_the_line_and_column() -> None:
    assert refused("params.day ==").startswith("syntax error at line 1, column 14: mismatched input '<EOF>'")
    assert refused("params.day == 'x' &&\n  (params.n >").startswith("syntax error at line 2, column 14")


def test_map_and_filter_are_refused_with_a_reason() -> None:
    assert "map() is quadratic" in refused("tasks.list.outputs.partitions.map(p, p).size() > 0")
    assert "filter() is quadratic" in refused("size(tasks.list.outputs.partitions.filter(p, p == 'a')) > 0")


def test_nested_and_too_many_macros_are_refused() -> None:
    assert refused("tasks.list.outputs.partitions.exists(p, [1, 2].all(x, x > 0))").startswith(
        "all() inside another macro")
    five = " && ".join(["tasks.list.outputs.partitions.all(p, p != '')"] * 5)
    assert refused(five) == "has more than 4 macros (all, exists, exists_one)"
    assert refused("[1].exists(params, true)") == "exists() may not bind the name 'params'"


def test_names_and_paths_are_checked() -> None:
    assert refused("x > 1") == "unknown name 'x': a condition reads params, run and tasks"
    assert refused("params.nope == 1") == "unknown param 'nope' (not in params.properties)"
    assert refused("run.state == 'x'") == ("run has id, logical_date, data_interval_start, data_interval_end, "
                                           "not 'state'")
    assert refused("tasks.other.outputs.x == 1").startswith("task 'other' is not upstream of this task")
    assert refused("tasks.plain.outputs.x == 1") == "task 'plain' declares no outputs"
    assert refused("tasks.list.outputs.nope == 1") == "task 'list' declares no output 'nope' (it declares partitions)"
    assert refused("tasks.list.state == 'x'").startswith("only the outputs of task 'list' can be read")
    assert refused("tasks[params.day].outputs.x").startswith("tasks must be followed by a task id")
    assert refused("foo(params.n)") == "unknown function 'foo'"
    with pytest.raises(ValidationFailed, match="the DAG declares no params"):
        compile_when("params.day == 'x'", "w", params=None, ancestors={})


def test_the_spec_checks_ancestors_and_keeps_hashes_of_specs_without_when() -> None:
    def spec(when: str, **extra: Any) -> dict[str, Any]:
        return {"dag_id": "d", "params": PARAMS, "tasks": [
            {"id": "a", "image": "x", "command": ["true"], "outputs": {"n": {"type": "integer"}}},
            {"id": "b", "image": "x", "command": ["true"], "depends_on": ["a"], "when": when, **extra},
            {"id": "c", "image": "x", "command": ["true"]}]}
    parsed = parse_dag_spec(spec("tasks.a.outputs.n > 1"))
    assert parsed.tasks[1].when is not None and parsed.tasks[1].when.tasks == frozenset({"a"})
    assert parsed.to_canonical()["tasks"][1]["when"] == "tasks.a.outputs.n > 1"
    assert parse_dag_spec(parsed.to_canonical()) == parsed
    assert parse_dag_spec(parsed.to_canonical()).spec_hash() == parsed.spec_hash()
    assert "when" not in parsed.to_canonical()["tasks"][0]
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec({**spec("true"), "tasks": [*spec("true")["tasks"][:2],
                                                  {"id": "c", "image": "x", "command": ["true"],
                                                   "when": "tasks.a.outputs.n > 1"}]})
    assert info.value.path == "tasks[2].when" and "not upstream" in info.value.problem


# ------------------------------------------------------------------------------------ evaluation


def test_a_dry_run_over_the_declared_types_refuses_type_errors_and_non_booleans() -> None:
    assert refused("params.day") == "must be a boolean expression, got a string"
    assert refused("tasks.list.outputs.partitions").startswith("must be a boolean expression, got a list")
    assert refused("params.day + 1 == 2").startswith(
        "type error with values of the declared types: Unsupported operation: string + int")
    # Not judged: the branch not taken, a missing key or index of the empty samples, an untyped value.
    compiled("params.n >= 0 || params.day + 1 == 2")
    compiled("tasks.list.outputs.partitions[0] == 'p0'")
    compile_when("params.day + 1 == 2", "w", params=UNTYPED, ancestors={})
    with_default = {"type": "object", "properties": {"n": {"type": "integer", "default": 5}}}
    with pytest.raises(ValidationFailed, match="got an int"):
        compile_when("params.n", "w", params=with_default, ancestors={})


def test_false_true_and_non_boolean_results() -> None:
    assert evaluate_when(compiled("params.n > 5"), VARIABLES) is False
    assert failure("params.day", VARIABLES) == "when must be a boolean, got a string"
    assert failure("params.n", VARIABLES) == "when must be a boolean, got an int"


def test_missing_keys_and_type_errors_fail_with_one_line() -> None:
    assert failure("tasks.list.outputs.partitions[0] == 'p0'",
                   activation({}, "r", None, {"list": {}})) == "when failed: no such key: 'partitions'"
    assert failure("params.n + params.day == 'x'", VARIABLES).startswith("when failed: No such overload")
    assert failure("params.day + 1 == 'x'", VARIABLES).startswith("when failed: Unsupported operation: string + int")
    assert failure("tasks.list.outputs.partitions[5] == 'x'", VARIABLES) == "when failed: index out of bounds: 5"


def test_the_activation_is_bounded() -> None:
    check_activation_size(limits.WHEN_ACTIVATION.maximum)
    with pytest.raises(WhenFailed, match=r"the values it reads are 262,145 bytes, over the 262,144-byte limit"):
        check_activation_size(limits.WHEN_ACTIVATION.maximum + 1)


def test_the_worst_allowed_expression_evaluates_quickly() -> None:
    items = [f"p{i}" for i in range(10_000)]
    clause = "tasks.list.outputs.partitions.all(p, p != 'x')"
    condition = compiled(" && ".join([clause] * 4))
    start = time.perf_counter()
    assert evaluate_when(condition, activation({}, "r", None, {"list": {"partitions": items}})) is True
    assert time.perf_counter() - start < 1.0  # 4 x 10,000 items: ~0.1 s measured, with CI headroom


def test_specs_without_the_new_fields_keep_their_hash() -> None:
    # The hash computed with the code of main at bdce870, before when, skip_on_exit_code and an
    # optional command existed (tests/model/test_outputs.py pins the same spec).
    spec = parse_dag_spec({
        "dag_id": "etl", "schedule": "0 3 * * *", "timezone": "Europe/Paris", "params": {"type": "object"},
        "tasks": [{"id": "extract", "image": "alpine:3.20", "command": ["sh", "-c", "echo hi"], "retries": 2,
                   "env": {"A": "1"}, "resources": {"requests": {"cpu": "100m"}}, "pool": "etl", "priority": 5},
                  {"id": "load", "image": "alpine:3.20", "command": ["true"], "depends_on": ["extract"],
                   "trigger_rule": "all_done", "timeout_seconds": 60},
                  {"id": "done", "kind": "empty", "depends_on": ["load"]}]})
    assert spec.spec_hash() == "bb56ce5090fc657e67f23c8aab0213cf6e4bb8681e7d21ccf273bd63ce93711f"
    for task in spec.to_canonical()["tasks"]:
        assert "when" not in task and "skip_on_exit_code" not in task


def test_skip_on_exit_code_is_bounded() -> None:
    def task(codes: object) -> dict[str, Any]:
        return {"dag_id": "d", "tasks": [{"id": "a", "image": "x", "command": ["true"], "skip_on_exit_code": codes}]}
    assert parse_dag_spec(task([99, 3])).tasks[0].skip_on_exit_code == (99, 3)
    assert parse_dag_spec(task([99, 3])).to_canonical()["tasks"][0]["skip_on_exit_code"] == [3, 99]
    for codes, path, problem in [
            (99, "tasks[0].skip_on_exit_code", "must be a list of exit codes, got an integer"),
            ([256], "tasks[0].skip_on_exit_code[0]", "must be an exit code, an integer from 0 to 255, got 256"),
            ([True], "tasks[0].skip_on_exit_code[0]", "must be an exit code, an integer from 0 to 255, got True"),
            ([1, 1], "tasks[0].skip_on_exit_code[1]", "duplicate exit code 1"),
            (list(range(33)), "tasks[0].skip_on_exit_code", "33")]:
        with pytest.raises(ValidationFailed) as info:
            parse_dag_spec(task(codes))
        assert info.value.path == path and problem in info.value.problem
    with pytest.raises(ValidationFailed, match="empty task"):
        parse_dag_spec({"dag_id": "d", "tasks": [{"id": "a", "kind": "empty", "skip_on_exit_code": [1]}]})


class PanicException(BaseException):
    """What PyO3 raises for a Rust panic: a BaseException, which ``except Exception`` does not catch."""


class _Raising:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def execute(self, variables: object) -> object:
        raise self.error


def test_a_panic_of_the_library_fails_the_condition_and_nothing_else_is_swallowed() -> None:
    with pytest.raises(WhenFailed, match=r"^when failed: the CEL library panicked: index out of range$"):
        evaluate_when(Condition("true", program=_Raising(PanicException("index out of range"))), {})
    with pytest.raises(KeyboardInterrupt):
        evaluate_when(Condition("true", program=_Raising(KeyboardInterrupt())), {})


@pytest.mark.parametrize("task_id", [{}, [], 1, None, True])
@pytest.mark.parametrize("where", ["tasks", "on_exit"])
def test_a_task_whose_id_is_not_a_string_is_one_clear_problem_even_with_a_when(task_id: object, where: str) -> None:
    """Schemathesis sent ``id: {}`` beside ``when: '0'``: the conditions' pass looked the id up in a dict (500)."""
    spec: dict[str, object] = {"dag_id": "d", "tasks": [{"id": "a", "kind": "empty"}]}
    odd = {"id": task_id, "kind": "empty", "when": "0"}
    if where == "tasks":
        spec["tasks"] = [{"id": "a", "kind": "empty"}, odd]
    else:
        spec["on_exit"] = [odd]
    with pytest.raises(ValidationFailed) as refused:
        parse_dag_spec(spec)
    assert f"{where}[" in str(refused.value)


def test_a_dag_without_conditions_never_loads_the_cel_library() -> None:
    """The native CEL engine costs a replica 12 MB and ~0.25 s of import: only a spec that has a
    ``when`` (or a ``retry_policy.when``) loads it."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from leoflow.model.spec.dag import parse_dag_spec\n"
            "import leoflow.replica, leoflow.api.app, leoflow.scheduler.core\n"
            "parse_dag_spec({'dag_id': 'd', 'tasks': [{'id': 'a', 'image': 'x', 'command': ['true']}]})\n"
            "assert 'cel' not in sys.modules, 'loaded without a condition'\n"
            "parse_dag_spec({'dag_id': 'd', 'tasks': [{'id': 'a', 'image': 'x', 'command': ['true'], "
            "'when': 'true'}]})\n"
            "assert 'cel' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_the_data_interval_reads_as_timestamps_and_defaults_to_the_logical_date() -> None:
    """``run.data_interval_start/end``: CEL timestamps; a run stored without one reads its logical date."""
    six, noon = datetime(2026, 3, 1, 6, tzinfo=UTC), datetime(2026, 3, 1, 12, tzinfo=UTC)
    six_hours = compiled("run.data_interval_end - run.data_interval_start == duration('6h') "
                         "&& run.data_interval_start.getHours() == 6")
    assert evaluate_when(six_hours, activation({}, "s", noon, {}, data_interval_start=six, data_interval_end=noon))
    assert not evaluate_when(six_hours, activation({}, "m", noon, {}))  # both ends at the logical date
    assert "type error" in refused("run.data_interval_start > 3")  # a timestamp, not a number
