"""Path and query parameters, parsed strictly: the one place a URL's text becomes a value.

Everything in a URL is text an attacker chooses, and Python's conveniences are generous with
it: ``str.isdigit()`` accepts ``'²'`` (which ``int()`` then refuses), ``int()`` and ``float()``
accept ``'٣'``, ``' 7 '`` and ``'1_000'``, ``json.loads`` recurses once per ``[`` and builds
lone surrogates from ``"\\ud800"`` (which PostgreSQL's encoder refuses). Each of those was a 500
(issue 44, item 13). So every route reads its parameters through this module:

- numbers are ASCII digits only (:data:`_DIGITS`, at most 18 of them: below 2^63), decimals a
  plain ``[0-9]+(.[0-9]+)?``;
- a path id that is not a number in range is simply not found (404, ``details.field`` names the
  parameter), as an id that does not exist would be;
- a bad query value is a 400 naming the parameter;
- a ``cursor`` is opaque, at most :data:`MAX_CURSOR_CHARS` long, and must have the exact shape
  :func:`encode_cursor` writes (``[kind, scalar]``: one ``[``, no ``{``) *before* it is decoded, so
  decoding never recurses; its value must be text PostgreSQL can store.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable
from typing import Any

from starlette.requests import Request

from leoflow.api.errors import ApiError, bad_field
from leoflow.model.limits import DEFAULT_PAGE_LIMIT, MAP_ITEMS, PAGE_LIMIT, Name, Range

#: An unsigned integer of ASCII digits, short enough to be below 2^63 (a PostgreSQL bigint).
_DIGITS = re.compile(r"[0-9]{1,18}")
#: A non-negative decimal number of ASCII digits (no sign, exponent, spaces or underscores).
_DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")
#: The longest cursor this API issues is a kind and a 250-character ASCII id (about 360
#: characters once base64-encoded); anything much longer was not issued here.
MAX_CURSOR_CHARS = 1024
#: Longest cursor string value (ids are at most 250 characters).
MAX_CURSOR_TEXT = 250
BIGINT_MAX = 2**63 - 1
#: PostgreSQL ``integer`` columns (DAG versions, try numbers).
INTEGER_MAX = 2**31 - 1


def ascii_int(raw: str) -> int | None:
    """``raw`` as an integer when it is 1-18 ASCII digits, else None (never an exception)."""
    return int(raw) if _DIGITS.fullmatch(raw) else None


def ascii_decimal(raw: str) -> float | None:
    """``raw`` as a number when it is a plain ASCII decimal (``5``, ``0.25``), else None."""
    return float(raw) if _DECIMAL.fullmatch(raw) else None


def is_storable_text(value: str) -> bool:
    """Text PostgreSQL can hold: no NUL character, no lone surrogate."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(raw: str) -> str:
    """A user's value, cut and quoted for a message (lone surrogates escaped, not crashing a log)."""
    return repr(raw[:30]).encode("utf-8", "backslashreplace").decode("utf-8")


# --------------------------------------------------------------------------- path parameters

def path_id(request: Request, name: str, what: str, *, maximum: int = BIGINT_MAX) -> int:
    """The numeric path parameter ``name``; an id that cannot exist is not found (404)."""
    raw: str = request.path_params[name]
    value = ascii_int(raw)
    if value is None or value > maximum:
        raise ApiError(404, f"{what} {shown(raw)} not found ({name} is a number of ASCII digits)",
                       details={"field": name})
    return value


# --------------------------------------------------------------------------- query parameters

def query_text(request: Request, name: str, max_chars: int) -> str | None:
    """A free-text query parameter (None when absent or empty), bounded and storable."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_chars:
        raise bad_field(name, f"must be at most {max_chars} characters")
    if not is_storable_text(raw) or not raw.isprintable():
        raise bad_field(name, "must not contain control characters")
    return raw


def query_id(request: Request, name: str, rule: Name) -> str | None:
    """An id filter (``dag_id``, ``run_id``; None when absent or empty) that must match its naming rule."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if not rule.matches(raw):
        raise bad_field(name, "is not a valid id")
    return raw


def query_int(request: Request, name: str, limit: Range) -> int | None:
    """An integer query parameter (None when absent), ASCII digits within ``limit``; 400 otherwise."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    value = ascii_int(raw)
    if value is None:
        raise bad_field(name, "must be an integer (ASCII digits)")
    if not limit.contains(value):
        raise bad_field(name, limit.problem(value))
    return value


def query_limit(request: Request) -> int:
    return query_int(request, "limit", PAGE_LIMIT) or DEFAULT_PAGE_LIMIT


def query_bool(request: Request, name: str) -> bool | None:
    """A ``true``/``false`` query parameter (None when absent or empty); 400 naming it otherwise."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if raw not in ("true", "false"):
        raise bad_field(name, "must be true or false")
    return raw == "true"


def query_state(request: Request, allowed: tuple[str, ...]) -> str | None:
    raw = request.query_params.get("state")
    if raw is None or raw == "":
        return None
    if raw not in allowed:
        raise bad_field("state", f"must be one of {', '.join(allowed)}")
    return raw


# --------------------------------------------------------------------------- cursors

def encode_cursor(kind: str, value: str | int) -> str:
    """An opaque continuation token: clients pass it back, never build it."""
    raw = json.dumps([kind, value], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(raw: str) -> Any:
    """The ``[kind, value]`` of a cursor, or None for anything :func:`encode_cursor` did not write."""
    if len(raw) > MAX_CURSOR_CHARS or not raw.isascii():
        return None
    try:
        decoded = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    except (binascii.Error, ValueError):
        return None
    # One level of nesting, checked on the bytes: json.loads recurses once per bracket.
    if decoded.count(b"[") != 1 or b"{" in decoded:
        return None
    try:
        found = json.loads(decoded)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return None
    return found if isinstance(found, list) and len(found) == 2 else None


def query_cursor(request: Request, kind: str, value_type: type) -> Any:
    """The value of the ``cursor`` parameter (None when absent); 400 naming it for any other text."""
    raw = request.query_params.get("cursor")
    if raw is None or raw == "":
        return None
    decoded = _decode_cursor(raw)
    if decoded is None:
        raise bad_field("cursor", "is not a cursor this API issued")
    found_kind, value = decoded
    valid = found_kind == kind and isinstance(value, value_type) and not isinstance(value, bool)
    if valid and isinstance(value, int):
        valid = 0 <= value <= BIGINT_MAX
    if valid and isinstance(value, float):
        valid = math.isfinite(value)
    if valid and isinstance(value, str):
        valid = len(value) <= MAX_CURSOR_TEXT and is_storable_text(value)
    if not valid:
        raise bad_field("cursor", "is not a cursor this API issued for this list")
    return value


def page(items: list[dict[str, Any]], limit: int, next_value: Callable[[dict[str, Any]], str | int],
         kind: str) -> dict[str, Any]:
    """``{"items", "next_cursor"}`` from up to ``limit + 1`` fetched rows."""
    more = len(items) > limit
    items = items[:limit]
    cursor = encode_cursor(kind, next_value(items[-1])) if more and items else None
    return {"items": items, "next_cursor": cursor}


#: ``?map_index=`` on the task-instance routes: which instance of a mapped task (ADR 0014, decision 3).
MAP_INDEX = Range("`map_index` (task-instance query parameter)", 0, MAP_ITEMS.maximum - 1,
                  "an instance of a mapped task, 0 to one less than its items", integer=True)


def query_map_index(request: Request) -> int | None:
    """``?map_index=``: None when absent; 400 naming it when not an index a task could have."""
    return query_int(request, "map_index", MAP_INDEX)
