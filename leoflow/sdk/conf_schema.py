"""A DAG's ``params`` from a typed declaration: a dataclass becomes the JSON Schema YAML would hold.

    @dataclass
    class Conf:
        day: str                                  # required
        limit: int = 100                          # default
        mode: Literal["full", "delta"] = "full"   # enum

    DAG("etl", params=Conf)   # params: {type: object, properties: {...}, required: [day]}

The mapping is deliberately small — ``str``, ``int``, ``float``, ``bool``, ``list[T]``,
``dict[str, T]``, ``Literal[...]``, ``T | None`` and nested dataclasses — because it only has to
say what a run's ``conf`` may hold; anything richer is written as a JSON Schema mapping
(``params={...}``), which is passed through unchanged. Either way the server's validator judges
the schema. A default that JSON cannot carry (a ``datetime``, a ``set``, ``nan``) is refused
here, naming the field, instead of being turned into text by a ``default=str``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from leoflow.errors import ValidationFailed

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def params_schema(declared: object) -> dict[str, Any] | None:
    """The ``params`` JSON Schema for a dataclass type or a mapping (None: no params declared)."""
    if declared is None:
        return None
    if isinstance(declared, type) and dataclasses.is_dataclass(declared):
        return _object_schema(declared, "params")
    if isinstance(declared, Mapping):
        schema = dict(declared)
        check_json(schema, "params")
        return schema
    raise ValidationFailed("params", "must be a dataclass type or a JSON Schema mapping, got "
                           f"{type(declared).__name__}")


def _object_schema(cls: type, path: str) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(cls)
    except NameError as exc:  # an annotation naming a class local to a function, under postponed annotations
        raise ValidationFailed(path, f"cannot resolve the annotations of {cls.__name__} ({exc}): declare the "
                               "dataclasses of params at module level") from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        where = f"{path}.properties.{f.name}"
        prop = _type_schema(hints[f.name], where)
        if f.metadata.get("description"):
            prop["description"] = str(f.metadata["description"])
        # Further JSON Schema keywords of the property: field(metadata={"schema": {"format": "date"}}).
        extra = f.metadata.get("schema") or {}
        check_json(dict(extra), f"{where}")
        prop.update(extra)
        if f.default is not dataclasses.MISSING:
            prop["default"] = _default(f.default, f"{where}.default")
        elif f.default_factory is not dataclasses.MISSING:
            prop["default"] = _default(f.default_factory(), f"{where}.default")
        else:
            required.append(f.name)
        properties[f.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _type_schema(hint: Any, path: str) -> dict[str, Any]:
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Literal:
        check_json(list(args), f"{path}.enum")
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            inner = _type_schema(rest[0], path)
            if isinstance(inner.get("type"), str):
                return {**inner, "type": [inner["type"], "null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        return {"anyOf": [_type_schema(a, path) for a in args]}
    if origin is list or hint is list:
        return {"type": "array", **({"items": _type_schema(args[0], f"{path}.items")} if args else {})}
    if origin is dict or hint is dict:
        if args and args[0] is not str:
            raise ValidationFailed(path, "a mapping's keys must be strings (JSON objects have string keys)")
        extra = {"additionalProperties": _type_schema(args[1], f"{path}.additionalProperties")} if args else {}
        return {"type": "object", **extra}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _object_schema(hint, path)
    if hint is Any:
        return {}
    raise ValidationFailed(path, f"{getattr(hint, '__name__', hint)!s} has no JSON Schema here (use str, int, float, "
                           "bool, list[T], dict[str, T], Literal[...], T | None or a dataclass; or write "
                           "params as a JSON Schema mapping)")


def _default(value: object, path: str) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    check_json(value, path)
    return value


def check_json(value: object, path: str) -> None:
    """Refuse what JSON cannot carry, naming the first such place (``params.properties.day.default``)."""
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationFailed(path, f"{value!r} is not a JSON number")
        return
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            check_json(v, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValidationFailed(path, f"key {k!r} is not a string (JSON objects have string keys)")
            check_json(v, f"{path}.{k}")
        return
    raise ValidationFailed(path, f"a {type(value).__name__} is not JSON-serialisable (use a string, number, "
                           "boolean, list or mapping)")


def json_text(value: object) -> str:
    """Compact JSON of a checked value (the form a ``@container_task`` argument travels in)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)
