"""The chart renders valid Kubernetes objects for every supported value set, and refuses bad ones.

Every rendered object is validated offline against the Kubernetes OpenAPI schemas in strict
mode (unknown fields are errors). Custom resources (the prometheus-operator ServiceMonitor) have
no schema there and are skipped by kind, explicitly.
"""

from __future__ import annotations

import copy
from typing import Any

import helm_python
import pytest
from kubernetes_validate import utils as kubernetes_validate

from tests.deploy.conftest import CHART_DIR, KUBE_VERSIONS, MINIMAL, Render, kinds, merged, validate_strict

VALUE_SETS: dict[str, dict[str, Any]] = {
    "minimal": {},
    "existing-secrets": {
        "database": {"url": "", "existingSecret": "pg-credentials", "secretKey": "dsn"},
        "auth": {"tokens": [], "existingSecret": "leoflow-tokens"},
    },
    "service-monitor": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}},
    "one-replica": {"replicaCount": 1},
    "extra-env": {
        "extraEnv": [
            {"name": "LEOFLOW_SCHEDULER_INTERVAL", "value": "2"},
            {"name": "TZ", "value": "UTC"},
            {"name": "LEOFLOW_TASK_LOG_MAX_BYTES", "valueFrom": {"configMapKeyRef": {"name": "lf", "key": "logs"}}},
        ],
        "extraVolumes": [{"name": "dags", "configMap": {"name": "dags"}}],
        "extraVolumeMounts": [{"name": "dags", "mountPath": "/dags", "readOnly": True}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "leoflow", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "leoflow"}}}]}},
        "podAnnotations": {"team": "data"},
        "podLabels": {"cost-center": "42"},
    },
    "network-policy": {"networkPolicy": {
        "enabled": True,
        "ingressFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress"}}}],
        "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]},
                   {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 5432}]}],
    }},
    "task-namespace": {"tasks": {"namespace": "workflow-tasks", "serviceAccount": "runner",
                                 "imagePullSecrets": ["registry-a", "registry-b"]}},
    "auth-disabled": {"auth": {"enabled": False, "tokens": []}},
    "no-migrations": {"migrations": {"enabled": False}},
    "tuned": {"config": {"shutdownGrace": 25, "keepaliveInterval": 0.5, "leaderLease": 5, "logLevel": "DEBUG"},
              "terminationGracePeriodSeconds": 60, "database": {"poolSize": 20},
              "service": {"type": "LoadBalancer", "port": 80}, "imagePullSecrets": ["pull"],
              "image": {"tag": "0.1.0-rc1", "pullPolicy": "Always"}, "priorityClassName": "high"},
    "ingress": {"ingress": {"enabled": True, "className": "nginx",
                            "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
                            "hosts": [{"host": "leoflow.example.com", "paths": [{"path": "/", "pathType": "Prefix"}]}],
                            "tls": [{"secretName": "leoflow-tls", "hosts": ["leoflow.example.com"]}]}},
    "dags": {"dags": {"configMaps": ["team-a-dags", "team-b-dags"], "inline": {"hello.yaml": "dag_id: hello\n"},
                      "source": "prod"}},
    "prometheus-rule": {"metrics": {"prometheusRule": {"enabled": True, "additionalLabels": {"release": "prom"}}}},
    "retention-and-notify": {"retention": {"days": 0},
                             "notify": {"webhook": {"existingSecret": "hooks", "secretKey": "slack"}}},
}


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_rendered_object_is_valid_kubernetes(render: Render, value_set: str) -> None:
    docs = render(VALUE_SETS[value_set])
    assert "Deployment" in kinds(docs)
    checked = 0
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "leoflow"
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "wf"
        checked += validate_strict(doc)
    assert checked >= 6


def test_strict_validation_catches_an_unknown_field(render: Render) -> None:
    # Guards the test above: the validator really is strict about fields Kubernetes would drop.
    deployment = copy.deepcopy(next(d for d in render() if d["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[0], strict=True)


def test_service_monitor_only_when_enabled(render: Render) -> None:
    assert "ServiceMonitor" not in kinds(render())
    monitor = next(d for d in render(VALUE_SETS["service-monitor"]) if d["kind"] == "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
    assert "authorization" not in endpoint
    protected = {"auth": {"metricsAuth": True},
                 "metrics": {"serviceMonitor": {"enabled": True, "tokenSecret": "prom-token"}}}
    (endpoint,) = next(d for d in render(protected) if d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "prom-token", "key": "token"}}


@pytest.mark.parametrize("values", [
    pytest.param({}, id="no-values"),
    pytest.param({"replicaCount": 1}, id="one-replica"),
    pytest.param({"database": {"existingSecret": "pg"}, "auth": {"existingSecret": "tok"}}, id="existing-secrets"),
    pytest.param(merged(merged(VALUE_SETS["ingress"], VALUE_SETS["dags"]), VALUE_SETS["prometheus-rule"]),
                 id="ingress-dags-rules"),
])
def test_helm_lint_strict_passes(values: dict[str, Any]) -> None:
    for given in (values, merged(MINIMAL, values)):
        report = helm_python.lint(str(CHART_DIR), given, strict=True, kube_version="v1.30.0")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert report["errors"] == [] and problems == [], report


BAD_VALUES = [
    pytest.param({"replicaCount": "three"}, "/replicaCount", id="wrong-type"),
    pytest.param({"replicas": 3}, "replicas", id="unknown-top-level-key"),
    pytest.param({"database": {"password": "x"}}, "password", id="unknown-nested-key"),
    pytest.param({"auth": {"tokens": [{"name": "ci", "scope": "write", "token": "12345678"}]}}, "/auth/tokens/0/scope",
                 id="bad-token-scope"),
    pytest.param({"auth": {"tokens": [{"name": "ci", "scope": "read", "token": "short"}]}}, "/auth/tokens/0/token",
                 id="short-token"),
    pytest.param({"database": {"url": "mysql://db/x"}}, "/database/url", id="not-a-postgres-url"),
    pytest.param({"config": {"logLevel": "LOUD"}}, "/config/logLevel", id="bad-log-level"),
    pytest.param({"extraEnv": [{"name": "LEOFLOW_NOT_A_SETTING", "value": "1"}]}, "/extraEnv/0/name",
                 id="unknown-leoflow-variable"),
    pytest.param({"replicaCount": 0}, "/replicaCount", id="zero-replicas"),
    pytest.param({"postgresql": {"enabled": "yes"}}, "/postgresql/enabled", id="postgresql-enabled-not-auto-or-bool"),
    pytest.param({"postgresql": {"auth": {"username": "leo@flow"}}}, "/postgresql/auth/username",
                 id="postgresql-user-unsafe-in-url"),
    pytest.param({"postgresql": {"persistence": {"size": "8 gigs"}}}, "/postgresql/persistence/size",
                 id="postgresql-size-not-a-quantity"),
    pytest.param({"dags": {"configMaps": ["Team_DAGs"]}}, "/dags/configMaps/0", id="configmap-name-not-dns"),
    pytest.param({"dags": {"configMaps": ["a", "a"]}}, "/dags/configMaps", id="configmap-listed-twice"),
    pytest.param({"dags": {"configMaps": [f"c{i}" for i in range(33)]}}, "/dags/configMaps", id="too-many-configmaps"),
    pytest.param({"dags": {"inline": {"../escape.yaml": "dag_id: x"}}}, "/dags/inline", id="inline-path-traversal"),
    pytest.param({"dags": {"inline": {"notes.txt": "dag_id: x"}}}, "/dags/inline", id="inline-not-a-dag-file"),
    pytest.param({"dags": {"inline": {"..data.yaml": "dag_id: x"}}}, "/dags/inline", id="inline-hidden-file"),
    pytest.param({"dags": {"inline": {"empty.yaml": ""}}}, "/dags/inline/empty.yaml", id="inline-empty-file"),
    pytest.param({"dags": {"source": "Team A"}}, "/dags/source", id="source-not-a-label"),
    pytest.param({"retention": {"days": -1}}, "/retention/days", id="negative-retention"),
    pytest.param({"retention": {"days": 1.5}}, "/retention/days", id="fractional-retention"),
    pytest.param({"notify": {"webhook": {"url": "ftp://hooks.example/x"}}}, "/notify/webhook/url",
                 id="webhook-not-http"),
    pytest.param({"ingress": {"hosts": [{"host": "Leoflow Example"}]}}, "/ingress/hosts/0/host", id="ingress-bad-host"),
    pytest.param({"ingress": {"hosts": [{"host": "a.example", "paths": [{"path": "leoflow"}]}]}},
                 "/ingress/hosts/0/paths/0/path", id="ingress-relative-path"),
    pytest.param({"ingress": {"hosts": [{"host": "a.example", "paths": [{"path": "/", "pathType": "Regex"}]}]}},
                 "/ingress/hosts/0/paths/0/pathType", id="ingress-bad-path-type"),
    pytest.param({"metrics": {"prometheusRule": {"alerts": []}}}, "alerts", id="prometheus-rule-unknown-key"),
]


@pytest.mark.parametrize(("values", "named"), BAD_VALUES)
def test_schema_rejects_bad_values(render: Render, values: dict[str, Any], named: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as failure:
        render(values)
    assert named in str(failure.value)


@pytest.mark.parametrize(("values", "message"), [
    pytest.param({"database": {"url": ""}, "postgresql": {"enabled": False}},
                 "postgresql.enabled=false needs an external database: set database.existingSecret", id="no-database"),
    pytest.param({"postgresql": {"enabled": True}}, "postgresql.enabled=true deploys the bundled PostgreSQL, but",
                 id="bundled-and-external-database"),
    pytest.param({"dags": {"configMaps": ["wf-leoflow-dags"], "inline": {"a.yaml": "dag_id: a"}}},
                 "dags.configMaps lists wf-leoflow-dags, the ConfigMap the chart renders from dags.inline",
                 id="configmap-name-clash"),
    pytest.param({"dags": {"inline": {f"d{i}.yaml": "x" * 100_000 for i in range(11)}}},
                 "dags.inline holds 1100078 bytes, more than the 1000000 a ConfigMap can take", id="inline-too-large"),
    pytest.param({"terminationGracePeriodSeconds": 12}, "terminationGracePeriodSeconds (12) must exceed",
                 id="grace-too-short"),
    pytest.param({"config": {"keepaliveInterval": 6}}, "leaderLease (10) must be at least twice", id="lease"),
    pytest.param({"extraEnv": [{"name": "LEOFLOW_LOG_LEVEL", "value": "DEBUG"}]}, "extraEnv sets LEOFLOW_LOG_LEVEL",
                 id="extra-env-duplicates-chart"),
    pytest.param({"serviceAccount": {"create": False}}, "serviceAccount.name is required", id="no-sa-name"),
    pytest.param({"auth": {"metricsAuth": True}, "metrics": {"serviceMonitor": {"enabled": True}}},
                 "set metrics.serviceMonitor.tokenSecret", id="protected-metrics-without-scrape-token"),
])
def test_rendering_fails_with_a_clear_message(render: Render, values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmRenderError) as failure:
        render(values)
    assert message in str(failure.value)


def test_without_the_bundled_database_the_missing_database_is_named(render_raw: Any) -> None:
    with pytest.raises(helm_python.HelmRenderError) as failure:
        render_raw({"postgresql": {"enabled": False}})
    text = str(failure.value)
    assert "database.existingSecret" in text and "database.url" in text
    assert "Traceback" not in text


def test_notes_tell_how_to_reach_the_api_and_the_leader(render_raw: Any) -> None:
    notes = render_raw(MINIMAL)["leoflow/templates/NOTES.txt"]
    assert "port-forward service/wf-leoflow 8080:8080" in notes
    assert "/api/v2/cluster/leader" in notes
    assert "Authorization: Bearer" in notes
    open_notes = render_raw(merged(MINIMAL, VALUE_SETS["auth-disabled"]))["leoflow/templates/NOTES.txt"]
    assert "WARNING: auth.enabled=false" in open_notes


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_notes_render_every_value_set_without_template_debris(render_raw: Any, value_set: str) -> None:
    notes = render_raw(merged(MINIMAL, VALUE_SETS[value_set]))["leoflow/templates/NOTES.txt"]
    assert "%!" not in notes and "<nil>" not in notes and "map[" not in notes, notes
    assert "export LEOFLOW_URL=http" in notes


def test_secret_checksum_rolls_pods_when_a_rendered_secret_changes(render: Render) -> None:
    def checksum(values: dict[str, Any]) -> str:
        dep = next(d for d in render(values) if d["kind"] == "Deployment")
        return str(dep["spec"]["template"]["metadata"]["annotations"]["checksum/secrets"])

    rotated = {"auth": {"tokens": [{"name": "ops", "scope": "admin", "token": "rotated-token-42"}]}}
    assert checksum({}) == checksum({}) != checksum(rotated)

