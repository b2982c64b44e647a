"""Run parameters: a DAG's optional JSON Schema ``params``, and a run's ``conf`` checked against it.

A DAG may declare what its runs accept as ``conf`` with a JSON Schema (draft 2020-12) under
``params`` — the same idea as Airflow's params. Then:

- a trigger's ``conf`` is completed with the schema's defaults and validated; a mismatch is a
  :class:`~leoflow.errors.ValidationFailed` naming the path inside the conf (``conf.day: 'x' is
  not of type 'integer'``; a missing required property is named itself, ``conf.day: is
  required``), which the API answers with a 422;
- runs nobody passes a conf to (scheduled runs, backfills) get the defaults
  (:func:`default_conf`); a scheduled DAG whose defaults do not validate is refused when it is
  applied, so a scheduled run can never start with a conf its own schema rejects.

Defaults are filled from ``properties`` (recursively into nested objects that are present or
created from a default); defaults behind ``$ref``, ``allOf``/``anyOf`` or ``if`` are not
applied (JSON Schema itself never applies defaults; this is the common, predictable subset).

Limits (a schema is code run against user input on every trigger, and by the leader against a
scheduled DAG's defaults): :data:`leoflow.model.limits.PARAMS` (bytes of canonical JSON, nesting,
keys and items), and the top level must describe an object (``type: object``).
Validation runs in :mod:`leoflow.model.spec.params_validator`: regular expressions (``pattern``, the
keys of ``patternProperties``) are RE2's, checked when the DAG is applied (a backreference or a
lookaround is refused there, naming the field), and matched in time linear in the text; every
validation has a budget of steps, so its time is bounded whatever the schema and the conf (the
conf itself is bounded by :data:`leoflow.model.limits.CONF`, a default by the schema's size).

References are refused (``$ref``, ``$dynamicRef``, ``$recursiveRef``) rather than resolved:
a form for a run's conf is small and needs none (a DAG file can repeat a sub-schema with a YAML
anchor), while a reference is the one way a schema becomes a graph — ``{$ref: "#"}`` recursing
forever, a chain of definitions each used twice doubling the work per link — so resolving
them safely means cycle detection *and* a cost model for nothing users asked for. A version
stored by an older release with a reference fails its triggers with a 409 and its runs with
that reason (:func:`check_params`), never a crash.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

import re2
from jsonschema.exceptions import SchemaError, ValidationError

from leoflow.errors import Conflict, ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_size
from leoflow.model.spec.params_formats import KNOWN as KNOWN_FORMATS
from leoflow.model.spec.params_validator import (
    FORMATS,
    ParamsValidator,
    TooCostly,
    compile_pattern,
    first_error,
    one_budget,
)

#: Largest ``params`` schema (bytes of its compact JSON): generous for a hand-written form.
MAX_PARAMS_BYTES = limits.PARAMS.max_bytes
#: Deepest nesting of objects/lists inside ``params``.
MAX_PARAMS_DEPTH = limits.PARAMS.max_depth


def parse_params(value: object, path: str = "params") -> dict[str, Any] | None:
    """Validate a ``params`` schema (None when absent); raise ValidationFailed naming the path."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationFailed(path, "must be a JSON Schema object (e.g. {type: object, properties: {...}})")
    try:
        size = len(json.dumps(value, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValidationFailed(path, f"must be plain JSON ({exc})") from None
    if size > MAX_PARAMS_BYTES:
        raise ValidationFailed(path, f"is {size} bytes of JSON; at most {MAX_PARAMS_BYTES} are allowed")
    _check_depth(value, path, 0)
    check_size(value, path, limits.PARAMS, plain=True)  # and its keys and items (the table's row)
    check_params(value, path)
    if value.get("type") != "object":
        raise ValidationFailed(f"{path}.type", "must be 'object' (a run's conf is an object)")
    try:
        ParamsValidator.check_schema(value, format_checker=FORMATS)
    except SchemaError as exc:
        raise ValidationFailed(_join(path, list(exc.absolute_path)), f"is not a valid JSON Schema: {exc.message}") \
            from None
    _check_formats(value, path)
    _check_defaults(value, path)
    return value


def default_conf(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The conf a run gets when none is passed: the schema's defaults (``{}`` without params)."""
    return fill_defaults(schema, {}) if schema else {}


def fill_defaults(schema: Mapping[str, Any] | None, conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with the defaults of ``schema``'s ``properties`` filled in (a new object)."""
    result = copy.deepcopy(dict(conf))
    if schema:
        _fill(schema, result)
    return result


def validate_conf(schema: Mapping[str, Any] | None, conf: Mapping[str, Any], path: str = "conf") -> dict[str, Any]:
    """The conf completed with defaults, or ValidationFailed naming the first bad path.

    A schema this release refuses (one stored by an older release) raises
    :class:`~leoflow.errors.Conflict` (the API's 409) naming the place in ``params`` (see
    :func:`check_params`) before anything is evaluated: the request is fine, the DAG is not.
    """
    completed = fill_defaults(schema, conf)
    if not schema:
        return completed
    try:
        check_params(schema)
    except ValidationFailed as exc:
        raise Conflict(f"{exc.path}: {exc.problem} (this DAG version was stored by an older release; apply the "
                       "DAG again without it)") from None
    try:
        error = first_error(schema, completed)
    except TooCostly as exc:
        raise ValidationFailed(path, f"{exc}; simplify the params or send a smaller conf") from None
    if error is not None:
        raise _failure(error, path)
    return completed


def check_params(schema: Mapping[str, Any], path: str = "params") -> None:
    """Refuse what this release does not run in a schema: references, patterns RE2 cannot run, and
    ``unevaluatedProperties`` beside ``patternProperties`` (jsonschema evaluates those patterns
    with Python's backtracking :mod:`re`); ValidationFailed names the field.

    Linear in the schema's size (each pattern is compiled once, then cached); it runs on every
    trigger too, because a stored version may predate these rules.
    """
    found = list(_subschemas(schema, path))
    with_patterns = any("patternProperties" in sub for _, sub in found)
    for where, sub in found:
        for keyword in _REFERENCES:
            if keyword in sub:
                raise ValidationFailed(f"{where}.{keyword}", "references are not supported in params; write the "
                                       "sub-schema out (a YAML anchor can repeat it in a DAG file)")
        if isinstance(sub.get("pattern"), str):
            _check_pattern(sub["pattern"], f"{where}.pattern")
        if isinstance(sub.get("patternProperties"), dict):
            for pattern in sub["patternProperties"]:
                _check_pattern(pattern, f"{where}.patternProperties.{pattern}")
        if with_patterns and "unevaluatedProperties" in sub:
            raise ValidationFailed(f"{where}.unevaluatedProperties", "cannot be used together with "
                                   "patternProperties in params; use additionalProperties")


def check_scheduled_defaults(schema: Mapping[str, Any] | None) -> None:
    """A scheduled DAG's runs get :func:`default_conf`; it must pass the schema itself."""
    if not schema:
        return
    try:
        validate_conf(schema, {}, "conf")
    except ValidationFailed as exc:
        raise ValidationFailed("params", "a scheduled run would get the defaults as its conf, and they do not "
                               f"validate ({exc.path}: {exc.problem}); give those properties defaults") from None


# --------------------------------------------------------------------------- helpers

def _check_formats(schema: Mapping[str, Any], path: str) -> None:
    """Refuse a ``format`` Leoflow does not check (see :mod:`leoflow.model.spec.params_formats` for why
    it is refused rather than ignored). Only at apply: :func:`check_params` runs on every trigger,
    and a version stored before this rule keeps its unknown formats as annotations."""
    for where, sub in _subschemas(schema, path):
        name = sub.get("format")
        if isinstance(name, str) and name not in KNOWN_FORMATS:
            raise ValidationFailed(f"{where}.format", f"{name[:100]!r} is not a format Leoflow checks; use one of "
                                   f"{', '.join(sorted(KNOWN_FORMATS))}, or a pattern")


def _check_defaults(schema: Mapping[str, Any], path: str) -> None:
    """Each default :func:`fill_defaults` applies must pass the schema of its property (completed
    with its own nested defaults): one that does not would fail every trigger that leaves the
    property out (``day: {format: date, default: "2026-13-45"}``). All share one budget."""
    try:
        with one_budget():
            for where, sub, default in _defaults(schema, path):
                error = first_error(sub, fill_defaults(sub, default) if isinstance(default, dict) else default)
                if error is not None:
                    raise _failure(error, f"{where}.default")
    except TooCostly as exc:
        raise ValidationFailed(path, f"checking its defaults {str(exc).removeprefix('checking it ')}") from None


def _defaults(schema: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any], Any]]:
    """(path, property schema, default) for every default :func:`_fill` may apply, innermost first."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for name, sub in properties.items():
        if isinstance(sub, dict):
            yield from _defaults(sub, f"{path}.properties.{name}")  # inner first: its error names the default
            if "default" in sub:
                yield f"{path}.properties.{name}", sub, sub["default"]


def _fill(schema: Mapping[str, Any], conf: dict[str, Any]) -> None:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for name, sub in properties.items():
        if not isinstance(sub, dict):
            continue
        if name not in conf and "default" in sub:
            conf[name] = copy.deepcopy(sub["default"])
        if isinstance(conf.get(name), dict):
            _fill(sub, conf[name])


def _failure(error: ValidationError, path: str) -> ValidationFailed:
    where = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [p for p in error.validator_value if p not in error.instance]
        if missing:
            return ValidationFailed(_join(path, [*where, missing[0]]), "is required")
    message = error.message
    if len(message) > 300:
        message = message[:300] + "…"
    return ValidationFailed(_join(path, where), message)


def _join(path: str, parts: list[Any]) -> str:
    out = path
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _check_depth(value: object, path: str, depth: int) -> None:
    if depth > MAX_PARAMS_DEPTH:
        raise ValidationFailed(path, f"nests deeper than {MAX_PARAMS_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_depth(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_depth(item, f"{path}[{i}]", depth + 1)


#: Keywords that refer to another schema (see the module doc for why they are refused).
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
#: Keywords whose value is a schema, a list of schemas, or a mapping of names to schemas.
_ONE = ("additionalProperties", "unevaluatedProperties", "unevaluatedItems", "items", "contains", "propertyNames",
        "not", "if", "then", "else", "additionalItems")
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _subschemas(schema: object, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every (sub-)schema of ``schema`` with its path; data (``default``, ``enum``...) is not entered."""
    if not isinstance(schema, Mapping):
        return
    yield path, schema
    for keyword in _ONE:
        yield from _subschemas(schema.get(keyword), f"{path}.{keyword}")
    for keyword in _MANY:
        if isinstance(schema.get(keyword), list):
            for i, item in enumerate(schema[keyword]):
                yield from _subschemas(item, f"{path}.{keyword}[{i}]")
    for keyword in _NAMED:
        if isinstance(schema.get(keyword), Mapping):
            for name, item in schema[keyword].items():
                yield from _subschemas(item, f"{path}.{keyword}.{name}")


def _check_pattern(pattern: str, path: str) -> None:
    try:
        compile_pattern(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValidationFailed(path, f"{pattern[:100]!r} is not a regular expression RE2 can run ({reason}); "
                               "backreferences and lookaround are not supported") from None
    except UnicodeEncodeError:
        raise ValidationFailed(path, "is not valid Unicode (a lone surrogate)") from None
