"""Kubernetes naming rules, checked the way the API server checks them (apimachinery's validation).

Used by the pod fields of a DAG spec (:mod:`leoflow.model.k8s.pod`) so that a bad label key or
volume name is refused when the DAG is applied (422 naming the path), not an hour later when a
pod is created. The rules and limits are Kubernetes' own:

- a *DNS-1123 label* (volume, container and port names): ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, at
  most 63 characters;
- a *DNS-1123 subdomain* (service accounts, Secrets, ConfigMaps, PVCs, priority classes): labels
  joined by dots, at most 253 characters;
- a *qualified name* (label and annotation keys): an optional DNS subdomain prefix and ``/``,
  then a name of at most 63 characters of ``[A-Za-z0-9]`` with ``-_.`` inside;
- a *label value*: empty, or at most 63 characters shaped like a name;
- annotations: any string values, at most 256 KiB of keys and values together.

Every function raises :class:`~leoflow.errors.ValidationFailed` with the path it was given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from leoflow.errors import ValidationFailed
from leoflow.model.bounds import type_name
from leoflow.model.env_names import is_env_name

DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
ANNOTATIONS_TOTAL_MAX = 256 * 1024
#: Prefixes of keys that Leoflow owns on its pods: a spec may not set or override them.
RESERVED_KEY_PREFIXES = ("leoflow.io/",)
RESERVED_KEYS = ("app.kubernetes.io/managed-by",)


def string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a string, got {type_name(value)}")
    return value


def dns_label(value: object, path: str) -> str:
    text = string(value, path)
    if len(text) > DNS_LABEL_MAX or not DNS_LABEL_RE.match(text):
        raise ValidationFailed(path, f"{text[:80]!r} is not a valid name: use 1-63 of a-z, 0-9 and '-', starting "
                               "and ending with a letter or digit (a DNS-1123 label)")
    return text


def dns_subdomain(value: object, path: str) -> str:
    text = string(value, path)
    if len(text) > DNS_SUBDOMAIN_MAX or not DNS_SUBDOMAIN_RE.match(text):
        raise ValidationFailed(path, f"{text[:80]!r} is not a valid Kubernetes object name: use 1-253 of a-z, "
                               "0-9, '-' and '.', starting and ending with a letter or digit (a DNS-1123 subdomain)")
    return text


def qualified_name(value: object, path: str, *, what: str = "key") -> str:
    """A label or annotation key: ``[prefix/]name``."""
    text = string(value, path)
    prefix, slash, name = text.rpartition("/")
    if slash and (not prefix or len(prefix) > DNS_SUBDOMAIN_MAX or not DNS_SUBDOMAIN_RE.match(prefix)
                  or "/" in prefix):
        raise ValidationFailed(path, f"{text[:80]!r} is not a valid {what}: the prefix before '/' must be a DNS "
                               "subdomain (lower case, at most 253 characters), e.g. example.com/team")
    if len(name) > DNS_LABEL_MAX or not _NAME_PART_RE.match(name):
        raise ValidationFailed(path, f"{text[:80]!r} is not a valid {what}: the name part must be 1-63 characters "
                               "of A-Z, a-z, 0-9, '-', '_' and '.', starting and ending with a letter or digit")
    return text


def not_reserved(key: str, path: str) -> None:
    lowered = key.lower()
    if lowered.startswith(RESERVED_KEY_PREFIXES) or lowered in RESERVED_KEYS:
        raise ValidationFailed(path, f"{key!r} is reserved: Leoflow sets the leoflow.io/* keys and "
                               "app.kubernetes.io/managed-by on its pods itself")


def label_value(value: object, path: str) -> str:
    text = string(value, path)
    if len(text) > LABEL_VALUE_MAX or not _LABEL_VALUE_RE.match(text):
        raise ValidationFailed(path, f"{text[:80]!r} is not a valid label value: at most 63 characters of A-Z, "
                               "a-z, 0-9, '-', '_' and '.', starting and ending with a letter or digit (or empty)")
    return text


def _string_map(value: object, path: str, what: str, max_entries: int) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a mapping of {what}, got {type_name(value)}")
    if len(value) > max_entries:
        raise ValidationFailed(path, f"has {len(value)} entries; at most {max_entries} are allowed")
    return value


def label_map(value: object, path: str, *, max_entries: int, reserved_ok: bool = False) -> dict[str, str]:
    """Label keys and values (node selectors use the same rules)."""
    out: dict[str, str] = {}
    for key, item in _string_map(value, path, "label keys to values", max_entries).items():
        qualified_name(key, f"{path}.{key}" if isinstance(key, str) else path, what="label key")
        if not reserved_ok:
            not_reserved(key, f"{path}.{key}")
        out[key] = label_value(item, f"{path}.{key}")
    return dict(sorted(out.items()))


def annotation_map(value: object, path: str, *, max_entries: int, max_bytes: int = ANNOTATIONS_TOTAL_MAX
                   ) -> dict[str, str]:
    out: dict[str, str] = {}
    total = 0
    for key, item in _string_map(value, path, "annotation keys to values", max_entries).items():
        where = f"{path}.{key}" if isinstance(key, str) else path
        # apimachinery: "the rule is QualifiedName except that case doesn't matter"
        qualified_name(string(key, where).lower(), where, what="annotation key")
        not_reserved(key, where)
        out[key] = string(item, f"{path}.{key}")
        total += len(key.encode()) + len(out[key].encode())
    if total > max_bytes:
        raise ValidationFailed(path, f"annotations hold {total} bytes; at most {max_bytes} are allowed")
    return dict(sorted(out.items()))


def reserved_keys_absent(metadata: Mapping[str, object], path: str) -> None:
    """A pod template's labels/annotations may not touch Leoflow's keys either."""
    for group in ("labels", "annotations"):
        entries = metadata.get(group)
        if isinstance(entries, dict):
            for key in entries:
                if isinstance(key, str):
                    not_reserved(key, f"{path}.{group}.{key}")


def env_name(value: object, path: str) -> str:
    text = string(value, path)
    if not is_env_name(text) or len(text) > 256:
        raise ValidationFailed(path, f"{text[:80]!r} is not a valid environment variable name "
                               "(letters, digits and '_', not starting with a digit, at most 256)")
    return text
