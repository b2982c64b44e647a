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

Limits (a schema is code run against user input on every trigger): at most
:data:`MAX_PARAMS_BYTES` of canonical JSON, nesting at most :data:`MAX_PARAMS_DEPTH` deep, the
top level must describe an object (``type: object``), and ``$ref`` may only point inside the
schema (``#...``: nothing is ever fetched). Regular expressions (``pattern``) are compiled when
the DAG is applied; validating a conf has its own time budget in the API (a pathological
pattern cannot stall a replica).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match

from leoflow.errors import ValidationFailed

#: Largest ``params`` schema (bytes of its compact JSON): generous for a hand-written form.
MAX_PARAMS_BYTES = 32 * 1024
#: Deepest nesting of objects/lists inside ``params``.
MAX_PARAMS_DEPTH = 16


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
    if value.get("type") != "object":
        raise ValidationFailed(f"{path}.type", "must be 'object' (a run's conf is an object)")
    for where, ref in _refs(value, path):
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise ValidationFailed(where, "only references inside the schema ('#/...') are allowed")
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        raise ValidationFailed(_join(path, list(exc.absolute_path)), f"is not a valid JSON Schema: {exc.message}") \
            from None
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
    """The conf completed with defaults, or ValidationFailed naming the first bad path."""
    completed = fill_defaults(schema, conf)
    if not schema:
        return completed
    error = best_match(Draft202012Validator(schema).iter_errors(completed))
    if error is not None:
        raise _failure(error, path)
    return completed


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


def _refs(value: object, path: str) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("$ref", "$dynamicRef"):
                yield f"{path}.{key}", item
            else:
                yield from _refs(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _refs(item, f"{path}[{i}]")
