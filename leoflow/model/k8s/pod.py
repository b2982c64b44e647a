"""The pod fields of a DAG spec: what a task's pod needs besides image and command.

A task (and the DAG's ``defaults:`` block, which every container task inherits) may set:

``env`` (list form)    entries ``{name, value}``, ``{name, secret: {name, key}}`` or
                       ``{name, config_map: {name, key}}`` (``optional: true`` allowed in refs);
                       the mapping form ``{NAME: value}`` stays valid
``env_from``           ``[{secret: NAME}, {config_map: NAME}]`` (+ ``prefix``, ``optional``)
``volumes``            Kubernetes ``Volume`` objects of the kinds the ``restricted`` Pod Security
                       profile allows: persistentVolumeClaim, secret, configMap, emptyDir,
                       projected, downwardAPI, csi, ephemeral (others only through pod_template)
``volume_mounts``      Kubernetes ``VolumeMount`` objects of the task container
``node_selector``      node labels; ``tolerations`` / ``affinity`` as in Kubernetes
``priority_class_name``, ``service_account`` (else ``LEOFLOW_K8S_SERVICE_ACCOUNT``),
``automount_service_account_token`` (default false)
``labels``, ``annotations``   validated like Kubernetes; never ``leoflow.io/*``
``image_pull_policy``  Always | IfNotPresent | Never;  ``working_dir``: an absolute path
``security_context``   ``{pod: PodSecurityContext, container: SecurityContext}``
``pod_template``       a partial Pod strategic-merged under what Leoflow builds

Kubernetes objects are written exactly as in Kubernetes (camelCase), so snippets copy over
from ``kubectl explain`` and from Airflow/Argo specs; Leoflow's own field names are snake_case.

**Defaults, overridden per task** (:func:`resolve`): mappings (``node_selector``, ``labels``,
``annotations``, each ``security_context`` part) merge key by key with the task winning;
``env`` merges by name, ``volumes`` by name, ``volume_mounts`` by mount path (the task's entry
replaces the default's); ``env_from`` concatenates; ``tolerations``, ``affinity`` and scalars
are replaced when the task sets them (``tolerations: []`` clears the defaults');
``pod_template`` is the task's template strategic-merged over the DAG's.

Parsing keeps each block's own fields in canonical JSON form (:func:`parse_own`) — what the
stored spec holds and hashes — and :func:`resolve` turns defaults + task into the typed
:class:`PodFields` an executor uses. Every failure is a :class:`ValidationFailed` naming the
path; every field has a limit (:data:`LIMITS`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from leoflow.errors import ValidationFailed
from leoflow.model.bounds import type_name
from leoflow.model.env_names import is_env_name, is_reserved
from leoflow.model.fields import env_field
from leoflow.model.k8s import names
from leoflow.model.k8s.objects import check_object, check_pod, child
from leoflow.model.k8s.strategic_merge import merge_pods

#: Pod fields a task or the DAG's ``defaults`` may set (``env`` is also one, an older field).
POD_FIELDS = ("env_from", "volumes", "volume_mounts", "node_selector", "tolerations", "affinity",
              "priority_class_name", "service_account", "automount_service_account_token", "labels",
              "annotations", "image_pull_policy", "working_dir", "security_context", "pod_template")
DEFAULTS_FIELDS = ("env", *POD_FIELDS)

#: Upper bounds of the pod fields (entries, or bytes of canonical JSON): generous for real
#: jobs, small enough that one spec cannot make every pod object approach the API server's
#: 1.5 MiB request limit.
LIMITS: dict[str, int] = {
    "env entries": 1000, "env value bytes": 32 * 1024, "env_from entries": 32, "volumes": 64, "volume_mounts": 64,
    "node_selector entries": 64, "tolerations": 64, "labels": 64, "annotations": 128,
    "annotations bytes": 64 * 1024, "object bytes": 64 * 1024, "pod_template bytes": 128 * 1024, "path length": 4096,
}
#: Volume sources the ``restricted`` Pod Security profile allows (pod-security-admission's
#: check_restrictedVolumes); anything else can still come through ``pod_template``.
VOLUME_SOURCES = ("persistentVolumeClaim", "secret", "configMap", "emptyDir", "projected", "downwardAPI", "csi",
                  "ephemeral")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_CONFIG_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class KeyRef:
    """One key of a Secret or ConfigMap (resolved by the kubelet; Leoflow never reads it)."""

    name: str
    key: str
    optional: bool = False


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None = None
    secret: KeyRef | None = None
    config_map: KeyRef | None = None


@dataclass(frozen=True)
class EnvSource:
    kind: Literal["secret", "config_map"]
    name: str
    prefix: str | None = None
    optional: bool = False


@dataclass(frozen=True)
class PodFields:
    """A task's pod fields with the DAG's defaults applied (what an executor uses)."""

    env: tuple[EnvVar, ...] = ()
    env_from: tuple[EnvSource, ...] = ()
    volumes: tuple[Mapping[str, Any], ...] = ()
    volume_mounts: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] | None = None
    priority_class_name: str | None = None
    service_account: str | None = None
    #: None: not set by the spec (templates may set it; Leoflow's default is false).
    automount_service_account_token: bool | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    image_pull_policy: str | None = None
    working_dir: str | None = None
    pod_security_context: Mapping[str, Any] = field(default_factory=dict)
    container_security_context: Mapping[str, Any] = field(default_factory=dict)
    pod_template: Mapping[str, Any] = field(default_factory=dict)

    def plain_env(self) -> dict[str, str]:
        return {e.name: e.value for e in self.env if e.value is not None}

    def references(self) -> list[str]:
        """The Secrets and ConfigMaps the pod reads, as ``secret/NAME`` (for messages)."""
        refs = [f"secret/{e.secret.name}" for e in self.env if e.secret]
        refs += [f"configmap/{e.config_map.name}" for e in self.env if e.config_map]
        refs += [f"{'secret' if s.kind == 'secret' else 'configmap'}/{s.name}" for s in self.env_from]
        return sorted(set(refs))


# --------------------------------------------------------------------------- parsing

def parse_own(doc: Mapping[str, Any], path: str, *, fields: tuple[str, ...] = POD_FIELDS) -> dict[str, Any]:
    """The pod fields ``doc`` sets (among ``fields``), validated, in canonical JSON form."""
    own: dict[str, Any] = {}
    for name in fields:
        value = doc.get(name)
        if value is not None:
            own[name] = _PARSERS[name](value, child(path, name))
    return own


def parse_env(value: object, path: str) -> dict[str, str] | list[dict[str, Any]]:
    """``env`` in either form: a mapping of plain values, or a list of entries (refs allowed)."""
    if isinstance(value, dict):
        return dict(sorted(env_field(value, path).items()))
    if not isinstance(value, list):
        raise ValidationFailed(path, f"must be a mapping of names to strings or a list of entries, "
                               f"got {type_name(value)}")
    _max(value, "env entries", path)
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(value):
        item_path = f"{path}[{i}]"
        entry = _mapping(raw, item_path, "an entry like {name: X, value: ...} or {name: X, secret: {name, key}}")
        _only(entry, ("name", "value", "secret", "config_map"), item_path)
        name = names.env_name(entry.get("name"), child(item_path, "name"))
        if is_reserved(name):
            raise ValidationFailed(child(item_path, "name"), "LEOFLOW_* names are reserved for the run context "
                                   "Leoflow gives every task (LEOFLOW_RUN_CONF, LEOFLOW_RUN_ID, ...)")
        if name in seen:
            raise ValidationFailed(child(item_path, "name"), f"duplicate variable {name!r} (also {path}[{seen[name]}])")
        seen[name] = i
        sources = [k for k in ("value", "secret", "config_map") if entry.get(k) is not None]
        if len(sources) != 1:
            raise ValidationFailed(item_path, "needs exactly one of value, secret, config_map")
        kind = sources[0]
        if kind == "value":
            text = names.string(entry["value"], child(item_path, "value"))
            if len(text.encode()) > LIMITS["env value bytes"]:
                raise ValidationFailed(child(item_path, "value"), f"is longer than {LIMITS['env value bytes']} bytes")
            out.append({"name": name, "value": text})
        else:
            out.append({"name": name, kind: _key_ref(entry[kind], child(item_path, kind))})
    return out


def _key_ref(value: object, path: str) -> dict[str, Any]:
    ref = _mapping(value, path, "{name: OBJECT, key: KEY}")
    _only(ref, ("name", "key", "optional"), path)
    out: dict[str, Any] = {"name": names.dns_subdomain(ref.get("name"), child(path, "name"))}
    key = names.string(ref.get("key"), child(path, "key"))
    if len(key) > names.DNS_SUBDOMAIN_MAX or not _CONFIG_KEY_RE.match(key):
        raise ValidationFailed(child(path, "key"), f"{key[:80]!r} is not a valid key (a-z, A-Z, 0-9, '-', '_', '.')")
    out["key"] = key
    if ref.get("optional") is not None:
        out["optional"] = _bool(ref["optional"], child(path, "optional"))
    return out


def _env_from(value: object, path: str) -> list[dict[str, Any]]:
    items = _list(value, path, "env_from entries")
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(items):
        item_path = f"{path}[{i}]"
        entry = _mapping(raw, item_path, "{secret: NAME} or {config_map: NAME}")
        _only(entry, ("secret", "config_map", "prefix", "optional"), item_path)
        kinds = [k for k in ("secret", "config_map") if entry.get(k) is not None]
        if len(kinds) != 1:
            raise ValidationFailed(item_path, "needs exactly one of secret, config_map")
        source: dict[str, Any] = {kinds[0]: names.dns_subdomain(entry[kinds[0]], child(item_path, kinds[0]))}
        if entry.get("prefix") is not None:
            prefix = names.string(entry["prefix"], child(item_path, "prefix"))
            if not is_env_name(prefix) or is_reserved(prefix):
                raise ValidationFailed(child(item_path, "prefix"), f"{prefix[:80]!r} must start a variable name "
                                       "(letters, digits, '_') and not be LEOFLOW_")
            source["prefix"] = prefix
        if entry.get("optional") is not None:
            source["optional"] = _bool(entry["optional"], child(item_path, "optional"))
        if source in out:
            raise ValidationFailed(item_path, "duplicate entry")
        out.append(source)
    return out


def _volumes(value: object, path: str) -> list[dict[str, Any]]:
    items = _list(value, path, "volumes")
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        item_path = f"{path}[{i}]"
        check_object(item, "Volume", item_path, partial=False)
        name = names.dns_label(item["name"], child(item_path, "name"))
        if name in seen:
            raise ValidationFailed(child(item_path, "name"), f"duplicate volume {name!r} (also {path}[{seen[name]}])")
        seen[name] = i
        sources = [k for k, v in item.items() if k != "name" and v is not None]
        if len(sources) != 1:
            raise ValidationFailed(item_path, f"needs exactly one volume source (e.g. {', '.join(VOLUME_SOURCES[:4])})")
        if sources[0] not in VOLUME_SOURCES:
            raise ValidationFailed(child(item_path, sources[0]), f"is not allowed here (allowed: "
                                   f"{', '.join(VOLUME_SOURCES)}: what the restricted Pod Security profile "
                                   "permits); put other volume kinds in pod_template")
    return [_canonical(v) for v in items]


def _volume_mounts(value: object, path: str) -> list[dict[str, Any]]:
    items = _list(value, path, "volume_mounts")
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        item_path = f"{path}[{i}]"
        check_object(item, "VolumeMount", item_path, partial=False)
        names.dns_label(item["name"], child(item_path, "name"))
        mount = _absolute_path(item["mountPath"], child(item_path, "mountPath"))
        if mount in seen:
            raise ValidationFailed(child(item_path, "mountPath"), f"duplicate mount path {mount!r} "
                                   f"(also {path}[{seen[mount]}])")
        seen[mount] = i
    return [_canonical(v) for v in items]


def _tolerations(value: object, path: str) -> list[dict[str, Any]]:
    items = _list(value, path, "tolerations")
    for i, item in enumerate(items):
        item_path = f"{path}[{i}]"
        check_object(item, "Toleration", item_path, partial=False)
        operator = item.get("operator") or "Equal"
        if operator not in _TOLERATION_OPERATORS:
            raise ValidationFailed(child(item_path, "operator"), f"must be Exists or Equal, got {operator!r}")
        if (item.get("effect") or "") not in _TOLERATION_EFFECTS:
            raise ValidationFailed(child(item_path, "effect"), "must be NoSchedule, PreferNoSchedule or NoExecute, "
                                   f"got {item['effect']!r}")
        if operator == "Exists" and item.get("value"):
            raise ValidationFailed(child(item_path, "value"), "must be empty when operator is Exists")
        if not item.get("key") and operator != "Exists":
            raise ValidationFailed(child(item_path, "operator"), "must be Exists when key is empty (tolerate all)")
    return [_canonical(v) for v in items]


def _k8s_object(type_: str) -> Any:
    def parse(value: object, path: str) -> dict[str, Any]:
        check_object(value, type_, path, partial=False)
        out: dict[str, Any] = _sized(_canonical(value), path, "object bytes")
        return out
    return parse


def _security_context(value: object, path: str) -> dict[str, Any]:
    doc = _mapping(value, path, "{pod: {...}, container: {...}}")
    _only(doc, ("pod", "container"), path)
    out: dict[str, Any] = {}
    if doc.get("pod") is not None:
        out["pod"] = _k8s_object("PodSecurityContext")(doc["pod"], child(path, "pod"))
    if doc.get("container") is not None:
        out["container"] = _k8s_object("SecurityContext")(doc["container"], child(path, "container"))
    return out


def parse_pod_template(value: object, path: str) -> dict[str, Any]:
    """A partial Pod (``pod_template``, ``LEOFLOW_K8S_POD_TEMPLATE``), canonical form."""
    pod = check_pod(value, path, partial=True)
    names.reserved_keys_absent(pod.get("metadata") or {}, child(path, "metadata"))
    out: dict[str, Any] = _sized(_canonical(pod), path, "pod_template bytes")
    return out


def _choice(allowed: tuple[str, ...]) -> Any:
    def parse(value: object, path: str) -> str:
        if value not in allowed:
            raise ValidationFailed(path, f"must be one of {', '.join(allowed)}, got {value!r}")
        return str(value)
    return parse


def _absolute_path(value: object, path: str) -> str:
    text = names.string(value, path)
    if not text.startswith("/") or len(text) > LIMITS["path length"] or "\x00" in text:
        raise ValidationFailed(path, f"must be an absolute path (starting with /, at most {LIMITS['path length']} "
                               f"characters), got {text[:80]!r}")
    return text


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(path, f"must be true or false, got {type_name(value)}")
    return value


_PARSERS: dict[str, Any] = {
    "env": parse_env,
    "env_from": _env_from,
    "volumes": _volumes,
    "volume_mounts": _volume_mounts,
    "node_selector": lambda v, p: names.label_map(v, p, max_entries=LIMITS["node_selector entries"], reserved_ok=True),
    "tolerations": _tolerations,
    "affinity": _k8s_object("Affinity"),
    "priority_class_name": names.dns_subdomain,
    "service_account": names.dns_subdomain,
    "automount_service_account_token": _bool,
    "labels": lambda v, p: names.label_map(v, p, max_entries=LIMITS["labels"]),
    "annotations": lambda v, p: names.annotation_map(v, p, max_entries=LIMITS["annotations"],
                                                  max_bytes=LIMITS["annotations bytes"]),
    "image_pull_policy": _choice(PULL_POLICIES),
    "working_dir": _absolute_path,
    "security_context": _security_context,
    "pod_template": parse_pod_template,
}


# --------------------------------------------------------------------------- defaults + task

def resolve(defaults: Mapping[str, Any], own: Mapping[str, Any]) -> PodFields:
    """The effective pod fields of a task: its own canonical fields over the DAG's defaults."""
    env = _merge_by(_env_entries(defaults.get("env")), _env_entries(own.get("env")), "name")
    volumes = _merge_by(defaults.get("volumes", []), own.get("volumes", []), "name")
    mounts = _merge_by(defaults.get("volume_mounts", []), own.get("volume_mounts", []), "mountPath")
    env_from = list(defaults.get("env_from", []))
    env_from += [s for s in own.get("env_from", []) if s not in env_from]
    security = {part: {**defaults.get("security_context", {}).get(part, {}),
                       **own.get("security_context", {}).get(part, {})} for part in ("pod", "container")}
    template = merge_pods(defaults.get("pod_template", {}), own.get("pod_template", {}))

    def pick(name: str, default: Any = None) -> Any:
        return own[name] if name in own else defaults.get(name, default)

    return PodFields(
        env=tuple(_env_var(e) for e in env),
        env_from=tuple(EnvSource("secret" if "secret" in s else "config_map", s.get("secret") or s["config_map"],
                                 s.get("prefix"), s.get("optional", False)) for s in env_from),
        volumes=tuple(volumes), volume_mounts=tuple(mounts),
        node_selector={**defaults.get("node_selector", {}), **own.get("node_selector", {})},
        tolerations=tuple(pick("tolerations", [])), affinity=pick("affinity"),
        priority_class_name=pick("priority_class_name"), service_account=pick("service_account"),
        automount_service_account_token=pick("automount_service_account_token"),
        labels={**defaults.get("labels", {}), **own.get("labels", {})},
        annotations={**defaults.get("annotations", {}), **own.get("annotations", {})},
        image_pull_policy=pick("image_pull_policy"), working_dir=pick("working_dir"),
        pod_security_context=security["pod"], container_security_context=security["container"],
        pod_template=template,
    )


def _env_entries(env: object) -> list[dict[str, Any]]:
    if isinstance(env, dict):
        return [{"name": k, "value": v} for k, v in sorted(env.items())]
    return list(env) if isinstance(env, list) else []


def _merge_by(defaults: list[dict[str, Any]], own: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The defaults' entries the task does not replace, then the task's (matched by ``key``)."""
    mine = {e[key] for e in own}
    return [e for e in defaults if e[key] not in mine] + list(own)


def _env_var(entry: Mapping[str, Any]) -> EnvVar:
    def ref(kind: str) -> KeyRef | None:
        r = entry.get(kind)
        return KeyRef(r["name"], r["key"], r.get("optional", False)) if r else None
    return EnvVar(entry["name"], entry.get("value"), ref("secret"), ref("config_map"))


# --------------------------------------------------------------------------- read access

#: What a read-scoped caller sees instead of a plain env value.
HIDDEN = "<hidden>"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def hide_env_values(spec: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """A stored spec with every plain env value replaced by :data:`HIDDEN`; and whether any was.

    Covers the tasks' and the defaults' ``env`` (either form) and the env of every container in
    their ``pod_template``. References (Secret/ConfigMap names and keys) stay: they are not
    secret, and they say where a value comes from. ``spec`` is not modified.
    """
    out = json.loads(json.dumps(spec))
    hidden = False

    def env(block: dict[str, Any]) -> None:
        nonlocal hidden
        value = block.get("env")
        if isinstance(value, dict):
            hidden |= bool(value)
            block["env"] = dict.fromkeys(value, HIDDEN)
        elif isinstance(value, list):
            for entry in value:
                if isinstance(entry, dict) and "value" in entry:
                    entry["value"], hidden = HIDDEN, True
        template_spec = (block.get("pod_template") or {}).get("spec") or {}
        for group in _CONTAINER_LISTS:
            for container in template_spec.get(group) or []:
                for entry in container.get("env") or []:
                    if isinstance(entry, dict) and "value" in entry:
                        entry["value"], hidden = HIDDEN, True

    for task in out.get("tasks") or []:
        if isinstance(task, dict):
            env(task)
    if isinstance(out.get("defaults"), dict):
        env(out["defaults"])
    return out, hidden


# --------------------------------------------------------------------------- helpers

def _canonical(value: Any) -> Any:
    """A deep copy with mapping keys sorted (lists keep their order: it is meaningful)."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _sized(value: Any, path: str, limit: str) -> Any:
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > LIMITS[limit]:
        raise ValidationFailed(path, f"is {size} bytes as JSON; at most {LIMITS[limit]} are allowed")
    return value


def _mapping(value: object, path: str, shape: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be {shape}, got {type_name(value)}")
    return value


def _only(doc: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in doc:
        if key not in allowed:
            raise ValidationFailed(child(path, str(key)), f"unknown field (allowed: {', '.join(allowed)})")


def _list(value: object, path: str, limit: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValidationFailed(path, f"must be a list, got {type_name(value)}")
    _max(value, limit, path)
    return value


def _max(items: list[Any], limit: str, path: str) -> None:
    if len(items) > LIMITS[limit]:
        raise ValidationFailed(path, f"has {len(items)} entries; at most {LIMITS[limit]} are allowed")
