"""What the CEL library answers for the expression shapes conditions use: pinned, so an upgrade of
``common-expression-language`` that changes one (cel 0.13 made ``||``/``&&`` stricter) fails here, in
review, rather than turning a run's ``when`` from false to failed (ADR 0014, decision 4).

Each row: a source, the variables, and the expected value — or the exception type the library raises,
which :func:`leoflow.model.spec.expressions.evaluate_when` turns into a task's reason.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import cel
import pytest

VARIABLES: dict[str, Any] = {
    "params": {"day": "2026-11-29", "n": 3, "ratio": 0.5, "flag": True, "tags": ["a", "b"], "none": None},
    "run": {"id": "scheduled__2026-11-29T00:00:00+00:00", "logical_date": datetime(2026, 11, 29, tzinfo=UTC)},
    "tasks": {"list": {"outputs": {"partitions": ["p0", "p1"], "count": 2, "meta": {"k": "v"}}},
              "load-data": {"outputs": {}}},
}

VALUES: list[tuple[str, Any]] = [
    ('params.day == "2026-11-29"', True),
    ("params.n > 2 && params.flag", True),
    ("params.n == 3.0", True),  # int and double compare by value
    ("params.ratio < 1", True),
    ("params.none == null", True),
    ("'a' in params.tags", True),
    ("size(params.tags) == 2", True),
    ("has(params.missing)", False),
    ("has(params.day)", True),
    ("size(tasks.list.outputs.partitions) > 0", True),
    ("tasks.list.outputs.partitions.exists(p, p == 'p1')", True),
    ("tasks.list.outputs.partitions.all(p, p.startsWith('p'))", True),
    ("tasks.list.outputs.partitions.exists_one(p, p.endsWith('0'))", True),
    ('tasks.list.outputs.meta.k == "v"', True),
    ('tasks["load-data"].outputs == {}', True),
    ('has(tasks["load-data"].outputs.rows)', False),
    ("run.logical_date.getDayOfWeek() == 0", True),  # a Sunday, in UTC
    ("run.logical_date > timestamp('2026-01-01T00:00:00Z')", True),
    ("string(run.logical_date).startsWith('2026-11-29')", True),
    ("run.id.contains('scheduled')", True),
    ("params.day.matches('^2026-')", True),
    ("int(params.ratio * 10.0) == 5", True),
    ("true || params.missing == 1", True),  # short-circuit: the missing key is never read
    ("false && params.missing == 1", False),
    ("params.n", 3),  # not a boolean: evaluate_when refuses it
    ("params.day", "2026-11-29"),
]

ERRORS: list[tuple[str, type[BaseException]]] = [
    ("params.missing == 1", KeyError),
    ("tasks.list.outputs.nope == 1", KeyError),
    ("params.day + 1 == 2", TypeError),
    ("params.n + 'x' == 'x'", TypeError),
    ("tasks.list.outputs.partitions[9] == 'x'", IndexError),
    ("params.n / 0 == 1", ZeroDivisionError),
    ("false || params.missing == 1", KeyError),
    ("undefined_name == 1", RuntimeError),
]

SYNTAX = ["params.day ==", "(", "params.n >> 1", "'unterminated", "a.b(", "(" * 100 + "true" + ")" * 100]


@pytest.mark.parametrize(("source", "expected"), VALUES)
def test_values(source: str, expected: Any) -> None:
    result = cel.compile(source).execute(VARIABLES)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(("source", "error"), ERRORS)
def test_errors(source: str, error: type[BaseException]) -> None:
    with pytest.raises(error):
        cel.compile(source).execute(VARIABLES)


@pytest.mark.parametrize("source", SYNTAX)
def test_syntax_errors_are_value_errors_with_a_position(source: str) -> None:
    with pytest.raises(ValueError, match=r"<input>:\d+:\d+: "):
        cel.compile(source)


def test_references_list_variables_and_macro_bound_names() -> None:
    refs = cel.compile("tasks.list.outputs.partitions.exists(p, p == params.day) && run.id != ''").references()
    assert sorted(refs["variables"]) == ["p", "params", "run", "tasks"]
    assert "size" in cel.compile("size(params.tags) > 0").references()["functions"]
