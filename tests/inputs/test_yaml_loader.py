"""The bounded YAML loader: alias bombs, deep nesting, recursive aliases, duplicate keys and
unbuildable values are refused with a line and column; anchors within budget still work; a budget
is shared by the texts of one request; plain scalars are typed by YAML 1.2's core schema."""

from __future__ import annotations

import time
from datetime import date

import pytest

from leoflow.model.files.yaml_loader import YamlBudget, YamlRejected, dump_yaml, load_yaml, load_yaml_documents
from leoflow.model.limits import DOCUMENT, Documents
from tests.inputs.corpus import ALIAS_BOMB


def refused(text: str, **kwargs: object) -> YamlRejected:
    with pytest.raises(YamlRejected) as info:
        load_yaml(text, **kwargs)  # type: ignore[arg-type]
    return info.value


def test_alias_bomb_is_refused_at_the_budget_with_its_position() -> None:
    assert len(ALIAS_BOMB.encode()) < 400
    error = refused(ALIAS_BOMB, max_bytes=1024 * 1024)
    assert error.too_large
    assert error.line is not None and 8 <= error.line <= 11 and error.column is not None
    assert "aliases count as what they expand to" in error.problem


def test_anchors_within_the_budget_expand_as_usual() -> None:
    text = "common: &env {A: '1', B: '2'}\nfirst: {env: *env}\nsecond:\n  env:\n    <<: *env\n    B: '3'\n"
    assert load_yaml(text) == {"common": {"A": "1", "B": "2"}, "first": {"env": {"A": "1", "B": "2"}},
                               "second": {"env": {"A": "1", "B": "3"}}}


def test_alias_expansion_counts_bytes_exactly_at_the_boundary() -> None:
    text = "a: &s xxxxxxxxxx\nb: [*s, *s, *s]\n"  # scalars: 'a' 'xxxxxxxxxx' 'b' + 3 x 10 bytes = 42
    assert load_yaml(text, max_bytes=42) == {"a": "x" * 10, "b": ["x" * 10] * 3}
    assert refused(text, max_bytes=41).too_large


def test_value_budget_boundary_counts_aliases() -> None:
    small = Documents("test", max_depth=8, max_values=7, why="")
    text = "a: &l [1, 2]\nb: *l\n"  # mapping, 'a', list, 1, 2, 'b', alias (3 values) = 9
    refused_error = refused(text, limit=small)
    assert refused_error.too_large and "more than 7 values" in refused_error.problem
    assert load_yaml(text, limit=Documents("test", max_depth=8, max_values=9, why="")) == {"a": [1, 2], "b": [1, 2]}


def test_nesting_boundary_and_a_very_deep_text_fails_fast() -> None:
    depth = DOCUMENT.max_depth
    ok = "[" * depth + "]" * depth
    assert load_yaml(ok) is not None
    error = refused("[" * (depth + 1) + "]" * (depth + 1))
    assert (error.line, error.column) == (1, depth + 1) and f"more than {depth} levels" in error.problem
    # The C composer would crash the process on this; the scan stops at the limit instead (or
    # libyaml's scanner, reading ahead, at its own 1,000 levels: the same refusal, a little later).
    very_deep = refused("[" * 300_000 + "]" * 300_000)
    assert f"more than {depth} levels" in very_deep.problem and depth + 1 <= very_deep.column <= 1_001


@pytest.mark.parametrize(("text", "line", "column", "words"), [
    ("a: &a [1, *a]\n", 1, 11, "inside its own anchor"),
    ("a: *nope\n", 1, 4, "names no anchor"),
    ("a: 1\nb: 2\na: 3\n", 3, 1, "duplicate key 'a'"),
    ("a: 1\n'a': 3\n", 2, 1, "duplicate key 'a'"),
    ("start: 2026-02-30\n", 1, 8, "day is out of range"),
    ("n: " + "1" * 5000 + "\n", 1, 4, "cannot read this value"),
    ("t: 2026-01-01T00:00:00+99:00\n", 1, 4, "cannot read this value"),
    ("tasks:\n  - id: a\n   image: x\n", 3, 4, "expected '-' indicator"),
    ("a: [unclosed\n", 2, 1, "expected ','"),
    ("a: b\x07c\n", 1, 5, "U+0007"),
    ("a: !!python/object:os.system x\n", 1, 4, "could not determine a constructor"),
    ("a: 1\n---\nb: 2\n", 3, 1, "found several"),
], ids=["recursive-alias", "undefined-alias", "duplicate-key", "duplicate-quoted-key", "bad-date", "huge-int",
        "bad-offset", "bad-indent", "unclosed", "control-character", "python-tag", "two-documents"])
def test_problems_name_line_and_column(text: str, line: int, column: int, words: str) -> None:
    error = refused(text)
    assert (error.line, error.column) == (line, column), str(error)
    assert words in error.problem
    assert str(error).startswith(f"line {line}, column {column}: ")


def test_keys_of_different_types_are_not_duplicates() -> None:
    assert load_yaml("1: a\n'1': b\n") == {1: "a", "1": "b"}


def test_documents_keep_their_index_and_node_positions() -> None:
    docs = load_yaml_documents("a: 1\n---\n---\nb:\n  c: 2\n")
    assert [d.index for d in docs] == [0, 2]
    assert docs[1].data == {"b": {"c": 2}}
    assert docs[1].node.start_mark.line == 3
    assert load_yaml("") is None and load_yaml_documents("# nothing\n") == []


def test_only_true_and_false_are_booleans_as_in_yaml_1_2() -> None:
    text = "on: [failure]\noff: 1\nyes: no\ny: n\nYES: Off\na: true\nb: True\nc: FALSE\n"
    assert load_yaml(text) == {"on": ["failure"], "off": 1, "yes": "no", "y": "n", "YES": "Off", "a": True,
                               "b": True, "c": False}


def test_numbers_are_yaml_1_2_core_no_octal_by_leading_zero_no_sexagesimal() -> None:
    text = "a: 0777\nb: 0o17\nc: 0x1F\nd: 1:20\ne: 1_000\nf: 0b101\ng: 1e3\nh: -.5\ni: .inf\nj: =\n"
    assert load_yaml(text) == {"a": 777, "b": 15, "c": 31, "d": "1:20", "e": "1_000", "f": "0b101", "g": 1000.0,
                               "h": -0.5, "i": float("inf"), "j": "="}
    assert load_yaml("a: 2026-01-01\nb: ~\nc: null\n") == {"a": date(2026, 1, 1), "b": None, "c": None}


@pytest.mark.parametrize("value", ["on", "yes", "No", "1e5", "0777", "09", "0o17", "1:20", "true", "null", "=",
                                   "2026-01-01", "1_000", 7, 1e20, None, True, float("inf"), date(2026, 1, 1)])
def test_what_leoflow_writes_it_reads_back_alike(value: object) -> None:
    assert load_yaml(dump_yaml({"v": value})) == {"v": value}


def test_a_budget_is_shared_by_the_texts_it_is_given() -> None:
    text = "[" + ",".join(["1"] * 599) + "]"  # 600 values
    budget = YamlBudget(1_000, 1_000_000, subject="the files of this sync")
    assert len(load_yaml_documents(text, budget=budget)[0].data) == 599
    assert budget.values == 600
    with pytest.raises(YamlRejected) as info:
        load_yaml_documents(text, budget=budget)  # alone within every limit, not together with the first
    assert "the files of this sync together stand for more than 1,000 values" in info.value.problem
    assert info.value.too_large and budget.exhausted
    with pytest.raises(YamlRejected, match="already stand for all they may"):
        load_yaml_documents("a: 1", budget=budget)


def test_a_budget_counts_aliases_as_what_they_expand_to_across_texts() -> None:
    text = "a: &a [" + ",".join(["x"] * 99) + "]\nb: [" + ",".join(["*a"] * 9) + "]\n"  # 1,000+ values
    budget = YamlBudget(5_000, 1_000_000)
    for _ in range(4):
        load_yaml_documents(text, budget=budget)
    with pytest.raises(YamlRejected, match="together"):
        load_yaml_documents(text, budget=budget)


def test_a_budget_past_its_deadline_reads_nothing_more() -> None:
    budget = YamlBudget(1_000, 1_000, deadline=time.monotonic() - 1)
    with pytest.raises(YamlRejected, match="took longer to read than a request may"):
        load_yaml_documents("a: 1", budget=budget)


# A request body is built from the parser's events, without PyYAML's node tree (issue: a 1 MiB
# YAML body held ~86 MB on the replica parsing it). It must read every text exactly as the node
# builder does, errors included; what events cannot build alike goes to the node builder.
SAME_AS_NODES = [
    "a: 1\nb: [1, 2, {c: d}]\non: x\nt: 2026-01-01\nn: 0777\nf: 1e3\ns: '1'\nz: ~\nh: 0x1f\no: 0o17\n",
    "base: &b {x: 1, y: [1, 2]}\nuse: *b\nl: &l [a, b]\nm: *l\nk: &k key\n*k : v\n",
    "m:\n  <<: {a: 1}\n  b: 2\n",  # a merge key: the node builder merges
    "x: !!set {a, b}\n", "y: !!omap [{a: 1}]\n", "s: !!str 12\nb: !!binary aGk=\n",
    "", "# only a comment\n", "---\n---\na: 1\n", "scalar", "[1, 2]", "{1: x, true: y, 2026-01-01: z}",
    "a: 1\na: 2\n", "a: 2026-02-30\n", "? [a]\n: 1\n", "? {a: 1}\n: 1\n", "a: !custom x\n",
    "a: 1\n---\nb: 2\n", "- 1\n- - 2\n  - {c: [3]}\n", "a: |\n  text\n  more\nb: >\n  folded\n",
]


def _via_nodes(text: str) -> object:
    documents = load_yaml_documents(text)
    if len(documents) > 1:
        mark = documents[1].node.start_mark
        return ("several", mark.line + 1, mark.column + 1)
    return documents[0].data if documents else None


def _outcome(read: object) -> object:
    try:
        return read()  # type: ignore[operator]
    except YamlRejected as exc:
        if "several" in exc.problem:
            return ("several", exc.line, exc.column)
        return ("refused", str(exc))


@pytest.mark.parametrize("text", SAME_AS_NODES)
def test_a_body_built_from_events_reads_as_the_node_builder_reads_it(text: str) -> None:
    assert _outcome(lambda: load_yaml(text)) == _outcome(lambda: _via_nodes(text))


def test_a_one_mebibyte_body_is_built_without_the_node_tree() -> None:
    import tracemalloc

    from tests.inputs.corpus import large_yaml

    text = large_yaml(1024 * 1024).decode()
    tracemalloc.start()
    try:
        load_yaml(text)
        events_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        load_yaml_documents(text)
        nodes_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Measured: ~11 MB from events, ~72 MB with the node tree.
    assert events_peak < 30 * 2**20 and events_peak * 3 < nodes_peak, (events_peak, nodes_peak)
