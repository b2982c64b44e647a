"""The scheduler's array literals (:mod:`leoflow.db.arrays`) read back as the values they were built
from, through a real PostgreSQL's ``CAST`` — for any text (quotes, backslashes, braces, commas,
newlines, ``NULL`` as a word, empty strings), any 64-bit integer, any float, any aware datetime."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leoflow.db import arrays

TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
ZONES = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
MOMENTS = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=ZONES)


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(database_url, autocommit=True) as c:
        yield c


def read_back(conn: psycopg.Connection[Any], literal: str, pg_type: str) -> list[Any]:
    row = conn.execute(f"SELECT CAST(%s AS {pg_type})", (literal,)).fetchone()
    assert row is not None
    return list(row[0])


CASES: list[tuple[str, Callable[[Any], str], Any, str]] = [
    ("texts", arrays.texts, st.lists(st.one_of(st.none(), TEXT, st.sampled_from(['"', "\\", "NULL", "{}", "a,b", ""])),
                                     max_size=30), "text[]"),
    ("ints", arrays.ints, st.lists(st.integers(-2**63, 2**63 - 1), max_size=30), "bigint[]"),
    ("optional_ints", arrays.optional_ints, st.lists(st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)),
                                                     max_size=30), "int[]"),
    ("floats", arrays.floats, st.lists(st.one_of(st.none(), st.floats(allow_nan=False)), max_size=30), "float8[]"),
    ("timestamps", arrays.timestamps, st.lists(st.one_of(st.none(), MOMENTS), max_size=30), "timestamptz[]"),
]


@pytest.mark.parametrize(("name", "build", "values", "pg_type"), CASES, ids=[c[0] for c in CASES])
def test_an_array_literal_reads_back_as_its_values(conn: psycopg.Connection[Any], name: str,
                                                   build: Callable[[Any], str], values: Any, pg_type: str) -> None:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(values)
    def check(items: list[Any]) -> None:
        assert read_back(conn, build(items), pg_type) == items

    check()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), MOMENTS), max_size=30), st.lists(st.integers(0, 29), max_size=60))
def test_timestamps_shared_between_arrays_read_the_same(moments: list[datetime | None], picks: list[int]) -> None:
    """The arrays of one statement share their text by object (arrays.timestamps' ``seen``): the
    same objects again, in another order, and equal moments that are other objects, all read as
    each array alone would."""
    again = [moments[i] for i in picks if i < len(moments)]
    copies = [None if m is None else m + timedelta(0) for m in moments]
    seen: dict[int, str] = {}
    for values in (moments, again, copies, moments):
        assert arrays.timestamps(values, seen) == arrays.timestamps(values)
