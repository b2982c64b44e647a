"""Strict checks of Kubernetes objects (pods and their parts) against the API's own schema.

Task specs carry Kubernetes objects verbatim — volumes, tolerations, affinity, security
contexts, a partial pod as ``pod_template`` — and Leoflow renders whole pods from them. Both are
checked here against :mod:`leoflow.model.k8s.pod_schema` (the Kubernetes OpenAPI schema, distilled):
unknown fields (with a "did you mean"), wrong types (a bool is not an integer), required fields,
and merge keys on lists that strategic merge matches by key. Errors name the path the way a
user points at it (``tasks[0].pod_template.spec.containers[1].ports[0].containerPort``).

Two modes:

- ``partial=True`` for templates and patches: nothing is required except the merge keys of
  list items (a container without ``name`` cannot be merged), and strategic-merge directives
  (``$patch``, ``$retainKeys``, ``$setElementOrder/<list>``, ``$deleteFromPrimitiveList/<list>``)
  are allowed;
- ``partial=False`` for a pod about to be sent: required fields are required and directives are
  refused (merging consumed them).

This is a shape check, not the API server's full validation (it does not know, say, that a
toleration with ``operator: Exists`` must not have a value); the server's 422 still applies and
fails the try with its message.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model.bounds import type_name
from leoflow.model.k8s.pod_schema import REQUIRED, TYPES

#: Nesting deeper than this is refused before any recursion could hurt (a real pod is < 12 deep).
MAX_DEPTH = 32
_QUANTITY_RE = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i?|[munk]|)$")
_PATCH_VALUES = ("replace", "delete", "merge")
_LIST_DIRECTIVES = ("$setElementOrder/", "$deleteFromPrimitiveList/")

Field = tuple[Any, ...]


def child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _article(name: str) -> str:
    return f"an {name}" if name[:1] in "AEIOU" else f"a {name}"


def check_object(value: object, type_: str, path: str, *, partial: bool, depth: int = 0) -> None:
    """``value`` is a valid ``type_`` (a name in :data:`TYPES`) at ``path``."""
    if depth > MAX_DEPTH:
        raise ValidationFailed(path, f"is nested deeper than {MAX_DEPTH} levels")
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be {_article(type_)} (a mapping), got {type_name(value)}")
    fields = TYPES[type_]
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValidationFailed(path, f"field names must be strings, got {key!r}")
        if key.startswith("$"):
            _directive(key, item, fields, child(path, key), partial)
            continue
        spec = fields.get(key)
        if spec is None:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(sorted(fields))})"
            raise ValidationFailed(child(path, key), f"unknown field of {_article(type_)}{hint}")
        check_field(item, spec, child(path, key), partial=partial, depth=depth + 1)
    if not partial and value.get("$patch") is None:
        for name in REQUIRED.get(type_, ()):
            if value.get(name) is None:
                raise ValidationFailed(child(path, name), "is required")


def _directive(key: str, item: object, fields: Mapping[str, Field], path: str, partial: bool) -> None:
    if not partial:
        raise ValidationFailed(path, "strategic-merge directives are only allowed in templates")
    if key == "$patch":
        if item not in _PATCH_VALUES:
            raise ValidationFailed(path, f"must be one of {', '.join(_PATCH_VALUES)}, got {item!r}")
        return
    if key == "$retainKeys" or key.startswith(_LIST_DIRECTIVES):
        if key.startswith(_LIST_DIRECTIVES):
            target = key.split("/", 1)[1]
            if (fields.get(target) or ("",))[0] != "list":
                raise ValidationFailed(path, f"{target!r} is not a list field here")
        if not isinstance(item, list) or not all(isinstance(x, str | int | float) for x in item):
            raise ValidationFailed(path, f"must be a list of values, got {type_name(item)}")
        return
    raise ValidationFailed(path, "unknown strategic-merge directive (known: $patch, $retainKeys, "
                           "$setElementOrder/<list>, $deleteFromPrimitiveList/<list>)")


def check_field(value: object, spec: Field, path: str, *, partial: bool, depth: int = 0) -> None:
    if value is None:  # JSON null: "unset" to the API server, "delete" in a patch
        return
    kind = spec[0]
    if kind == "string":
        if not isinstance(value, str):
            raise ValidationFailed(path, f"must be a string, got {type_name(value)}")
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationFailed(path, f"must be an integer, got {type_name(value)}")
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationFailed(path, f"must be a number, got {type_name(value)}")
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise ValidationFailed(path, f"must be true or false, got {type_name(value)}")
    elif kind == "quantity":
        quantity(value, path)
    elif kind == "int-or-string":
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValidationFailed(path, f"must be an integer or a string, got {type_name(value)}")
    elif kind == "object":
        if not isinstance(value, dict):
            raise ValidationFailed(path, f"must be a mapping, got {type_name(value)}")
    elif kind == "ref":
        check_object(value, spec[1], path, partial=partial, depth=depth)
    elif kind == "map":
        if not isinstance(value, dict):
            raise ValidationFailed(path, f"must be a mapping, got {type_name(value)}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationFailed(path, f"keys must be strings, got {key!r}")
            if not (partial and key == "$patch"):
                check_field(item, spec[1], child(path, key), partial=partial, depth=depth + 1)
    elif kind == "list":
        _check_list(value, spec, path, partial=partial, depth=depth)
    else:  # pragma: no cover - the generator emits only the kinds above
        raise AssertionError(f"unknown schema kind {kind!r}")


def _check_list(value: object, spec: Field, path: str, *, partial: bool, depth: int) -> None:
    if not isinstance(value, list):
        raise ValidationFailed(path, f"must be a list, got {type_name(value)}")
    _, item_spec, strategy, merge_key = spec
    seen: dict[object, int] = {}
    for i, item in enumerate(value):
        item_path = f"{path}[{i}]"
        if partial and isinstance(item, dict) and item.get("$patch") == "replace" and len(item) == 1:
            continue  # {$patch: replace} as a list element: replace the whole list
        check_field(item, item_spec, item_path, partial=partial, depth=depth + 1)
        if strategy == "merge" and merge_key and isinstance(item, dict):
            key = item.get(merge_key)
            if key is None:
                raise ValidationFailed(child(item_path, merge_key), "is required (list items are matched by it)")
            if key in seen:
                raise ValidationFailed(child(item_path, merge_key), f"duplicate {merge_key} {key!r} "
                                       f"(also {path}[{seen[key]}])")
            seen[key] = i


def quantity(value: object, path: str) -> None:
    """A resource quantity like ``100m``, ``1.5Gi`` or ``2``."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValidationFailed(path, f"must be a quantity like 100m or 128Mi, got {type_name(value)}")
    if isinstance(value, str) and not _QUANTITY_RE.match(value):
        raise ValidationFailed(path, f"{value[:40]!r} is not a quantity like 100m or 128Mi")


#: The fields a pod object (complete or partial) may have at the top.
_POD_TOP = ("apiVersion", "kind", "metadata", "spec")


def check_pod(value: object, path: str = "", *, partial: bool) -> dict[str, Any]:
    """A (partial) ``v1/Pod``: ``apiVersion``/``kind`` when given must say so; no ``status``."""
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a pod (a mapping), got {type_name(value)}")
    for key in value:
        if key not in _POD_TOP:
            why = ("is set by Kubernetes" if key == "status"
                   else f"unknown field of a pod (allowed: {', '.join(_POD_TOP)})")
            raise ValidationFailed(child(path, str(key)), why)
    if value.get("apiVersion") not in (None, "v1"):
        raise ValidationFailed(child(path, "apiVersion"), f"must be v1, got {value['apiVersion']!r}")
    if value.get("kind") not in (None, "Pod"):
        raise ValidationFailed(child(path, "kind"), f"must be Pod, got {value['kind']!r}")
    if value.get("metadata") is not None:
        check_object(value["metadata"], "ObjectMeta", child(path, "metadata"), partial=partial)
    if value.get("spec") is not None:
        check_object(value["spec"], "PodSpec", child(path, "spec"), partial=partial)
    elif not partial:
        raise ValidationFailed(child(path, "spec"), "is required")
    return value
