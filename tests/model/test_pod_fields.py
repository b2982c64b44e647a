"""Pod fields of DAG specs: each field accepted, each poison refused with its path, defaults overridden per task."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from leoflow.errors import ValidationFailed
from leoflow.model.files.yaml_loader import load_yaml
from leoflow.model.k8s.pod import LIMITS, EnvSource, EnvVar, KeyRef
from leoflow.model.spec.dag import DagSpec, TaskSpec, parse_dag_spec

TASK = {"id": "load", "image": "etl:1", "command": ["run"]}


def dag(task: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return {"dag_id": "d", "tasks": [{**TASK, **(task or {})}], **top}


def parsed(task: dict[str, Any] | None = None, **top: Any) -> TaskSpec:
    spec = parse_dag_spec(dag(task, **top))
    again = parse_dag_spec(json.loads(json.dumps(spec.to_canonical())))
    assert again == spec and again.spec_hash() == spec.spec_hash()  # the canonical form round-trips
    return spec.tasks[0]


def refused(task: dict[str, Any] | None = None, **top: Any) -> tuple[str, str]:
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(dag(task, **top))
    return info.value.path, info.value.problem


# ------------------------------------------------------------------------------------ accepted


def test_env_keeps_its_mapping_form_and_hash() -> None:
    spec = parse_dag_spec(dag({"env": {"B": "2", "A": "1"}}))
    assert spec.tasks[0].env == {"A": "1", "B": "2"}
    assert spec.to_canonical()["tasks"][0]["env"] == {"A": "1", "B": "2"}
    assert "defaults" not in spec.to_canonical()
    # A spec without pod fields hashes exactly as it did before they existed (computed with the
    # code of main at 4122883): re-applying an old file creates no new version.
    assert spec.spec_hash() == "5982e5203e53983f27a39474310f2b5dbf4e0c5e5fdf35245702668eac74ae2f"
    assert set(spec.to_canonical()["tasks"][0]) == {"id", "kind", "image", "command", "args", "env", "resources",
                                                    "retries", "retry_delay_seconds", "depends_on"}


def test_env_references() -> None:
    task = parsed({"env": [{"name": "USER", "value": "etl"},
                           {"name": "PASSWORD", "secret": {"name": "pg", "key": "password"}},
                           {"name": "MODE", "config_map": {"name": "etl-config", "key": "mode", "optional": True}}],
                   "env_from": [{"secret": "etl-secrets"}, {"config_map": "etl-config", "prefix": "CFG_",
                                                             "optional": True}]})
    assert task.pod.env == (EnvVar("USER", "etl"), EnvVar("PASSWORD", secret=KeyRef("pg", "password")),
                            EnvVar("MODE", config_map=KeyRef("etl-config", "mode", True)))
    assert task.env == {"USER": "etl"}  # what a subprocess gets: plain values only
    assert task.pod.env_from == (EnvSource("secret", "etl-secrets"),
                                 EnvSource("config_map", "etl-config", "CFG_", True))
    assert task.pod.references() == ["configmap/etl-config", "secret/etl-secrets", "secret/pg"]


def test_every_field_once() -> None:
    task = parsed({
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "etl-data"}},
                    {"name": "creds", "secret": {"secretName": "gcs", "items": [{"key": "k", "path": "key.json"}]}},
                    {"name": "conf", "configMap": {"name": "etl-config"}},
                    {"name": "scratch", "emptyDir": {"sizeLimit": "2Gi"}}],
        "volume_mounts": [{"name": "data", "mountPath": "/data"}, {"name": "creds", "mountPath": "/creds",
                                                                   "readOnly": True}],
        "node_selector": {"cloud.google.com/gke-nodepool": "batch"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "etl", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}},
        "priority_class_name": "batch-high", "service_account": "etl-runner",
        "automount_service_account_token": True, "labels": {"team": "data"},
        "annotations": {"example.com/owner": "data-platform@example.com"},
        "image_pull_policy": "Always", "working_dir": "/work",
        "security_context": {"pod": {"runAsUser": 1000, "fsGroup": 2000},
                             "container": {"readOnlyRootFilesystem": True}},
        "pod_template": {"spec": {"containers": [{"name": "log-agent", "image": "fluent-bit:3"}]}},
    })
    pod = task.pod
    assert [v["name"] for v in pod.volumes] == ["data", "creds", "conf", "scratch"]
    assert pod.node_selector == {"cloud.google.com/gke-nodepool": "batch"}
    assert pod.tolerations[0]["value"] == "etl" and pod.affinity is not None
    assert (pod.priority_class_name, pod.service_account, pod.automount_service_account_token) == (
        "batch-high", "etl-runner", True)
    assert (pod.image_pull_policy, pod.working_dir) == ("Always", "/work")
    assert pod.pod_security_context == {"fsGroup": 2000, "runAsUser": 1000}
    assert pod.container_security_context == {"readOnlyRootFilesystem": True}
    assert pod.pod_template["spec"]["containers"][0]["name"] == "log-agent"


def test_defaults_are_overridden_per_task() -> None:
    defaults = {
        "env": [{"name": "REGION", "value": "eu"}, {"name": "TOKEN", "secret": {"name": "t", "key": "k"}}],
        "env_from": [{"config_map": "common"}],
        "volumes": [{"name": "cache", "emptyDir": {}}], "volume_mounts": [{"name": "cache", "mountPath": "/cache"}],
        "node_selector": {"pool": "batch", "zone": "a"}, "tolerations": [{"key": "x", "operator": "Exists"}],
        "labels": {"team": "data", "tier": "b"}, "service_account": "default-runner", "image_pull_policy": "Always",
        "security_context": {"pod": {"runAsUser": 1000, "fsGroup": 1000}},
        "pod_template": {"spec": {"containers": [{"name": "agent", "image": "a:1"}], "priorityClassName": "low"}},
    }
    task = parsed({"env": {"REGION": "us"}, "env_from": [{"secret": "mine"}],
                   "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "c"}}],
                   "node_selector": {"zone": "b"}, "tolerations": [], "labels": {"tier": "gold"},
                   "security_context": {"pod": {"runAsUser": 2000}},
                   "pod_template": {"spec": {"containers": [{"name": "agent", "image": "a:2"}]}}},
                  defaults=defaults)
    pod = task.pod
    assert task.env == {"REGION": "us"}
    assert [e.name for e in pod.env] == ["TOKEN", "REGION"]  # the default's TOKEN, the task's REGION
    assert pod.env_from == (EnvSource("config_map", "common"), EnvSource("secret", "mine"))
    assert pod.volumes == ({"name": "cache", "persistentVolumeClaim": {"claimName": "c"}},)
    assert pod.volume_mounts == ({"mountPath": "/cache", "name": "cache"},)
    assert pod.node_selector == {"pool": "batch", "zone": "b"} and pod.tolerations == ()
    assert pod.labels == {"team": "data", "tier": "gold"} and pod.service_account == "default-runner"
    assert pod.pod_security_context == {"fsGroup": 1000, "runAsUser": 2000}
    assert pod.pod_template == {"spec": {"containers": [{"image": "a:2", "name": "agent"}],
                                         "priorityClassName": "low"}}
    bare = parsed({}, defaults=defaults)
    assert bare.env == {"REGION": "eu"} and bare.pod.tolerations == ({"key": "x", "operator": "Exists"},)
    # The stored form keeps the task's own fields and the defaults apart (small, and re-parses alike).
    spec = parse_dag_spec(dag({"labels": {"tier": "gold"}}, defaults=defaults))
    canonical = spec.to_canonical()
    assert canonical["tasks"][0]["labels"] == {"tier": "gold"} and canonical["tasks"][0]["env"] == {}
    assert canonical["defaults"]["labels"] == {"team": "data", "tier": "b"}


def test_empty_tasks_take_no_pod_fields_and_ignore_defaults() -> None:
    assert refused({"kind": "empty", "image": None, "command": None, "labels": {"a": "b"}}) == (
        "tasks[0].labels", "is not allowed on an empty task (kind: empty)")
    spec = parse_dag_spec({"dag_id": "d", "defaults": {"labels": {"a": "b"}}, "tasks": [{"id": "j", "kind": "empty"}]})
    assert spec.tasks[0].pod.labels == {}


# ------------------------------------------------------------------------------------ refused

POISON: list[tuple[dict[str, Any], str, str]] = [
    ({"env": [{"name": "A", "secret": {"name": "pg"}}]}, "tasks[0].env[0].secret.key", "must be a string"),
    ({"env": [{"name": "A", "value": "1", "secret": {"name": "pg", "key": "k"}}]}, "tasks[0].env[0]", "exactly one"),
    ({"env": [{"name": "A"}]}, "tasks[0].env[0]", "exactly one"),
    ({"env": [{"name": "A", "value": 1}]}, "tasks[0].env[0].value", "must be a string"),
    ({"env": [{"name": "LEOFLOW_X", "value": "1"}]}, "tasks[0].env[0].name", "reserved"),
    ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "tasks[0].env[1].name", "duplicate"),
    ({"env": [{"name": "A", "secret": {"name": "Bad_Name", "key": "k"}}]}, "tasks[0].env[0].secret.name",
     "DNS-1123"),
    ({"env": [{"name": "A", "config_map": {"name": "c", "key": "a/b"}}]}, "tasks[0].env[0].config_map.key",
     "not a valid key"),
    ({"env": [{"name": "A", "secretKeyRef": {}}]}, "tasks[0].env[0].secretKeyRef", "unknown field"),
    ({"env": "A=1"}, "tasks[0].env", "mapping of names"),
    ({"env_from": [{"secret": "a", "config_map": "b"}]}, "tasks[0].env_from[0]", "exactly one"),
    ({"env_from": [{"secret": "a", "prefix": "1X"}]}, "tasks[0].env_from[0].prefix", "must start"),
    ({"volumes": [{"name": "v", "hostPath": {"path": "/"}}]}, "tasks[0].volumes[0].hostPath", "pod_template"),
    ({"volumes": [{"name": "v"}]}, "tasks[0].volumes[0]", "exactly one volume source"),
    ({"volumes": [{"name": "V_1", "emptyDir": {}}]}, "tasks[0].volumes[0].name", "DNS-1123"),
    ({"volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]}, "tasks[0].volumes[1].name",
     "duplicate"),
    ({"volumes": [{"name": "v", "emptyDir": {"sizeLimit": "much"}}]}, "tasks[0].volumes[0].emptyDir.sizeLimit",
     "quantity"),
    ({"volumes": [{"name": "v", "persistentVolumeClaim": {}}]}, "tasks[0].volumes[0].persistentVolumeClaim.claimName",
     "is required"),
    ({"volume_mounts": [{"name": "v", "mountPath": "data"}]}, "tasks[0].volume_mounts[0].mountPath", "absolute"),
    ({"volume_mounts": [{"name": "v"}]}, "tasks[0].volume_mounts[0].mountPath", "is required"),
    ({"volume_mounts": [{"name": "v", "mountPath": "/d"}, {"name": "w", "mountPath": "/d"}]},
     "tasks[0].volume_mounts[1].mountPath", "duplicate"),
    ({"node_selector": {"pool": 3}}, "tasks[0].node_selector.pool", "must be a string"),
    ({"node_selector": {"Bad/Prefix/x": "a"}}, "tasks[0].node_selector.Bad/Prefix/x", "not a valid label key"),
    ({"tolerations": [{"key": "a", "operator": "Matches"}]}, "tasks[0].tolerations[0].operator", "Exists or Equal"),
    ({"tolerations": [{"key": "a", "effect": "Sometimes"}]}, "tasks[0].tolerations[0].effect", "NoSchedule"),
    ({"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}, "tasks[0].tolerations[0].value", "empty"),
    ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "tasks[0].tolerations[0].operator", "must be Exists"),
    ({"tolerations": [{"key": "a", "tolerationSeconds": "60"}]}, "tasks[0].tolerations[0].tolerationSeconds",
     "integer"),
    ({"affinity": {"nodeAffinity": {"required": {}}}}, "tasks[0].affinity.nodeAffinity.required",
     "known: preferredDuringSchedulingIgnoredDuringExecution"),
    ({"affinity": {"nodeAffinity": {"requiredDuringScheduling": {}}}},
     "tasks[0].affinity.nodeAffinity.requiredDuringScheduling", "did you mean requiredDuring"),
    ({"priority_class_name": "High"}, "tasks[0].priority_class_name", "DNS-1123"),
    ({"service_account": "a_b"}, "tasks[0].service_account", "DNS-1123"),
    ({"automount_service_account_token": "yes"}, "tasks[0].automount_service_account_token", "true or false"),
    ({"labels": {"leoflow.io/dag": "x"}}, "tasks[0].labels.leoflow.io/dag", "reserved"),
    ({"labels": {"app.kubernetes.io/managed-by": "me"}}, "tasks[0].labels.app.kubernetes.io/managed-by", "reserved"),
    ({"labels": {"team": "a b"}}, "tasks[0].labels.team", "not a valid label value"),
    ({"labels": {"team": "x" * 64}}, "tasks[0].labels.team", "not a valid label value"),
    ({"annotations": {"LEOFLOW.IO/x": "y"}}, "tasks[0].annotations.LEOFLOW.IO/x", "reserved"),
    ({"annotations": {"a": 1}}, "tasks[0].annotations.a", "must be a string"),
    ({"image_pull_policy": "always"}, "tasks[0].image_pull_policy", "Always, IfNotPresent, Never"),
    ({"working_dir": "work"}, "tasks[0].working_dir", "absolute"),
    ({"security_context": {"pod": {"runAsNonRoot": "true"}}}, "tasks[0].security_context.pod.runAsNonRoot",
     "true or false"),
    ({"security_context": {"task": {}}}, "tasks[0].security_context.task", "unknown field"),
    ({"security_context": {"container": {"capabilities": {"drop": "ALL"}}}},
     "tasks[0].security_context.container.capabilities.drop", "must be a list"),
    ({"pod_template": {"spec": {"containers": [{"image": "x"}]}}}, "tasks[0].pod_template.spec.containers[0].name",
     "is required"),
    ({"pod_template": {"metadata": {"labels": {"leoflow.io/term": "9"}}}},
     "tasks[0].pod_template.metadata.labels.leoflow.io/term", "reserved"),
    ({"pod_template": {"spec": {"hostNetwork": "yes"}}}, "tasks[0].pod_template.spec.hostNetwork", "true or false"),
    ({"pod_template": "spec: {}"}, "tasks[0].pod_template", "must be a pod"),
    ({"node_selecter": {}}, "tasks[0].node_selecter", "unknown field"),
]


@pytest.mark.parametrize(("task", "path", "words"), POISON, ids=[p[1] + ":" + p[2] for p in POISON])
def test_poison_is_refused_naming_the_path(task: dict[str, Any], path: str, words: str) -> None:
    where, what = refused(task)
    assert where == path and words in what, (where, what)


def test_defaults_are_validated_too() -> None:
    assert refused(defaults={"labels": {"team": "a b"}})[0] == "defaults.labels.team"
    assert refused(defaults={"retries": 3})[0] == "defaults.retries"
    assert refused(defaults=[])[0] == "defaults"


@pytest.mark.parametrize(("field", "make"), [
    ("env", lambda n: [{"name": f"V{i}", "value": "x"} for i in range(n)]),
    ("env_from", lambda n: [{"secret": f"s{i}"} for i in range(n)]),
    ("volumes", lambda n: [{"name": f"v{i}", "emptyDir": {}} for i in range(n)]),
    ("volume_mounts", lambda n: [{"name": "v", "mountPath": f"/m{i}"} for i in range(n)]),
    ("tolerations", lambda n: [{"key": f"k{i}", "operator": "Exists"} for i in range(n)]),
    ("labels", lambda n: {f"k{i}": "v" for i in range(n)}),
    ("node_selector", lambda n: {f"k{i}": "v" for i in range(n)}),
    ("annotations", lambda n: {f"k{i}": "v" for i in range(n)}),
])
def test_each_list_has_a_limit(field: str, make: Any) -> None:
    limit = {"env": LIMITS["env entries"], "env_from": LIMITS["env_from entries"], "volumes": LIMITS["volumes"],
             "volume_mounts": LIMITS["volume_mounts"], "tolerations": LIMITS["tolerations"],
             "labels": LIMITS["labels"], "node_selector": LIMITS["node_selector entries"],
             "annotations": LIMITS["annotations"]}[field]
    parse_dag_spec(dag({field: make(limit)}))
    where, what = refused({field: make(limit + 1)})
    assert where == f"tasks[0].{field}" and f"at most {limit}" in what


def test_byte_limits() -> None:
    big = "x" * (LIMITS["env value bytes"] + 1)
    assert refused({"env": [{"name": "A", "value": big}]})[1].startswith("is longer than")
    huge = {"metadata": {"annotations": {f"k{i}": "v" * 1024 for i in range(LIMITS["pod_template bytes"] // 1024)}}}
    assert "bytes as JSON" in refused({"pod_template": huge})[1]
    notes = {f"k{i}": "v" * 1024 for i in range(LIMITS["annotations bytes"] // 1024)}
    assert "bytes" in refused({"annotations": notes})[1]


# ------------------------------------------------------------------------------------ property


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4),
                     lambda inner: (st.lists(inner, max_size=3)
                                    | st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=12)
_FIELDS = ["env", "env_from", "volumes", "volume_mounts", "node_selector", "tolerations", "affinity", "labels",
           "annotations", "security_context", "pod_template", "working_dir", "image_pull_policy"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_FIELDS), _json, st.booleans())
def test_only_validation_failures_escape(field: str, value: Any, as_default: bool) -> None:
    """Any JSON value in any pod field: either parsed (and round-trips) or a ValidationFailed with a path."""
    doc = dag(None, defaults={field: value}) if as_default else dag({field: value})
    try:
        spec = parse_dag_spec(copy.deepcopy(doc))
    except ValidationFailed as exc:
        assert exc.path.startswith("defaults" if as_default else "tasks[0]")
        return
    assert isinstance(spec, DagSpec)
    canonical = spec.to_canonical()
    # Back through the two ways a spec arrives: JSON (the API, .json files) and a YAML file read
    # by Leoflow's loader. Not JSON text read as YAML: json.dumps writes a character beyond the
    # BMP as a surrogate pair of \u escapes, which YAML has no reading for (PyYAML's Python
    # parser built two lone surrogates from "\ud800\udc00", which the spec then refused).
    assert parse_dag_spec(json.loads(json.dumps(canonical))) == spec
    assert parse_dag_spec(load_yaml(yaml.safe_dump(canonical))) == spec
