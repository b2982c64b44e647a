"""Field validators for DAG specs: each checks one value and names its path on failure.

Used by :mod:`leoflow.model.spec.dag`; every function raises
:class:`~leoflow.errors.ValidationFailed` with the path it was given, never a bare
``TypeError``/``KeyError``, so the API answers 422 and the CLI prints one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from leoflow.errors import ValidationFailed
from leoflow.model import cron
from leoflow.model.bounds import check_count, check_length, check_moment, check_name, shown, shown_repr, type_name
from leoflow.model.cron import CRON_PRESETS
from leoflow.model.env_names import is_env_name, is_reserved
from leoflow.model.limits import DAG_ID, NAME_RE, QUANTITY, SCHEDULE, START_DATE, TIMEZONE, Count

__all__ = ["NAME_RE", "type_name"]  # re-exported: callers validate ids with them



def as_mapping(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        what = "a DAG spec" if not path else "a task"
        raise ValidationFailed(path, f"{what} must be a mapping, got {type_name(value)}")
    for key in value:
        if not isinstance(key, str):
            raise ValidationFailed(path, f"field names must be strings, got {shown_repr(key)}")
    return value


def no_unknown(doc: Mapping[str, Any], allowed: set[str], path: str) -> None:
    for key in doc:
        if key not in allowed:
            name = key if len(key) <= 60 else key[:60] + "..."
            raise ValidationFailed(f"{path}.{name}" if path else name,
                                   f"unknown field (allowed: {', '.join(sorted(allowed))})")


def required(doc: Mapping[str, Any], key: str, path: str) -> Any:
    if doc.get(key) is None:
        raise ValidationFailed(f"{path}.{key}" if path else key, "is required")
    return doc[key]


def name_field(value: object, path: str) -> str:
    """A DAG or task id (the same rule, :data:`leoflow.model.limits.DAG_ID`)."""
    return check_name(value, path, DAG_ID)


def opt_str(value: object, path: str, *, max_len: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a string, got {type_name(value)}")
    if len(value) > max_len:
        raise ValidationFailed(path, f"must be at most {max_len} characters")
    return value


def bool_field(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(path, f"must be true or false, got {type_name(value)}")
    return value


def int_field(value: object, path: str, *, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(path, f"must be an integer, got {type_name(value)}")
    if not minimum <= value <= maximum:
        raise ValidationFailed(path, f"must be between {minimum} and {maximum}, got {value}")
    return value


def number_field(value: object, path: str, *, minimum: float, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValidationFailed(path, f"must be a number, got {type_name(value)}")
    if value in (float("inf"), float("-inf")) or value < minimum or (positive and value <= 0):
        raise ValidationFailed(path, f"must be {'greater than' if positive else 'at least'} {minimum:g}, got {value}")
    return float(value)


def plain_number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def str_list(value: object, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValidationFailed(path, f"must be a list of strings, got {type_name(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ValidationFailed(f"{path}[{i}]", f"must be a string, got {type_name(item)}")
    return tuple(value)


def env_field(value: object, path: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a mapping of names to strings, got {type_name(value)}")
    for key, item in value.items():
        if not isinstance(key, str) or not is_env_name(key):
            raise ValidationFailed(f"{path}.{key}", "is not a valid environment variable name")
        if is_reserved(key):
            raise ValidationFailed(f"{path}.{key}", "LEOFLOW_* names are reserved for the run context "
                                   "Leoflow gives every task (LEOFLOW_RUN_CONF, LEOFLOW_RUN_ID, ...)")
        if not isinstance(item, str):
            raise ValidationFailed(f"{path}.{key}", f"must be a string (quote it in YAML), got {type_name(item)}")
    return dict(value)


def resources_field(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a mapping with requests/limits, got {type_name(value)}")
    out: dict[str, Any] = {}
    for group, amounts in value.items():
        if group not in ("requests", "limits"):
            raise ValidationFailed(f"{path}.{group}", "unknown field (allowed: limits, requests)")
        if not isinstance(amounts, dict):
            raise ValidationFailed(f"{path}.{group}",
                                   f"must be a mapping of resource to quantity, got {type_name(amounts)}")
        for name, qty in amounts.items():
            if not isinstance(name, str) or not re.match(r"^[a-zA-Z0-9][a-zA-Z0-9./_-]{0,252}$", name):
                raise ValidationFailed(f"{path}.{group}.{shown(str(name))[1:-1]}", "is not a valid resource name "
                                       "(at most 253 characters)")
            if isinstance(qty, bool) or not isinstance(qty, str | int | float):
                raise ValidationFailed(f"{path}.{group}.{name}",
                                       f"must be a quantity like 100m or 128Mi, got {type_name(qty)}")
            if isinstance(qty, int | float) and not 0 <= qty < 10**QUANTITY.maximum:  # NaN and inf fail too
                raise ValidationFailed(f"{path}.{group}.{name}", f"must be a finite number, at least 0 and below "
                                       f"10^{QUANTITY.maximum}")
            text = qty if isinstance(qty, str) else _quantity_text(qty)
            if len(text) > QUANTITY.maximum or not re.match(r"^[0-9]+(\.[0-9]+)?([a-zA-Z]{1,2})?$", text):
                raise ValidationFailed(f"{path}.{group}.{name}", f"{shown(text)} is not a quantity like 100m or "
                                       f"128Mi (at most {QUANTITY.maximum} characters)")
        out[group] = {str(k): v if isinstance(v, str) else _quantity_text(v) for k, v in sorted(amounts.items())}
    return out


def _quantity_text(number: int | float) -> str:
    """A number as the quantity string the canonical form stores: plain decimal digits, never an
    exponent (``str(1e-05)`` is ``'1e-05'``, which the string rule — and so the scheduler's
    re-parse of the stored spec — refuses); a number whose digits do not fit is refused as its text."""
    return str(number) if isinstance(number, int) else format(Decimal(repr(number)), "f")


def plain_mapping(value: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (plain_mapping(v) if isinstance(v, Mapping) else v) for k, v in sorted(value.items())}


def timezone_field(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationFailed(path, "must be an IANA time zone name like UTC or Europe/Berlin, "
                               f"got {type_name(value)}")
    check_length(value, path, TIMEZONE)
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationFailed(path, f"unknown time zone {shown(value)}") from None
    return value


def schedule_field(value: object, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationFailed(path, "must be a cron expression, a preset like @daily, or null; "
                               f"got {type_name(value)}")
    if len(value) > SCHEDULE.max_length:
        raise ValidationFailed(path, f"must be at most {SCHEDULE.max_length} characters, got {len(value):,}")
    if value.startswith("@"):
        if value not in CRON_PRESETS:
            raise ValidationFailed(path, f"unknown preset {shown(value)} (allowed: {', '.join(CRON_PRESETS)})")
        return value
    if len(value.split()) != 5:
        raise ValidationFailed(path, f"{shown(value)} is not a 5-field cron expression (minute hour day month weekday)")
    if not cron.is_valid(value):
        raise ValidationFailed(path, f"{shown(value)} is not a valid cron expression")
    return " ".join(value.split())


def start_date_field(value: object, path: str, timezone: str) -> datetime | None:
    """ISO 8601 string, YAML timestamp or date; a value without offset is in the DAG's time zone."""
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        except ValueError:
            raise ValidationFailed(path, f"{shown(value)} is not an ISO 8601 date/time like 2026-01-01T00:00:00Z") \
                from None
    else:
        raise ValidationFailed(path, f"must be an ISO 8601 date/time, got {type_name(value)}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(timezone))
    try:
        in_utc = moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:00-05:00 is in the year 10000 in UTC
        raise ValidationFailed(path, f"must be {START_DATE.rule}, got {moment.isoformat()}") from None
    return check_moment(in_utc, path, START_DATE)


def exit_codes_field(value: object, path: str, limit: Count) -> tuple[int, ...]:
    """A list of distinct exit codes 0..255, at most ``limit`` (``skip_on_exit_code``,
    ``retry_policy.on_exit_codes``); ``()`` when absent."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValidationFailed(path, f"must be a list of exit codes, got {type_name(value)}")
    check_count(len(value), path, limit)
    codes: dict[int, None] = {}
    for i, code in enumerate(value):
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
            got = str(code) if isinstance(code, int) and abs(code) < 10**9 else type_name(code)
            raise ValidationFailed(f"{path}[{i}]", f"must be an exit code, an integer from 0 to 255, got {got}")
        if code in codes:
            raise ValidationFailed(f"{path}[{i}]", f"duplicate exit code {code}")
        codes[code] = None
    return tuple(codes)
