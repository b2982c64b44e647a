"""PostgreSQL array literals for the scheduler's batched statements.

The scheduler's hot statements take their batches as arrays (``unnest(CAST(:ids AS bigint[]),
…)``): one round trip for hundreds of rows. psycopg adapts a Python list element by element in
Python, which under ``bench/scheduler.py`` was the largest part of the leader's own CPU in a
step (16% of its samples, 17 arrays of 1,568 elements in one report batch). An array literal
built with ``str.join`` is sent as one text value that PostgreSQL parses with the ``CAST`` the
statement already has — about three times cheaper on the Python side.

The literal syntax (PostgreSQL's "Array Value Input"): elements separated by commas inside
braces; ``NULL`` unquoted; strings in double quotes with ``"`` and ``\\`` escaped by a
backslash (any other character, commas, braces and newlines included, is literal inside
quotes). Text from executors is already free of NUL (:func:`leoflow.scheduler.containment.clean_text`),
which no PostgreSQL text can hold either way.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime


def ints(values: Iterable[int]) -> str:
    """``{1,2,3}`` for ``bigint[]`` / ``int[]``."""
    return "{" + ",".join([str(int(v)) for v in values]) + "}"


def _quoted(value: str) -> str:
    if '"' in value or "\\" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + value + '"'


def texts(values: Iterable[str | None]) -> str:
    """``{"a","b",NULL}`` for ``text[]``."""
    return "{" + ",".join(["NULL" if v is None else _quoted(v) for v in values]) + "}"


def bools(values: Iterable[bool]) -> str:
    """``{t,f}`` for ``boolean[]``."""
    return "{" + ",".join(["t" if v else "f" for v in values]) + "}"


def optional_ints(values: Iterable[int | None]) -> str:
    return "{" + ",".join(["NULL" if v is None else str(int(v)) for v in values]) + "}"


def floats(values: Iterable[float | None]) -> str:
    """For ``float8[]``: ``repr`` is exact, and PostgreSQL reads ``inf``/``nan`` as well."""
    return "{" + ",".join(["NULL" if v is None else repr(float(v)) for v in values]) + "}"


def timestamps(values: Iterable[datetime | None], seen: dict[int, str] | None = None) -> str:
    """For ``timestamptz[]``: ISO 8601 with the offset (a naive datetime is read in the session's
    time zone, as psycopg sends one).

    ``seen``: the text already made for these very objects (by ``id``), shared by the arrays of one
    statement. A report's time is its try's start and end and its task instance's start and end:
    one object, four elements; formatting each was a tenth of the leader's time in a step that
    applied 1,568 reports. The caller holds the objects while it builds the statement's
    parameters, so no ``id`` is reused meanwhile.
    """
    if seen is None:
        seen = {}
    out: list[str] = []
    for v in values:
        if v is None:
            out.append("NULL")
            continue
        text = seen.get(id(v))
        if text is None:
            text = seen[id(v)] = '"' + v.isoformat() + '"'
        out.append(text)
    return "{" + ",".join(out) + "}"
