"""Pod settings as typed objects, mirroring the spec's pod fields (docs/dag-spec.md, "Task pods").

Each class writes exactly the mapping a YAML author writes for the same field (``to_spec()``),
so a typo is an error of the type checker or of the constructor rather than of the server, and
nothing is added that the spec does not have: the server's validator (``leoflow.model.k8s.pod``)
still judges the values. Kubernetes' own objects (``volumes``, ``volume_mounts``,
``tolerations``, ``affinity``, ``security_context``) keep Kubernetes' camelCase keys, as in YAML.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class Resources:
    """``resources:``: quantities like ``"500m"``, ``"1Gi"`` or numbers."""

    requests: Mapping[str, str | int | float] = field(default_factory=dict)
    limits: Mapping[str, str | int | float] = field(default_factory=dict)

    def to_spec(self) -> dict[str, Any]:
        return {k: dict(v) for k, v in (("requests", self.requests), ("limits", self.limits)) if v}


@dataclass(frozen=True)
class KeyRef:
    """A key of a Secret or ConfigMap (``{name, key, optional}``)."""

    name: str
    key: str
    optional: bool | None = None

    def to_spec(self) -> dict[str, Any]:
        return _drop_none({"name": self.name, "key": self.key, "optional": self.optional})


@dataclass(frozen=True)
class Env:
    """One ``env`` entry of the list form: a value, a Secret's key or a ConfigMap's key."""

    name: str
    value: str | None = None
    secret: KeyRef | None = None
    config_map: KeyRef | None = None

    def to_spec(self) -> dict[str, Any]:
        return _drop_none({"name": self.name, "value": self.value,
                           "secret": self.secret.to_spec() if self.secret else None,
                           "config_map": self.config_map.to_spec() if self.config_map else None})


@dataclass(frozen=True)
class EnvFrom:
    """``env_from:`` entry: every key of a Secret or a ConfigMap as variables."""

    secret: str | None = None
    config_map: str | None = None
    prefix: str | None = None
    optional: bool | None = None

    def to_spec(self) -> dict[str, Any]:
        return _drop_none({"secret": self.secret, "config_map": self.config_map, "prefix": self.prefix,
                           "optional": self.optional})


@dataclass(frozen=True)
class Volume:
    """A pod volume: ``name`` and one source, as Kubernetes writes it (``{"secret": {"secretName": …}}``)."""

    name: str
    source: Mapping[str, Any]

    @classmethod
    def secret(cls, name: str, secret_name: str) -> Volume:
        return cls(name, {"secret": {"secretName": secret_name}})

    @classmethod
    def config_map(cls, name: str, config_map: str) -> Volume:
        return cls(name, {"configMap": {"name": config_map}})

    @classmethod
    def pvc(cls, name: str, claim: str, read_only: bool | None = None) -> Volume:
        return cls(name, {"persistentVolumeClaim": _drop_none({"claimName": claim, "readOnly": read_only})})

    @classmethod
    def empty_dir(cls, name: str, size_limit: str | None = None) -> Volume:
        return cls(name, {"emptyDir": _drop_none({"sizeLimit": size_limit})})

    def to_spec(self) -> dict[str, Any]:
        return {"name": self.name, **self.source}


@dataclass(frozen=True)
class VolumeMount:
    name: str
    mount_path: str
    read_only: bool | None = None
    sub_path: str | None = None

    def to_spec(self) -> dict[str, Any]:
        return _drop_none({"name": self.name, "mountPath": self.mount_path, "readOnly": self.read_only,
                           "subPath": self.sub_path})


@dataclass(frozen=True)
class Toleration:
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def to_spec(self) -> dict[str, Any]:
        return _drop_none({"key": self.key, "operator": self.operator, "value": self.value, "effect": self.effect,
                           "tolerationSeconds": self.toleration_seconds})


@dataclass(frozen=True)
class SecurityContext:
    """``security_context:``: the pod's and the ``task`` container's (Kubernetes' own fields)."""

    pod: Mapping[str, Any] | None = None
    container: Mapping[str, Any] | None = None

    def to_spec(self) -> dict[str, Any]:
        return _drop_none({"pod": dict(self.pod) if self.pod is not None else None,
                           "container": dict(self.container) if self.container is not None else None})


@dataclass(frozen=True)
class Pod:
    """The pod fields a task sets, or a DAG's ``defaults:`` (every container task inherits them).

    ``env`` is the mapping form (``{NAME: value}``) or a list of :class:`Env` entries; the
    other fields are the spec's, one for one. A field left ``None`` is not written.
    """

    env: Mapping[str, Any] | Sequence[Env] | None = None
    env_from: Sequence[EnvFrom] | None = None
    volumes: Sequence[Volume] | None = None
    volume_mounts: Sequence[VolumeMount] | None = None
    node_selector: Mapping[str, str] | None = None
    tolerations: Sequence[Toleration] | None = None
    affinity: Mapping[str, Any] | None = None
    priority_class_name: str | None = None
    service_account: str | None = None
    automount_service_account_token: bool | None = None
    labels: Mapping[str, str] | None = None
    annotations: Mapping[str, str] | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    working_dir: str | None = None
    security_context: SecurityContext | None = None
    pod_template: Mapping[str, Any] | None = None

    def to_spec(self) -> dict[str, Any]:
        """The fields as the spec writes them (``env`` may still hold references: rendered by the DAG)."""
        env: Any = self.env
        if env is not None and not isinstance(env, Mapping):
            env = [e.to_spec() if isinstance(e, Env) else e for e in env]
        elif env is not None:
            env = dict(env)
        return _drop_none({
            "env": env,
            "env_from": _specs(self.env_from),
            "volumes": _specs(self.volumes),
            "volume_mounts": _specs(self.volume_mounts),
            "node_selector": None if self.node_selector is None else dict(self.node_selector),
            "tolerations": _specs(self.tolerations),
            "affinity": None if self.affinity is None else dict(self.affinity),
            "priority_class_name": self.priority_class_name,
            "service_account": self.service_account,
            "automount_service_account_token": self.automount_service_account_token,
            "labels": None if self.labels is None else dict(self.labels),
            "annotations": None if self.annotations is None else dict(self.annotations),
            "image_pull_policy": self.image_pull_policy,
            "working_dir": self.working_dir,
            "security_context": self.security_context.to_spec() if self.security_context else None,
            "pod_template": None if self.pod_template is None else dict(self.pod_template),
        })


def _specs(items: Sequence[Any] | None) -> list[Any] | None:
    if items is None:
        return None
    return [i.to_spec() if hasattr(i, "to_spec") else i for i in items]


@dataclass(frozen=True)
class RetryPolicy:
    """``retry_policy:``: which failed tries are retried and how the delay grows (ADR 0014, decision 5)."""

    factor: float | None = None
    max_duration_seconds: float | None = None
    on_exit_codes: Sequence[int] | None = None
    #: A CEL expression over ``try.*`` (``"try.oom_killed || try.exit_code == 75"``).
    when: str | None = None

    def to_spec(self) -> dict[str, Any]:
        return _drop_none({"factor": self.factor, "max_duration_seconds": self.max_duration_seconds,
                           "on_exit_codes": None if self.on_exit_codes is None else list(self.on_exit_codes),
                           "when": self.when})


@dataclass(frozen=True)
class Output:
    """A declared output: ``{type: …, optional: …}`` (a plain type name is also accepted)."""

    type: Literal["string", "integer", "number", "boolean", "array", "object", "any"] = "any"
    optional: bool = False

    def to_spec(self) -> dict[str, Any]:
        return {"type": self.type, **({"optional": True} if self.optional else {})}
