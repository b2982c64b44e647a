"""DAG files as documents: every problem located (file, document, path, line, column), no input can blow up."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leoflow.errors import ValidationFailed
from leoflow.model.files.dag_files import DagFile, parse_dag_files
from leoflow.model.files.documents import DocumentError, Location, describe, load_documents
from leoflow.model.limits import DOCUMENT
from leoflow.model.source_labels import source_label

ETL = """\
dag_id: etl
tasks:
  - id: extract
    image: python:3.12-slim
    command: ["true"]
    resources: {limits: {nvidia.com/gpu: "1"}}
  - id: load
    image: python:3.12-slim
    command: ["true"]
    depends_on: [extrct]
"""


def error_of(name: str, text: str) -> DocumentError:
    with pytest.raises(DocumentError) as caught:
        load_documents(name, text)
    return caught.value


def test_validation_paths_map_back_to_line_and_column() -> None:
    (doc,) = load_documents("etl.yaml", ETL)
    assert doc.locate("tasks[1].depends_on[0]") == Location(10, 18)
    assert doc.locate("tasks[0].resources.limits.nvidia.com/gpu") == Location(6, 26)  # a key with dots
    assert doc.locate("tasks[1].image") == Location(8, 5)  # a key: where the key is
    assert doc.locate("tasks[1].timeout_seconds") == Location(7, 5)  # missing: the mapping that lacks it
    assert doc.locate("tasks[7]") == Location(3, 3)  # no such task: the list
    assert doc.locate("") == Location(1, 1)


def test_several_documents_keep_their_index_and_empty_ones_are_skipped() -> None:
    docs = load_documents("two.yaml", "dag_id: a\n---\n---\n# only a comment\n---\ndag_id: b\n")
    assert [(d.index, d.data) for d in docs] == [(0, {"dag_id": "a"}), (3, {"dag_id": "b"})]
    assert docs[1].start == Location(6, 1)


@pytest.mark.parametrize(("text", "where", "problem"), [
    ("dag_id: [unclosed\n", (2, 1), "did not find expected ',' or ']'"),
    ("dag_id: a\n  b: c: d\n", (2, 4), "mapping values are not allowed"),
    ("a: 1\nb: 2\na: 3\n", (3, 1), "duplicate key 'a'"),
    ("a: *nowhere\n", (1, 4), "alias *nowhere names no anchor"),
    ("ok: 1\nbad: \x07\n", (2, 6), "character U+0007 is not allowed"),
    ("a: !!python/object:os.system echo\n", (1, 4), "could not determine a constructor"),
    ("\t- a\n", (1, 1), "cannot start any token"),
])
def test_yaml_errors_carry_line_and_column(text: str, where: tuple[int, int], problem: str) -> None:
    error = error_of("f.yaml", text)
    assert error.location == Location(*where), str(error)
    assert problem in error.problem and str(error).startswith(f"f.yaml:{where[0]}:{where[1]}: invalid YAML: ")


def test_json_files_are_json_with_line_and_column() -> None:
    assert load_documents("etl.json", '{"dag_id": "etl", "n": 1e3}')[0].data == {"dag_id": "etl", "n": 1000.0}
    error = error_of("etl.json", '{"dag_id": "etl",\n "tasks": }')
    assert (error.location, error.problem) == (Location(2, 11), "invalid JSON: Expecting value")
    assert "NaN" in error_of("etl.json", '{"a": NaN}').problem
    assert "nested more than 64 levels deep" in error_of("deep.json", "[" * 100_000).problem
    assert "nested more than 64 levels deep" in error_of("deep.json", "[" * 65 + "]" * 65).problem


def test_nesting_and_alias_bombs_are_refused_quickly_at_a_budget() -> None:
    deep = error_of("deep.yaml", "[" * 200_000 + "]" * 200_000)  # the C loader would crash the process
    assert f"nested more than {DOCUMENT.max_depth} levels deep" in deep.problem
    # Nine levels of ten aliases each: 10^9 values from under 400 bytes.
    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
    started = time.monotonic()
    error = error_of("bomb.yaml", bomb)
    assert f"more than {DOCUMENT.max_values:,} values" in error.problem and error.location is not None
    assert time.monotonic() - started < 10  # stops at the budget instead of expanding (generous: loaded CI)
    # Aliases within the budget are fine (YAML anchors are a legitimate way to share env blocks).
    (doc,) = load_documents("ok.yaml", "base: &env {A: '1'}\nt1: {env: *env}\nt2: {env: *env}\n")
    assert doc.data == {"base": {"A": "1"}, "t1": {"env": {"A": "1"}}, "t2": {"env": {"A": "1"}}}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*"ab:-[]{},&*!|>'\"#\n\t 0\\%@`?", "\x00", "é", "---\n", "a: &x ", "*x"]),
                max_size=60).map("".join))
def test_any_text_loads_or_fails_with_a_document_error_only(text: str) -> None:
    try:
        documents = load_documents("fuzz.yaml", text)
    except DocumentError as exc:
        assert str(exc).startswith("fuzz.yaml")
        return
    for document in documents:
        document.locate("tasks[0].depends_on[0]")  # never raises, whatever the tree looks like


def test_a_set_of_files_reports_every_problem_of_every_file() -> None:
    files = [
        DagFile("a/etl.yaml", ETL),
        DagFile("b/ok.yaml", "dag_id: ok\ntasks: [{id: t, kind: empty}]\n"),
        DagFile("c/broken.yaml", "dag_id: [oops"),
        DagFile("d/multi.yaml", "dag_id: m1\ntasks: [{id: t, kind: empty}]\n---\ndag_id: m2\ntasks: []\n"),
        DagFile("e/dup.json", '{"dag_id": "ok", "tasks": [{"id": "t", "kind": "empty"}]}'),
    ]
    result = parse_dag_files(files)
    assert not result.ok
    assert [(d.spec.dag_id, d.file, d.document) for d in result.dags] == [
        ("ok", "b/ok.yaml", None), ("m1", "d/multi.yaml", 0)]
    assert [describe(e.to_json()) for e in result.errors] == [
        "a/etl.yaml:10:18: tasks[1].depends_on[0]: unknown task 'extrct'",
        "c/broken.yaml:2:1: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence)",
        "d/multi.yaml:5:1: document 1: tasks: must contain at least one task",
        "e/dup.json: dag_id: DAG 'ok' is also defined in b/ok.yaml",
    ]
    assert result.errors[2].to_json() == {"file": "d/multi.yaml", "document": 1, "path": "tasks",
                                          "problem": "must contain at least one task", "line": 5, "column": 1}


def test_source_labels() -> None:
    assert source_label("team-a.prod_1") == "team-a.prod_1"
    for bad in ("", "-x", "x-", "a b", "x" * 64, 7, None):
        with pytest.raises(ValidationFailed):
            source_label(bad)
