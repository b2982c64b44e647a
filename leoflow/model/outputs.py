"""Task outputs: what a task declares, and the one check of what a try wrote (ADR 0014, decision 1).

A task that declares ``outputs: {NAME: {type: ..., optional: bool}}`` is given ``LEOFLOW_OUTPUTS``,
a file it may fill with one JSON object. Locally the executor reads the file after the process
exits; on Kubernetes the file is the ``task`` container's termination log, which the kubelet
copies into the pod's status. Either way the bytes reach the leader raw, and :func:`check_outputs`
decides — the same function for both executors, so a value accepted on one is accepted on the
other. Its verdict is a try's: a rejection fails the try with :attr:`OutputsRejected.reason`
(retries apply), never the scheduler; nothing here raises anything else, whatever the bytes.

Why 4,095 bytes, one under 4 KiB: the kubelet keeps the *last* 4,096 bytes of a longer file, so
a 4,096-byte message may be the tail of a cut one. Refusing it makes the check exact on both
executors. Large data belongs in the user's storage: outputs carry its URI.

The bytes are measured before they are parsed, so the cost of the check is bounded by the 4,095
bytes whatever a task writes; the most brackets those hold (about 2,000) meet the decoder's
recursion guard, a rejection like any other.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_name, shown, type_name

OutputType = Literal["string", "integer", "number", "boolean", "array", "object", "any"]
OUTPUT_TYPES: tuple[OutputType, ...] = get_args(OutputType)

#: The most bytes an executor reads of what a try wrote: one more than a termination message can
#: hold, enough to know the outputs are too large without reading a file of any size.
READ_AT_MOST = limits.OUTPUTS.max_bytes + 2

_INT64 = 2**63
_TOO_DEEP = f"outputs are nested more than {limits.OUTPUTS.max_depth} levels deep"
_DECL_FIELDS = ("type", "optional")
#: JSON's names for the decoded types, as the reasons say them.
_JSON_TYPES: dict[type, str] = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
                                float: "number", type(None): "null"}


@dataclass(frozen=True)
class OutputDecl:
    """One declared output: its JSON type (``any``: whatever JSON value) and whether it may be absent."""

    type: OutputType
    optional: bool = False

    def to_canonical(self) -> dict[str, Any]:
        return {"type": self.type, "optional": self.optional}


class CheckedOutputs(NamedTuple):
    """Outputs that passed :func:`check_outputs`: the object, and its size in bytes as written."""

    values: dict[str, Any]
    size: int


class OutputsRejected(Exception):
    """What a try wrote is not outputs its task may hand on; ``reason`` is the try's failure, one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_output_decls(value: object, path: str) -> dict[str, OutputDecl]:
    """The task field ``outputs:``, validated; ValidationFailed naming the path of the first problem.

    Names keep the declaration order (the canonical form sorts them).
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a mapping of output names to {{type, optional}}, got {type_name(value)}")
    if len(value) > limits.OUTPUT_DECLS.maximum:
        raise ValidationFailed(path, f"declares {len(value):,} outputs; at most {limits.OUTPUT_DECLS.maximum} "
                               "are allowed (pass a URI to larger data)")
    decls: dict[str, OutputDecl] = {}
    for name, raw in value.items():
        check_name(name, path, limits.OUTPUT_NAME)
        decls[name] = _decl(raw, f"{path}.{name}")
    return decls


def _decl(raw: object, path: str) -> OutputDecl:
    if not isinstance(raw, dict):
        raise ValidationFailed(path, f"must be a mapping like {{type: string}}, got {type_name(raw)}")
    for key in raw:
        if key not in _DECL_FIELDS:
            name = key if isinstance(key, str) else type_name(key)
            raise ValidationFailed(f"{path}.{name[:60]}", f"unknown field (allowed: {', '.join(_DECL_FIELDS)})")
    kind = raw.get("type")
    if kind is None:
        raise ValidationFailed(f"{path}.type", f"is required: one of {', '.join(OUTPUT_TYPES)}")
    if not isinstance(kind, str) or kind not in OUTPUT_TYPES:
        got = shown(kind) if isinstance(kind, str) else type_name(kind)
        raise ValidationFailed(f"{path}.type", f"must be one of {', '.join(OUTPUT_TYPES)}, got {got}")
    optional = raw.get("optional", False)
    if not isinstance(optional, bool):
        raise ValidationFailed(f"{path}.optional", f"must be true or false, got {type_name(optional)}")
    return OutputDecl(type=kind, optional=optional)


def canonical_decls(decls: Mapping[str, OutputDecl]) -> dict[str, Any]:
    """``outputs:`` as the canonical spec stores it: names sorted, every default written."""
    return {name: decls[name].to_canonical() for name in sorted(decls)}


# --------------------------------------------------------------------------- checking what a try wrote

def too_large_reason(size: int, *, termination_message: bool) -> str:
    """The reason for outputs of ``size`` bytes or more (``size`` > 4,095).

    From a termination message the size says nothing: the kubelet kept the last 4,096 bytes of
    whatever was written. From a file, the executor read at most :data:`READ_AT_MOST` bytes, so a
    size that large means "at least".
    """
    maximum = limits.OUTPUTS.max_bytes
    if termination_message:
        return f"outputs are {maximum + 1:,} bytes or more (Kubernetes keeps only the last {maximum + 1:,})"
    shown_size = f"more than {maximum + 1:,}" if size >= READ_AT_MOST else f"{size:,}"
    return f"outputs are {shown_size} bytes; at most {maximum:,} are allowed (pass a URI to larger data)"


#: The kubelet's budget for all of a pod's termination messages together
#: (``MaxPodTerminationMessageLogLength``); past it, each is cut to an equal share.
POD_MESSAGES_BYTES = 12 * 1024


def cut_by_the_pod_budget(size: int, containers: int) -> str | None:
    """The reason, when a termination message of ``size`` bytes may have been cut to its share.

    When a pod's messages pass 12 KiB the kubelet cuts every message longer than 12 KiB divided
    by the number of containers to that length; with four containers or more that share is under
    4,095 bytes, and a message of exactly the share may be a cut one. Refused, saying so (ADR 0014).
    """
    share = POD_MESSAGES_BYTES // containers if containers > 0 else POD_MESSAGES_BYTES
    if share > limits.OUTPUTS.max_bytes or size < share:
        return None
    return (f"outputs are {size:,} bytes, the share each of the pod's {containers} containers keeps once their "
            f"termination messages pass {POD_MESSAGES_BYTES:,} bytes: the kubelet may have cut them (write "
            "less, or less to the other containers' termination logs)")


def check_outputs(raw: bytes, declared: Mapping[str, OutputDecl], *, termination_message: bool) -> CheckedOutputs:
    """Check what a try wrote against its task's declarations; OutputsRejected(reason) when it fails.

    Empty (a task that wrote nothing: no file, or an untouched termination log) is the object
    ``{}``, so a required output is then reported missing. ``termination_message``: the bytes are
    a Kubernetes termination message (the size reason says why 4,096 is refused).
    """
    size = len(raw)
    if size > limits.OUTPUTS.max_bytes:
        raise OutputsRejected(too_large_reason(size, termination_message=termination_message))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise OutputsRejected(f"outputs are not valid UTF-8 (byte {error.start:,} of {size:,})") from None
    if "\x00" in text:
        raise OutputsRejected("outputs must not contain NUL characters")
    values = _object(text) if text.strip() else {}
    _check_shape(values)
    _check_declared(values, declared)
    return CheckedOutputs(values=values, size=size)


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                           parse_int=_int64, parse_float=_finite)
    except OutputsRejected:
        raise
    except json.JSONDecodeError as error:
        raise OutputsRejected(f"outputs are not valid JSON: {error.msg} (line {error.lineno}, column "
                              f"{error.colno})") from None
    except RecursionError:  # ~2,000 brackets fit in 4,095 bytes; the decoder's guard stops them
        raise OutputsRejected(_TOO_DEEP) from None
    except ValueError as error:  # a reason, never a crash
        raise OutputsRejected(f"outputs are not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise OutputsRejected(f"outputs must be a JSON object, got {_json_type(value)}")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise OutputsRejected(f"outputs have the key {shown(key)} twice")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise OutputsRejected(f"outputs must be plain JSON: {name} is not a JSON number")


def _int64(digits: str) -> int:
    value = int(digits)
    if not -_INT64 <= value < _INT64:
        raise OutputsRejected(f"outputs hold the integer {shown(digits)}, outside 64 bits")
    return value


def _finite(digits: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise OutputsRejected(f"outputs hold the number {shown(digits)}, too large for a 64-bit float")
    return value


def _check_shape(values: dict[str, Any]) -> None:
    """Nested at most 16 deep, at most 1,000 keys and items in all, and every string storable by
    jsonb (no NUL, no lone surrogate); without recursion."""
    entries = 0
    stack: list[tuple[Any, int]] = [(values, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list) and depth > limits.OUTPUTS.max_depth:
            raise OutputsRejected(_TOO_DEEP)
        if isinstance(item, dict):
            entries += len(item)
            for key in item:
                _storable(key)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            entries += len(item)
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            _storable(item)
        if entries > limits.OUTPUTS.max_entries:
            raise OutputsRejected(f"outputs have more than {limits.OUTPUTS.max_entries:,} keys and items in all")


def _storable(text: str) -> None:
    if "\x00" in text:  # written as \u0000
        raise OutputsRejected("outputs must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise OutputsRejected("outputs hold a lone surrogate (\\ud800-\\udfff), which is not Unicode") from None


def _check_declared(values: Mapping[str, Any], declared: Mapping[str, OutputDecl]) -> None:
    for name in values:
        if name not in declared:
            names = ", ".join(sorted(declared)) or "none"
            raise OutputsRejected(f"output {shown(name)} is not declared (declared: {names})")
    for name, decl in declared.items():
        if name not in values:
            if not decl.optional:
                raise OutputsRejected(f"required output {name!r} is missing")
            continue
        if not _has_type(values[name], decl.type):
            raise OutputsRejected(f"output {name!r} must be {_article(decl.type)}, got {_json_type(values[name])}")


def _has_type(value: object, kind: OutputType) -> bool:
    if kind == "any":
        return True
    if kind == "integer":  # 3.0 is the integer 3, as JSON Schema counts it
        return (isinstance(value, int) and not isinstance(value, bool)) or \
            (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return _JSON_TYPES.get(type(value)) == kind


def _json_type(value: object) -> str:
    return _article(_JSON_TYPES.get(type(value), type(value).__name__))


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else ("null" if kind == "null" else f"a {kind}")
