"""Spec → pod JSON, golden, for every pod field; each rendered pod passes ``kubernetes-validate --strict``.

The golden pods live in ``golden_pods.json``; after an intended change regenerate them with
``LEOFLOW_UPDATE_GOLDEN=1 pytest tests/executor/test_pod_render.py`` and read the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from leoflow.errors import ValidationFailed
from leoflow.executor.kubernetes import pods
from leoflow.executor.kubernetes.pod_render import DEFAULT_CONTAINER
from tests.executor.pod_cases import CASES, Case, launch_of, render, validate_strictly

GOLDEN = Path(__file__).with_name("golden_pods.json")


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def test_golden_file_has_exactly_the_cases() -> None:
    if os.environ.get("LEOFLOW_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps({name: render(case) for name, case in CASES.items()}, indent=1,
                                     sort_keys=True) + "\n")
    assert sorted(_golden()) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_spec_renders_the_golden_pod_and_kubernetes_accepts_it(name: str) -> None:
    pod = render(CASES[name])
    assert pod == _golden()[name], f"{name}: rendered pod differs from golden_pods.json (see the module doc)"
    validate_strictly(pod)


def spec_of(name: str) -> dict[str, Any]:
    return render(CASES[name])["spec"]  # type: ignore[no-any-return]


def task_container(spec: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in spec["containers"] if c["name"] == "task")  # type: ignore[no-any-return]


def test_restricted_defaults_fill_only_what_nobody_set() -> None:
    plain = spec_of("plain")
    assert plain["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert task_container(plain)["securityContext"] == {"allowPrivilegeEscalation": False,
                                                        "capabilities": {"drop": ["ALL"]}}
    assert plain["automountServiceAccountToken"] is False
    custom = spec_of("security-context")
    assert custom["securityContext"]["runAsUser"] == 1000 and custom["securityContext"]["runAsNonRoot"] is True
    assert task_container(custom)["securityContext"]["capabilities"] == {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}
    root = spec_of("root-opt-out")
    assert root["securityContext"]["runAsNonRoot"] is False and root["securityContext"]["runAsUser"] == 0
    assert task_container(root)["securityContext"]["capabilities"] == {"drop": []}
    # Sidecars from templates get the container defaults too (restricted checks every container).
    for name in ("pod-template", "native-sidecar"):
        spec = spec_of(name)
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_leoflow_fields_win_over_templates_and_first_class_fields_over_templates() -> None:
    pod = render(CASES["pod-template"])
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    task = task_container(spec)
    assert task["image"] == "etl:1" and task["command"] == ["sh", "-c", "echo ok"]
    assert task["ports"] == [{"containerPort": 8080}]  # what Leoflow does not set survives
    assert task["env"][0]["name"] == "FROM_TEMPLATE"  # env merges by name
    assert [c["name"] for c in spec["containers"]] == ["task", "log-agent"]
    assert pod["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
    assert pod["metadata"]["annotations"][DEFAULT_CONTAINER] == "task"
    cluster = render(CASES["cluster-template"])
    assert cluster["spec"]["priorityClassName"] == "default-batch"
    assert cluster["metadata"]["annotations"]["example.com/cluster"] == "prod"
    ours = render(Case({"priority_class_name": "mine"}, cluster_template={"spec": {"priorityClassName": "theirs"}}))
    assert ours["spec"]["priorityClassName"] == "mine"
    hostile = Case({}, cluster_template={"metadata": {"labels": {"leoflow.io/term": "999"}},
                                         "spec": {"containers": [{"name": "task", "image": "evil", "command": ["x"]}]}})
    pod = render(hostile)
    assert pod["metadata"]["labels"]["leoflow.io/term"] == "3"
    assert task_container(pod["spec"])["image"] == "etl:1"


def test_service_account_falls_back_to_the_setting() -> None:
    assert render(CASES["plain"], service_account="fallback")["spec"]["serviceAccountName"] == "fallback"
    assert render(CASES["service-account"], service_account="fallback")["spec"]["serviceAccountName"] == "etl-runner"


def test_env_order_is_the_specs_then_the_run_context() -> None:
    env = task_container(spec_of("env-refs"))["env"]
    assert [e["name"] for e in env][:4] == ["DB_USER", "DB_PASSWORD", "DSN", "OPTIONAL"]
    assert env[1] == {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "password"}}}
    assert all(e["name"].startswith("LEOFLOW_") for e in env[4:])
    assert not any("value" in e and e["name"] == "DB_PASSWORD" for e in env)


@pytest.mark.parametrize(("case", "path", "words"), [
    (Case({"volume_mounts": [{"name": "data", "mountPath": "/data"}]}), "spec.containers[0].volumeMounts[0].name",
     "no volume named 'data'"),
    (Case({}, cluster_template={"spec": {"containers": [{"name": "agent"}]}}), "spec.containers[0].image",
     "is required"),
    (Case({"pod_template": {"spec": {"initContainers": [{"name": "task", "image": "x"}]}}}),
     "spec.containers[0].name", "duplicate container name"),
])
def test_a_pod_that_would_be_refused_is_never_sent(case: Case, path: str, words: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        render(case)
    assert info.value.path == path and words in info.value.problem, str(info.value)


def test_a_launch_without_pod_fields_renders_as_before() -> None:
    launch = launch_of(CASES["plain"])

    bare = pods.pod_spec("default", "ns", launch._replace(pod=None), service_account=None,
                         image_pull_secrets=())
    assert bare["spec"]["containers"][0]["env"][0]["name"] == "LEOFLOW_DAG_ID"
    validate_strictly(bare)
