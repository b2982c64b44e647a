"""Checks that hold a value to its row of the limits table (:mod:`leoflow.model.limits`).

Each function raises :class:`~leoflow.errors.ValidationFailed` naming the path it was given (and,
for nested values, the path of the offending part), never another exception, whatever the
value: these run on decoded user input before anything else looks at it.

:func:`check_size` measures a nested value without recursion (a value nested 100,000 deep is
refused at the limit, not with ``RecursionError``) and stops at the first budget it exceeds, so
its cost is bounded by the budget rather than by the input; shared sub-values (what a YAML
alias produces) are counted every time they appear, as their JSON would be.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Any, NoReturn
from zoneinfo import ZoneInfo

from leoflow.errors import ValidationFailed
from leoflow.model.limits import Count, Cron, Documents, Length, Moments, Name, Range, Size

#: How much of a user-chosen key or path an error message repeats.
_SHOWN = 60
#: The largest integer measured or named by its digits: about 3,900 of them (Python's ``str()``
#: refuses more than 4,300); a larger one is "too large to store".
_MAX_INT_BITS = 13_000


def type_name(value: object) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def within(value: object, path: str, limit: Range) -> float:
    """``value`` as a number inside ``limit`` (booleans are not numbers, NaN and infinities are out).

    For an integer field a float without a fraction (``3.0``, what some JSON encoders write) is
    the integer it equals, as JSON Schema counts it; ``1.5`` is refused.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationFailed(path, f"must be {'an integer' if limit.integer else 'a number'}, got {type_name(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationFailed(path, f"must be a finite number, got {value}")
    if limit.integer and isinstance(value, float):
        if not value.is_integer():
            raise ValidationFailed(path, f"must be an integer, got {value:g}")
        if not limit.contains(value):
            raise ValidationFailed(path, limit.problem(value))
        value = int(value)
    if not limit.contains(value):
        raise ValidationFailed(path, limit.problem(value))
    return value


def check_length(value: str, path: str, limit: Length) -> str:
    if len(value) > limit.maximum:
        raise ValidationFailed(path, f"must be at most {limit.maximum:,} characters, got {len(value):,}")
    return value


def check_count(count: int, path: str, limit: Count) -> None:
    if not limit.minimum <= count <= limit.maximum:
        raise ValidationFailed(path, f"has {count:,} {limit.unit}; {limit.rule} are allowed in a DAG")


def check_name(value: object, path: str, limit: Name) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a string, got {type_name(value)}")
    if not limit.matches(value):
        raise ValidationFailed(path, f"{shown(value)} is not a valid name: {limit.rule}")
    return value


def check_moment(moment: datetime, path: str, limit: Moments) -> datetime:
    if not limit.earliest <= moment < limit.before:
        raise ValidationFailed(path, f"must be {limit.rule}, got {moment.isoformat()}")
    return moment


def check_cron_fires(expression: str, timezone: str, reference: datetime, path: str, limit: Cron) -> None:
    """Refuse a cron expression that does not fire within ``limit.fires_within_years`` of ``reference``."""
    zone: tzinfo = ZoneInfo(timezone)
    if not _fires_within(expression, timezone, reference, limit.fires_within_years):
        raise ValidationFailed(path, f"{expression!r} never fires within {limit.fires_within_years} years "
                               f"of {reference.astimezone(zone):%Y-%m-%d} (a date that does not exist, "
                               "like 31 February?)")


@lru_cache(maxsize=4096)
def _fires_within(expression: str, timezone: str, reference: datetime, years: int) -> bool:
    """:func:`leoflow.model.cron.fires_within` from ``reference`` in ``timezone``: a pure function of
    its arguments, so cached. The scheduler compiles stored specs against one fixed reference, and
    10,000 DAGs due at one boundary share a handful of expressions: uncached, croniter's walk was
    half of each cold compile. Keyed by the zone's name as well as the instant, since two equal
    instants in different zones are different local times."""
    from leoflow.model import cron  # here, not at the top: bounds is read by clients that never parse cron

    return cron.fires_within(expression, reference.astimezone(ZoneInfo(timezone)), years)


def shown(text: str) -> str:
    """``text`` quoted for a message, cut to a readable length."""
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def shown_repr(value: object) -> str:
    """``repr(value)`` for a message, quoted and cut like :func:`shown`; a value without a printable
    repr (an integer past Python's 4,300-digit ``str()`` limit, or one inside a tuple) is named by
    its type instead of raising ``ValueError`` out of the validator."""
    try:
        return shown(repr(value))
    except (ValueError, RecursionError):
        return type_name(value)


def _key_path(path: str, key: object) -> str:
    printable = isinstance(key, str) or (isinstance(key, int) and not isinstance(key, bool)
                                         and key.bit_length() <= _MAX_INT_BITS)
    text = str(key) if printable else type_name(key)
    return f"{path}.{text if len(text) <= _SHOWN else text[:_SHOWN] + '...'}" if path else text


def _scalar_bytes(value: object, path: str, plain: bool) -> int:
    """Bytes of one scalar in compact UTF-8 JSON; ValidationFailed for what JSON or jsonb cannot hold."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValidationFailed(path, "must not contain NUL characters")
        try:
            return len(json.dumps(value, ensure_ascii=False).encode())
        except UnicodeEncodeError:
            raise ValidationFailed(path, "is not valid Unicode (a lone surrogate)") from None
    if value is None or isinstance(value, bool):
        return 4 if value is not False else 5
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            raise ValidationFailed(path, "is a number too large to store")
        return len(str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            if plain:
                raise ValidationFailed(path, f"must be plain JSON (a finite number), got {value}")
            return len(str(value))
        return len(repr(value))
    if isinstance(value, datetime | date | timedelta | bytes) and not plain:
        return len(str(value)) + 2
    raise ValidationFailed(path, f"must be plain JSON (objects, arrays, strings, numbers, true, false, null), "
                           f"got {type_name(value)}")


def check_size(value: Any, path: str, limit: Size, *, plain: bool = False) -> int:
    """Hold ``value`` to ``limit``; returns its canonical JSON size in bytes.

    ``plain``: the value must be JSON as PostgreSQL's ``jsonb`` stores it (string keys, finite
    numbers); otherwise other types (dates from YAML) are measured and left to the field's own
    validator. NUL characters and lone surrogates are refused either way (``jsonb`` cannot
    store them). With ``path=""`` (a whole document) an exceeded budget is reported at the
    place it was exceeded; otherwise at ``path``, with the place in the message.
    """
    total = 0
    entries = 0
    stack: list[tuple[Any, int, str]] = [(value, 0, path)]
    while stack:
        item, depth, where = stack.pop()
        labelled: list[tuple[Any, str]] = []
        if isinstance(item, dict):
            total += 2 + max(0, len(item) - 1) + len(item)  # braces, commas, colons
            for key, child in item.items():
                if isinstance(key, str):
                    total += _scalar_bytes(key, _key_path(where, key), plain)
                elif plain or isinstance(key, tuple | frozenset):  # no decoder makes a tuple key
                    raise ValidationFailed(_key_path(where, key), f"keys must be strings, got {type_name(key)}")
                else:
                    total += len(repr(key)) if not isinstance(key, int) else _scalar_bytes(key, where, plain)
                labelled.append((child, _key_path(where, key)))
        elif isinstance(item, list) or (not plain and isinstance(item, tuple | set | frozenset)):
            total += 2 + max(0, len(item) - 1)
            labelled = [(child, f"{where}[{i}]") for i, child in enumerate(item)]
        else:
            total += _scalar_bytes(item, where, plain)
        if labelled or isinstance(item, dict | list):
            if depth + 1 > limit.max_depth:
                _exceeded(path, where, f"is nested more than {limit.max_depth} levels deep")
            entries += len(labelled)
            if entries > limit.max_entries:
                _exceeded(path, where, f"has more than {limit.max_entries:,} keys and items in all")
            stack.extend((child, depth + 1, label) for child, label in reversed(labelled))
        if total > limit.max_bytes:
            _exceeded(path, where, f"is larger than {limit.max_bytes:,} bytes of JSON")
    return total


def _exceeded(path: str, where: str, problem: str) -> NoReturn:
    cut = where if len(where) <= 3 * _SHOWN else where[:3 * _SHOWN] + "..."
    if not path:  # a whole document: where it broke is the only useful name
        raise ValidationFailed(cut, f"the whole document {problem}")
    raise ValidationFailed(path, problem if where == path else f"{problem} (at {cut})")


def check_document_shape(document: Any, path: str, limit: Documents) -> None:
    """Hold a decoded document (a JSON body) to the nesting and value budget of ``limit``.

    YAML texts are held to it while they are read (:mod:`leoflow.model.files.yaml_loader`); JSON has
    no aliases, so its size is its length and only the shape needs a look.
    """
    values = 0
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        item, depth = stack.pop()
        values += 1
        if values > limit.max_values:
            raise ValidationFailed(path, f"holds more than {limit.max_values:,} values")
        if isinstance(item, dict | list):
            if depth + 1 > limit.max_depth:
                raise ValidationFailed(path, f"is nested more than {limit.max_depth} levels deep")
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))


def check_string_keys(document: Any, path: str) -> None:
    """Refuse a mapping key that is not a string anywhere in ``document`` (422 naming its path).

    JSON has only string keys, and everything downstream (canonical JSON with sorted keys, the
    ``jsonb`` columns, ``sorted(set(body) - allowed)``) assumes them; YAML also has ``1: x``,
    ``true: x`` and ``2026-01-01: x``, and a mapping mixing ``1`` with ``"a"`` cannot even be
    sorted. Without recursion, and each shared sub-value (a YAML alias) looked at once.
    """
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(document, path)]
    while stack:
        item, where = stack.pop()
        if not isinstance(item, dict | list) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
            continue
        for key, child in item.items():
            if not isinstance(key, str):
                raise ValidationFailed(_key_path(where, _as_written(key)), f"keys must be strings, got "
                                       f"{type_name(key)} (quote the key in YAML)")
            stack.append((child, _key_path(where, key)))


def _as_written(key: object) -> object:
    """A YAML scalar key as its text would read (``true``, ``null``, ``2026-01-01``, ``1.5``), for a path."""
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, float | date):  # datetime is a date
        return key.isoformat() if isinstance(key, date) else repr(key)
    return key
