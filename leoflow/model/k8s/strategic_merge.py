"""Strategic merge of pod objects: what ``kubectl patch --type strategic`` does, for pods only.

``pod_template`` layers (the cluster's default template, the DAG's ``defaults``, the task's)
and finally the pod Leoflow builds are merged in that order, each over the previous, with the
semantics Kubernetes users already know from ``kubectl`` and Argo's ``podSpecPatch``:

- mappings merge key by key; a ``null`` value deletes the key;
- lists merge according to the API's patch strategy (from :mod:`leoflow.model.k8s.pod_schema`):
  ``containers``, ``initContainers``, ``volumes``, ``imagePullSecrets`` by ``name``, a
  container's ``env`` by ``name``, ``volumeMounts`` by ``mountPath``, ``ports`` by
  ``containerPort``, ...; matching items merge recursively, new items are appended in the
  patch's order; every other list (``command``, ``args``, ``tolerations``, ...) is replaced;
- directives: ``$patch: replace`` (a mapping replaces instead of merging; as a list element
  ``{$patch: replace}``, the list is replaced), ``$patch: delete`` (a mapping is removed; a list
  item with only its merge key and ``$patch: delete`` removes the matching item),
  ``$retainKeys`` (keep only the listed keys), ``$deleteFromPrimitiveList/<list>`` (remove
  values from a merged primitive list) and ``$setElementOrder/<list>`` (accepted and ignored:
  the result keeps the original's order, then appends).

Pure and total on inputs that passed :func:`leoflow.model.k8s.objects.check_pod` with
``partial=True``; inputs are never mutated.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from leoflow.model.k8s.pod_schema import TYPES

Field = tuple[Any, ...]
_DELETE_FROM = "$deleteFromPrimitiveList/"


def merge_pods(original: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``original`` with ``patch`` merged over it (both partial pods)."""
    result: dict[str, Any] = copy.deepcopy(dict(original))
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif key == "metadata":
            merged = _merge_object(result.get("metadata"), value, "ObjectMeta")
            _set(result, key, merged)
        elif key == "spec":
            _set(result, key, _merge_object(result.get("spec"), value, "PodSpec"))
        else:
            result[key] = copy.deepcopy(value)
    return result


def merge_object(original: Mapping[str, Any] | None, patch: Mapping[str, Any], type_: str) -> dict[str, Any]:
    """``patch`` over ``original``, both of API type ``type_`` (e.g. ``"Container"``)."""
    return _merge_object(original, patch, type_) or {}


def _set(target: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        target.pop(key, None)
    else:
        target[key] = value


def _merge_object(original: Mapping[str, Any] | None, patch: Mapping[str, Any], type_: str | None
                  ) -> dict[str, Any] | None:
    """None means "delete this object" (``$patch: delete``)."""
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    fields = TYPES.get(type_, {}) if type_ else {}
    if directive == "replace":
        return _merge_object(None, {k: v for k, v in patch.items() if k != "$patch"}, type_)
    result: dict[str, Any] = copy.deepcopy(dict(original or {}))
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        _set(result, key, _merge_value(result.get(key), value, fields.get(key) if type_ else None))
    for key, values in patch.items():
        if key.startswith(_DELETE_FROM):
            name = key[len(_DELETE_FROM):]
            if isinstance(result.get(name), list):
                result[name] = [v for v in result[name] if v not in values]
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_value(current: Any, value: Any, spec: Field | None) -> Any:
    kind = spec[0] if spec else None
    if kind == "ref":
        return _merge_object(current if isinstance(current, dict) else None, value, spec[1] if spec else None)
    if kind == "map":
        return _merge_map(current, value, spec[1] if spec else None)
    if kind == "list":
        return _merge_list(current if isinstance(current, list) else [], value, spec) if spec else value
    if kind is None and isinstance(value, dict):  # free-form object: a JSON merge patch
        return _merge_map(current, value, None)
    return copy.deepcopy(value)


def _merge_map(current: Any, value: Mapping[str, Any], item_spec: Field | None) -> dict[str, Any]:
    if value.get("$patch") == "replace":
        current, value = None, {k: v for k, v in value.items() if k != "$patch"}
    result: dict[str, Any] = copy.deepcopy(current) if isinstance(current, dict) else {}
    for key, item in value.items():
        if key.startswith("$"):
            continue
        if item is None:
            result.pop(key, None)
        else:
            _set(result, key, _merge_value(result.get(key), item, item_spec))
    return result


def _merge_list(current: list[Any], patch: list[Any], spec: Field) -> list[Any]:
    _, item_spec, strategy, merge_key = spec
    replace = [e for e in patch if isinstance(e, dict) and e.get("$patch") == "replace" and len(e) == 1]
    # (A Pod has no primitive list with a merge strategy; such lists would be a set union.)
    if strategy != "merge" or replace or item_spec[0] != "ref" or not merge_key:
        return [_fresh(e, item_spec) for e in patch if not (isinstance(e, dict) and e.get("$patch") == "replace"
                                                            and len(e) == 1)]
    result = copy.deepcopy(current)
    for element in patch:
        key = element.get(merge_key)
        position = next((i for i, e in enumerate(result) if isinstance(e, dict) and e.get(merge_key) == key), None)
        if element.get("$patch") == "delete":
            if position is not None:
                del result[position]
            continue
        if position is None:
            fresh = _fresh(element, item_spec)
            if fresh is not None:
                result.append(fresh)
        else:
            merged = _merge_object(result[position], element, item_spec[1])
            if merged is None:
                del result[position]
            else:
                result[position] = merged
    return result


def _fresh(element: Any, item_spec: Field) -> Any:
    """A patch element with no counterpart: itself, with any directives inside consumed."""
    if isinstance(element, dict) and item_spec[0] == "ref":
        return _merge_object(None, element, item_spec[1])
    return copy.deepcopy(element)
