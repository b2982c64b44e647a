"""A template's inputs: their declarations, the values a task gives, and their substitution.

Split from :mod:`.reuse` (which resolves ``uses:``), this is the part that touches strings: each
template string is parsed with the template grammar (:mod:`.templating`), every ``{{ inputs.X }}``
piece replaced by the input's own pieces, and the result written back with its literal text
escaped (:func:`written`), so a literal can never meet another piece and open a reference, and
nothing is substituted twice. A string value is parsed the way an ``args`` element is (its
references become the using task's); any other value is its compact JSON, always literal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_count, check_name, shown, type_name
from leoflow.model.fields import bool_field, no_unknown
from leoflow.model.spec.templating import OPEN, Piece, Reference, parse_template

INPUT_TYPES = ("string", "integer", "number", "boolean", "array", "object", "any")
_MISSING: Any = object()
_ESCAPED_OPEN = '{{ "{{" }}'


@dataclass(frozen=True)
class InputDecl:
    """One declared input: its JSON type, and its default (absent: required unless ``required: false``)."""

    name: str
    type: str = "string"
    default: Any = _MISSING
    required: bool = True


def input_decls(raw: object, path: str) -> dict[str, InputDecl]:
    """A template's ``inputs:`` declarations (like a params schema's properties, flat)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValidationFailed(path, f"must be a mapping of input names to {{type, default, required}}, "
                               f"got {type_name(raw)}")
    check_count(len(raw), path, limits.TEMPLATE_INPUTS)
    decls: dict[str, InputDecl] = {}
    for key, spec in raw.items():
        where = f"{path}.{key}"
        check_name(key, where, limits.INPUT_NAME)
        spec = {} if spec is None else spec
        if not isinstance(spec, dict):
            raise ValidationFailed(where, f"must be a mapping {{type, default, required}}, got {type_name(spec)}")
        no_unknown(spec, {"type", "default", "required", "description"}, where)
        if "description" in spec:
            description_field(spec["description"], f"{where}.description")
        kind = spec.get("type", "string")
        if kind not in INPUT_TYPES:
            raise ValidationFailed(f"{where}.type", f"must be one of {', '.join(INPUT_TYPES)}, got {shown(str(kind))}")
        default = spec.get("default", _MISSING)
        if default is not _MISSING:
            check_type(default, kind, f"{where}.default")
        required = bool_field(spec.get("required", default is _MISSING), f"{where}.required")
        if required and default is not _MISSING:
            raise ValidationFailed(f"{where}.required", "an input with a default is not required")
        decls[key] = InputDecl(key, kind, default, required)
    return decls


def description_field(value: object, path: str) -> str:
    """A template's or an input's ``description``: text for people, at most ``limits.DESCRIPTION``."""
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a string, got {type_name(value)}")
    if len(value) > limits.DESCRIPTION.maximum:
        raise ValidationFailed(path, f"must be at most {limits.DESCRIPTION.maximum:,} characters, got {len(value):,}")
    return value


def check_type(value: object, kind: str, path: str) -> None:
    ok = {"string": isinstance(value, str), "integer": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, int | float) and not isinstance(value, bool),
          "boolean": isinstance(value, bool), "array": isinstance(value, list), "object": isinstance(value, dict),
          "any": True}[kind]
    if not ok:
        raise ValidationFailed(path, f"must be of type {kind}, got {type_name(value)}")


def input_values(raw: object, inputs: Mapping[str, InputDecl], template: str, path: str) -> dict[str, list[Piece]]:
    """Each declared input's value as template pieces (see the module docstring)."""
    given = {} if raw is None else raw
    if not isinstance(given, dict):
        raise ValidationFailed(f"{path}.inputs", f"must be a mapping of input names to values, got {type_name(given)}")
    check_count(len(given), f"{path}.inputs", limits.TEMPLATE_INPUTS)
    for key in given:
        if key not in inputs:
            declared = ", ".join(inputs) or "none"
            raise ValidationFailed(f"{path}.inputs.{str(key)[:60]}",
                                   f"unknown input of template {template!r} (its inputs: {declared})")
    values: dict[str, list[Piece]] = {}
    for decl in inputs.values():
        where = f"{path}.inputs.{decl.name}"
        if decl.name in given:
            value = given[decl.name]
        elif decl.default is not _MISSING:
            value = decl.default
        elif decl.required:
            raise ValidationFailed(f"{path}.inputs" if raw is not None else f"{path}.uses",
                                   f"missing required input {decl.name!r} of template {template!r}")
        else:
            value = ""
        values[decl.name] = _pieces(value, decl, where)
    return values


def _pieces(value: object, decl: InputDecl, where: str) -> list[Piece]:
    if not isinstance(value, str):
        check_type(value, decl.type, where)
        return [json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)]
    template = parse_template(value, where)
    if template is None:
        check_type(value, decl.type, where)
        return [value]
    for ref in template.references:  # a string holding a reference is as typed as what it renders to
        if ref.kind == "inputs":
            raise ValidationFailed(where, f"{ref.text}: an input's value cannot name an input")
    return list(template.pieces)


# --------------------------------------------------------------------------- substitution

def input_strings(fields: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """(path, text) of every string a template may hold ``{{ inputs.X }}`` in."""
    found: list[tuple[str, str]] = []
    for key in ("command", "args"):
        items = fields.get(key)
        if isinstance(items, list):
            found += [(f"{path}.{key}[{i}]", s) for i, s in enumerate(items) if isinstance(s, str) and OPEN in s]
    env = fields.get("env")
    if isinstance(env, dict):
        found += [(f"{path}.env.{k}", v) for k, v in env.items() if isinstance(v, str) and OPEN in v]
    elif isinstance(env, list):
        found += [(f"{path}.env[{j}].value", e["value"]) for j, e in enumerate(env)
                  if isinstance(e, dict) and isinstance(e.get("value"), str) and OPEN in e["value"]]
    template = fields.get("pod_template")
    spec = template.get("spec") if isinstance(template, dict) else None
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for c, container in enumerate(containers if isinstance(containers, list) else ()):
        where = f"{path}.pod_template.spec.containers[{c}]"
        for j, arg in enumerate(container.get("args") or () if isinstance(container, dict) else ()):
            if isinstance(arg, str) and OPEN in arg:
                found.append((f"{where}.args[{j}]", arg))
        for j, var in enumerate(container.get("env") or () if isinstance(container, dict) else ()):
            if isinstance(var, dict) and isinstance(var.get("value"), str) and OPEN in var["value"]:
                found.append((f"{where}.env[{j}].value", var["value"]))
    return found


def substituted(fields: Mapping[str, Any], path: str, values: Mapping[str, list[Piece]]) -> dict[str, Any]:
    """The template's fields with every ``{{ inputs.X }}`` replaced (a copy; the shape is shared)."""
    def sub(text: object, where: str) -> object:
        return _substitute(text, where, values) if isinstance(text, str) and OPEN in text else text

    out = dict(fields)
    for key in ("command", "args"):
        if isinstance(out.get(key), list):
            out[key] = [sub(s, f"{path}.{key}[{i}]") for i, s in enumerate(out[key])]
    env = out.get("env")
    if isinstance(env, dict):
        out["env"] = {k: sub(v, f"{path}.env.{k}") for k, v in env.items()}
    elif isinstance(env, list):
        out["env"] = [{**e, "value": sub(e["value"], f"{path}.env[{j}].value")}
                      if isinstance(e, dict) and "value" in e else e for j, e in enumerate(env)]
    template = out.get("pod_template")
    spec = template.get("spec") if isinstance(template, dict) else None
    if isinstance(template, dict) and isinstance(spec, dict) and isinstance(spec.get("containers"), list):
        containers = []
        for c, container in enumerate(spec["containers"]):
            if isinstance(container, dict):
                where = f"{path}.pod_template.spec.containers[{c}]"
                container = dict(container)
                if isinstance(container.get("args"), list):
                    container["args"] = [sub(s, f"{where}.args[{j}]") for j, s in enumerate(container["args"])]
                if isinstance(container.get("env"), list):
                    container["env"] = [{**e, "value": sub(e["value"], f"{where}.env[{j}].value")}
                                        if isinstance(e, dict) and "value" in e else e
                                        for j, e in enumerate(container["env"])]
            containers.append(container)
        out["pod_template"] = {**template, "spec": {**spec, "containers": containers}}
    return out


def _substitute(text: str, where: str, values: Mapping[str, list[Piece]]) -> str:
    template = parse_template(text, where)
    if template is None or not any(isinstance(p, Reference) and p.kind == "inputs" for p in template.pieces):
        return text
    pieces: list[Piece] = []
    for piece in template.pieces:
        if isinstance(piece, Reference) and piece.kind == "inputs":
            if piece.name not in values:  # parse_shape refuses it first; never a KeyError whatever the caller
                raise ValidationFailed(where, f"{piece.text}: the template declares no input {piece.name!r}")
            pieces += values[piece.name]
        else:
            pieces.append(piece)
    return written(pieces, where)


def written(pieces: Sequence[Piece], where: str) -> str:
    """Pieces as template text that parses back to the same pieces: adjacent literals joined, then
    their ``{{`` escaped, so no literal can meet another piece and open a reference."""
    out: list[str] = []
    literal: list[str] = []
    size = 0
    for piece in [*pieces, None]:
        if isinstance(piece, str):
            literal.append(piece)
            size += len(piece)
        else:
            if literal:
                out.append("".join(literal).replace(OPEN, _ESCAPED_OPEN))
                literal = []
            if piece is not None:
                out.append(piece.text)
                size += len(piece.text)
        if size > limits.COMMAND.max_bytes:
            raise ValidationFailed(where, f"with its inputs substituted is over {limits.COMMAND.max_bytes:,} "
                                   "characters; pass large values by reference (a URI)")
    return "".join(out)
