"""One DAG spec per pod field (and a few combinations), and the pod Leoflow renders for it.

Shared by the golden tests (``test_pod_render.py``: spec → pod JSON, validated with
``kubernetes-validate --strict``) and the runs through the fake API server
(``test_task_pods.py``), so every case is both rendered exactly and run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes_validate import utils as kubernetes_validate

from leoflow.executor.kubernetes import pods
from leoflow.model.run_context import RunContext, task_environment
from leoflow.model.spec.dag import TaskSpec, parse_dag_spec
from leoflow.model.tries import TaskLaunch, TryKey

#: Native sidecars are on by default from 1.29; the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


@dataclass(frozen=True)
class Case:
    task: dict[str, Any]
    defaults: dict[str, Any] = field(default_factory=dict)
    cluster_template: dict[str, Any] = field(default_factory=dict)
    command: str = "echo ok"


CASES: dict[str, Case] = {
    "plain": Case({}),
    "env-mapping": Case({"env": {"MODE": "full", "DAY": "1"}}),
    "env-refs": Case({"env": [{"name": "DB_USER", "config_map": {"name": "etl-config", "key": "user"}},
                              {"name": "DB_PASSWORD", "secret": {"name": "pg", "key": "password"}},
                              {"name": "DSN", "value": "postgresql://$(DB_USER)@db/etl"},
                              {"name": "OPTIONAL", "secret": {"name": "absent", "key": "k", "optional": True}}]},
                     command="echo user=$DB_USER"),
    "env-from": Case({"env_from": [{"secret": "pg"}, {"config_map": "etl-config", "prefix": "ETL_"}]},
                     command="echo user=$ETL_user"),
    "volumes": Case({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "etl-data"}},
                                 {"name": "creds", "secret": {"secretName": "pg", "defaultMode": 0o400}},
                                 {"name": "conf", "configMap": {"name": "etl-config"}},
                                 {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
                     "volume_mounts": [{"name": "data", "mountPath": "/data"},
                                       {"name": "creds", "mountPath": "/creds", "readOnly": True},
                                       {"name": "conf", "mountPath": "/etc/etl"},
                                       {"name": "scratch", "mountPath": "/tmp"}]}),
    "node-selector": Case({"node_selector": {"pool": "batch"}}),
    "tolerations": Case({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "etl",
                                          "effect": "NoSchedule"}]}),
    "affinity": Case({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}}),
    "priority-class": Case({"priority_class_name": "batch-high"}),
    "service-account": Case({"service_account": "etl-runner", "automount_service_account_token": True}),
    "labels-annotations": Case({"labels": {"team": "data", "cost-center": "cc-42"},
                                "annotations": {"example.com/owner": "data-platform@example.com"}}),
    "pull-policy-working-dir": Case({"image_pull_policy": "Always", "working_dir": "/work"}),
    "security-context": Case({"security_context": {
        "pod": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000},
        "container": {"readOnlyRootFilesystem": True, "capabilities": {"add": ["NET_BIND_SERVICE"]}}}}),
    "root-opt-out": Case({"security_context": {"pod": {"runAsNonRoot": False, "runAsUser": 0},
                                               "container": {"capabilities": {"drop": []}}}}),
    "pod-template": Case({"pod_template": {
        "metadata": {"labels": {"sidecar.istio.io/inject": "false"}},
        "spec": {"containers": [{"name": "task", "image": "ignored:1", "ports": [{"containerPort": 8080}],
                                 "env": [{"name": "FROM_TEMPLATE", "value": "1"}]},
                                {"name": "log-agent", "image": "fluent-bit:3", "command": ["sleep", "infinity"]}],
                 "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "terminationGracePeriodSeconds": 5}}}),
    "native-sidecar": Case({"pod_template": {"spec": {"initContainers": [
        {"name": "proxy", "image": "cloud-sql-proxy:2", "restartPolicy": "Always",
         "command": ["sleep", "infinity"]}]}}}),
    "defaults": Case({"env": {"REGION": "us"}, "labels": {"tier": "gold"}},
                     defaults={"env": [{"name": "REGION", "value": "eu"},
                                       {"name": "TOKEN", "secret": {"name": "pg", "key": "password"}}],
                               "labels": {"team": "data", "tier": "bronze"}, "node_selector": {"pool": "batch"},
                               "service_account": "etl-runner"}),
    "cluster-template": Case({"labels": {"team": "data"}},
                             cluster_template={"metadata": {"annotations": {"example.com/cluster": "prod"}},
                                               "spec": {"priorityClassName": "default-batch",
                                                        "tolerations": [{"operator": "Exists",
                                                                         "effect": "NoSchedule"}]}}),
}


def task_of(case: Case) -> TaskSpec:
    doc = {"dag_id": "etl", "tasks": [{"id": "load", "image": "etl:1", "command": ["sh", "-c", case.command],
                                        **case.task}]}
    if case.defaults:
        doc["defaults"] = case.defaults
    return parse_dag_spec(doc).tasks[0]


def launch_of(case: Case, key: TryKey | None = None, task_try_id: int = 7, term: int = 3) -> TaskLaunch:
    return launch_for(task_of(case), key, task_try_id, term)


def launch_for(task: TaskSpec, key: TryKey | None = None, task_try_id: int = 7, term: int = 3) -> TaskLaunch:
    """The launch the scheduler would hand the executor for ``task`` (run context included)."""
    key = key or TryKey("etl", "manual__2026-01-01", task.id, 1)
    run = RunContext(conf={}, logical_date=datetime(2026, 1, 1, tzinfo=UTC))
    return TaskLaunch(key=key, task_try_id=task_try_id, term=term, image=task.image, command=task.command,
                      args=task.args, env=task_environment(key, run, task.env), resources=task.resources,
                      timeout_seconds=task.timeout_seconds, pod=task.pod)


def render(case: Case, *, service_account: str | None = None) -> dict[str, Any]:
    return pods.pod_spec("default", "leoflow-tasks", launch_of(case), service_account=service_account,
                         image_pull_secrets=("regcred",), template=case.cluster_template)


def validate_strictly(pod: dict[str, Any]) -> None:
    """``kubernetes-validate --strict`` (offline, the Kubernetes OpenAPI schema) for each version."""
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)
