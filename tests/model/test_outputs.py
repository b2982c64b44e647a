"""``leoflow.model.outputs``: the task field ``outputs:`` and the one check of what a try wrote.

Every rejection of ADR 0014 decision 1 is here with its reason, and so are the accepted cases; the
spec tests prove a DAG without ``outputs:`` hashes as it did before the field existed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.outputs import (
    READ_AT_MOST,
    CheckedOutputs,
    OutputDecl,
    OutputsRejected,
    check_outputs,
    cut_by_the_pod_budget,
    parse_output_decls,
)
from leoflow.model.spec.dag import parse_dag_spec

ANY = {"a": OutputDecl("any", optional=True)}


def rejected(raw: bytes, declared: dict[str, OutputDecl] | None = None, *, termination_message: bool = False) -> str:
    with pytest.raises(OutputsRejected) as info:
        check_outputs(raw, ANY if declared is None else declared, termination_message=termination_message)
    assert "\n" not in info.value.reason and str(info.value) == info.value.reason
    return info.value.reason


# ------------------------------------------------------------------------------------ accepted


def test_the_issue_example_is_accepted_with_its_size_as_written() -> None:
    raw = b'{"n": 3, "files": ["a","b"]}'
    checked = check_outputs(raw, {"n": OutputDecl("integer"), "files": OutputDecl("array")}, termination_message=True)
    assert checked == CheckedOutputs({"n": 3, "files": ["a", "b"]}, len(raw))


def test_every_type_and_optional_ones() -> None:
    declared = {"s": OutputDecl("string"), "i": OutputDecl("integer"), "f": OutputDecl("number"),
                "b": OutputDecl("boolean"), "l": OutputDecl("array"), "o": OutputDecl("object"),
                "x": OutputDecl("any"), "maybe": OutputDecl("string", optional=True)}
    values = {"s": "é", "i": -2**63, "f": 1.5, "b": False, "l": [], "o": {"k": None}, "x": None}
    raw = json.dumps(values, ensure_ascii=False).encode()
    assert check_outputs(raw, declared, termination_message=False).values == values
    assert check_outputs(b'{"i": 3.0, "f": 2}', {"i": OutputDecl("integer"), "f": OutputDecl("number")},
                         termination_message=False).values == {"i": 3.0, "f": 2}


def test_nothing_written_is_the_empty_object() -> None:
    assert check_outputs(b"", ANY, termination_message=True) == CheckedOutputs({}, 0)
    assert check_outputs(b" \n", ANY, termination_message=False).values == {}
    assert rejected(b"", {"uri": OutputDecl("string")}) == "required output 'uri' is missing"


def test_the_limits_themselves_are_accepted() -> None:
    exactly = b'{"a":"' + b"x" * (limits.OUTPUTS.max_bytes - 8) + b'"}'
    assert len(exactly) == 4_095 and check_outputs(exactly, ANY, termination_message=True).size == 4_095
    deep = b'{"a":' + b"[" * 15 + b"]" * 15 + b"}"
    assert check_outputs(deep, ANY, termination_message=False).values["a"]
    items = b'{"a":[' + b",".join([b"0"] * 999) + b"]}"  # 1 key + 999 items
    assert len(check_outputs(items, ANY, termination_message=False).values["a"]) == 999
    assert check_outputs(b'{"a": "[[[[[[[[[[[[[[[[[[\\"]]"}', ANY, termination_message=False)  # brackets in a string


# ------------------------------------------------------------------------------------ rejected


def test_4_kib_plus_one_byte_and_4_kib_itself() -> None:
    over = b'{"a":"' + b"x" * 4_089 + b'"}'
    assert len(over) == 4_097
    assert rejected(over, termination_message=True) == \
        "outputs are 4,096 bytes or more (Kubernetes keeps only the last 4,096)"
    assert rejected(over[:READ_AT_MOST]) == \
        "outputs are more than 4,096 bytes; at most 4,095 are allowed (pass a URI to larger data)"
    assert rejected(over[1:]) == "outputs are 4,096 bytes; at most 4,095 are allowed (pass a URI to larger data)"
    assert rejected(over[1:], termination_message=True).startswith("outputs are 4,096 bytes or more")


def test_invalid_utf8_nul_and_lone_surrogates() -> None:
    assert rejected(b'{"a": "\xff"}') == "outputs are not valid UTF-8 (byte 7 of 10)"
    assert rejected(b'{"a": "\x00"}') == "outputs must not contain NUL characters"
    assert rejected(b'{"a": "\\u0000"}') == "outputs must not contain NUL characters"
    assert rejected(b'{"\\u0000": 1}', {"\x00": OutputDecl("any")}) == "outputs must not contain NUL characters"
    assert rejected(b'{"a": "\\ud800"}') == "outputs hold a lone surrogate (\\ud800-\\udfff), which is not Unicode"


@pytest.mark.parametrize(("raw", "got"), [
    (b'["a"]', "an array"), (b'"a"', "a string"), (b"3", "an integer"), (b"null", "null"), (b"true", "a boolean"),
])
def test_not_an_object(raw: bytes, got: str) -> None:
    assert rejected(raw) == f"outputs must be a JSON object, got {got}"


def test_not_json() -> None:
    assert rejected(b'{"a": 1') == "outputs are not valid JSON: Expecting ',' delimiter (line 1, column 8)"
    assert rejected(b"uri=s3://x").startswith("outputs are not valid JSON: Expecting value (line 1, column 1)")


def test_ten_thousand_keys_fail_on_size_and_a_thousand_and_one_on_entries() -> None:
    many = json.dumps({f"k{i}": 0 for i in range(10_000)}).encode()
    assert rejected(many) == "outputs are more than 4,096 bytes; at most 4,095 are allowed (pass a URI to larger data)"
    items = b'{"a":[' + b",".join([b"0"] * 1_000) + b"]}"  # 1 key + 1,000 items
    assert len(items) < 4_095 and rejected(items) == "outputs have more than 1,000 keys and items in all"


def test_deep_nesting_is_refused_before_json_recurses() -> None:
    assert rejected(b'{"a":' + b"[" * 16 + b"]" * 16 + b"}") == "outputs are nested more than 16 levels deep"
    assert rejected(b"[" * 4_000) == "outputs are nested more than 16 levels deep"  # no RecursionError


def test_nan_infinity_and_numbers_out_of_range() -> None:
    assert rejected(b'{"a": NaN}') == "outputs must be plain JSON: NaN is not a JSON number"
    assert rejected(b'{"a": -Infinity}') == "outputs must be plain JSON: -Infinity is not a JSON number"
    assert rejected(b'{"a": 1e400}') == "outputs hold the number '1e400', too large for a 64-bit float"
    assert rejected(b'{"a": 9223372036854775808}') == \
        "outputs hold the integer '9223372036854775808', outside 64 bits"
    assert check_outputs(b'{"a": 9223372036854775807}', ANY, termination_message=False).values["a"] == 2**63 - 1


def test_duplicate_key_at_any_depth() -> None:
    assert rejected(b'{"a": 1, "a": 2}') == "outputs have the key 'a' twice"
    assert rejected(b'{"a": {"k": 1, "k": 1}}') == "outputs have the key 'k' twice"


def test_undeclared_missing_and_wrong_types() -> None:
    declared = {"uri": OutputDecl("string"), "rows": OutputDecl("integer", optional=True)}
    assert rejected(b'{"uri": "s3://b", "extra": 1}', declared) == \
        "output 'extra' is not declared (declared: rows, uri)"
    assert rejected(b'{"rows": 3}', declared) == "required output 'uri' is missing"
    assert rejected(b'{"uri": 3}', declared) == "output 'uri' must be a string, got an integer"
    assert rejected(b'{"uri": "x", "rows": 1.5}', declared) == "output 'rows' must be an integer, got a number"
    assert rejected(b'{"uri": "x", "rows": true}', declared) == "output 'rows' must be an integer, got a boolean"
    assert rejected(b'{"o": []}', {"o": OutputDecl("object")}) == "output 'o' must be an object, got an array"
    assert rejected(b'{"n": "1"}', {"n": OutputDecl("number")}) == "output 'n' must be a number, got a string"
    assert rejected(b'{"l": null}', {"l": OutputDecl("array")}) == "output 'l' must be an array, got null"


# ------------------------------------------------------------------------------------ declarations


def spec_with(outputs: Any, **task: Any) -> dict[str, Any]:
    return {"dag_id": "d", "tasks": [{"id": "t", "image": "alpine", "command": ["true"], "outputs": outputs, **task}]}


def problem(outputs: Any, **task: Any) -> tuple[str, str]:
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(spec_with(outputs, **task))
    return info.value.path, info.value.problem


def test_declarations_parse_and_take_part_in_the_canonical_form() -> None:
    spec = parse_dag_spec(spec_with({"uri": {"type": "string"}, "A_1": {"type": "any", "optional": True}}))
    assert spec.tasks[0].outputs == {"uri": OutputDecl("string"), "A_1": OutputDecl("any", optional=True)}
    canonical = spec.to_canonical()["tasks"][0]["outputs"]
    assert list(canonical) == ["A_1", "uri"]
    assert canonical["uri"] == {"type": "string", "optional": False}
    assert parse_dag_spec(spec.to_canonical()) == spec  # the stored form parses back to the same spec
    other = parse_dag_spec(spec_with({"uri": {"type": "string", "optional": True}}))
    assert other.spec_hash() != spec.spec_hash()
    assert parse_dag_spec(spec_with({})).tasks[0].outputs == {}
    assert parse_output_decls(None, "x") == {}


def test_a_spec_without_outputs_hashes_as_before_the_field_existed() -> None:
    # Computed with the code of main at bdce870, before `outputs:` existed: re-applying an old file
    # creates no new version, and no stored version's hash changes.
    spec = parse_dag_spec({
        "dag_id": "etl", "schedule": "0 3 * * *", "timezone": "Europe/Paris", "params": {"type": "object"},
        "tasks": [{"id": "extract", "image": "alpine:3.20", "command": ["sh", "-c", "echo hi"], "retries": 2,
                   "env": {"A": "1"}, "resources": {"requests": {"cpu": "100m"}}, "pool": "etl", "priority": 5},
                  {"id": "load", "image": "alpine:3.20", "command": ["true"], "depends_on": ["extract"],
                   "trigger_rule": "all_done", "timeout_seconds": 60},
                  {"id": "done", "kind": "empty", "depends_on": ["load"]}]})
    assert spec.spec_hash() == "bb56ce5090fc657e67f23c8aab0213cf6e4bb8681e7d21ccf273bd63ce93711f"
    assert all("outputs" not in task for task in spec.to_canonical()["tasks"])
    empty = parse_dag_spec(spec_with({}))
    assert "outputs" not in empty.to_canonical()["tasks"][0]


@pytest.mark.parametrize(("outputs", "path", "words"), [
    ([], "tasks[0].outputs", "must be a mapping of output names to {type, optional}, got a list"),
    ({"1x": {"type": "string"}}, "tasks[0].outputs", "'1x' is not a valid name"),
    ({"a-b": {"type": "string"}}, "tasks[0].outputs", "'a-b' is not a valid name"),
    ({"x" * 65: {"type": "string"}}, "tasks[0].outputs", "is not a valid name"),
    ({"a": "string"}, "tasks[0].outputs.a", "must be a mapping like {type: string}, got a string"),
    ({"a": {}}, "tasks[0].outputs.a.type", "is required: one of string, integer, number"),
    ({"a": {"type": "list"}}, "tasks[0].outputs.a.type", "must be one of string, integer, number, boolean, array, "
                                                         "object, any, got 'list'"),
    ({"a": {"type": 3}}, "tasks[0].outputs.a.type", "got an integer"),
    ({"a": {"type": "any", "optional": "yes"}}, "tasks[0].outputs.a.optional", "must be true or false, got a string"),
    ({"a": {"type": "any", "default": 1}}, "tasks[0].outputs.a.default", "unknown field (allowed: type, optional)"),
    ({f"o{i}": {"type": "any"} for i in range(65)}, "tasks[0].outputs", "declares 65 outputs; at most 64"),
])
def test_bad_declarations_name_the_field(outputs: Any, path: str, words: str) -> None:
    got_path, got_problem = problem(outputs)
    assert (got_path, words in got_problem) == (path, True), got_problem


def test_sixty_four_names_of_sixty_four_characters_are_accepted() -> None:
    names = {f"{i:02d}".join(["_", "x" * 61]): {"type": "any"} for i in range(64)}
    assert all(len(name) == 64 for name in names)
    assert len(parse_dag_spec(spec_with(names)).tasks[0].outputs) == 64


def test_an_empty_task_declares_no_outputs() -> None:
    spec = {"dag_id": "d", "tasks": [{"id": "t", "kind": "empty", "outputs": {"a": {"type": "any"}}}]}
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(spec)
    assert (info.value.path, info.value.problem) == \
        ("tasks[0].outputs", "is not allowed on an empty task (kind: empty)")


def test_a_message_of_exactly_its_share_of_the_pods_budget_may_be_cut() -> None:
    assert cut_by_the_pod_budget(4_095, 1) is None and cut_by_the_pod_budget(4_095, 3) is None  # share >= 4,096
    assert cut_by_the_pod_budget(3_071, 4) is None  # under the share: never cut
    assert cut_by_the_pod_budget(3_072, 4) == (
        "outputs are 3,072 bytes, the share each of the pod's 4 containers keeps once their termination messages "
        "pass 12,288 bytes: the kubelet may have cut them (write less, or less to the other containers' "
        "termination logs)")
