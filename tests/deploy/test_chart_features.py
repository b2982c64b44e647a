"""The chart's optional features: DAG delivery, Ingress, PrometheusRule, retention, notifications.

Each renders only when asked, validates strictly, and wires exactly the contract the code side
reads: DAG ConfigMaps as whole read-only directories under ``LEOFLOW_DAGS_DIR`` with
``LEOFLOW_DAGS_SOURCE``; ``LEOFLOW_RETENTION_DAYS``; ``LEOFLOW_NOTIFY_WEBHOOK`` (from a Secret
when given). The alert rules are checked by Prometheus's own ``promtool``: syntax
(``check rules``) and behaviour on synthetic series (``test rules``).
"""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import (
    MINIMAL,
    NAMESPACE,
    ROOT,
    Manifest,
    Render,
    kinds,
    manifests,
    merged,
    named,
    one,
    validate_strict,
)

DAGS_DIR = "/etc/leoflow/dags"
PROMTOOL = Path("/opt/prometheus-deb/usr/bin/promtool")
NOTES = "leoflow/templates/NOTES.txt"
RenderRaw = Callable[..., dict[str, str]]


def pod_spec(docs: list[Manifest]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def container(docs: list[Manifest], name: str = "leoflow") -> dict[str, Any]:
    spec = pod_spec(docs)
    return next(c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == name)


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


# ----------------------------------------------------------------------------------- DAGs


def dag_mounts(docs: list[Manifest]) -> dict[str, str]:
    """mount path -> ConfigMap name, for every DAG directory of the leoflow container."""
    volumes = {v["name"]: v for v in pod_spec(docs)["volumes"]}
    mounts = {}
    for mount in container(docs)["volumeMounts"]:
        if mount["mountPath"].startswith(DAGS_DIR + "/"):
            assert mount.get("readOnly") is True, mount
            assert "subPath" not in mount and "subPathExpr" not in mount, "subPath mounts never see updates"
            config_map = volumes[mount["name"]]["configMap"]
            assert config_map["defaultMode"] == 0o444
            mounts[mount["mountPath"]] = config_map["name"]
    return mounts


@pytest.mark.parametrize(("dags", "expected"), [
    ({"configMaps": ["team-a-dags"]}, ["team-a-dags"]),
    ({"inline": {"hello.yaml": "dag_id: hello\n"}}, ["wf-leoflow-dags"]),
    ({"configMaps": ["team-a-dags", "team-b.dags"], "inline": {"hello.yaml": "dag_id: hello\n"}},
     ["team-a-dags", "team-b.dags", "wf-leoflow-dags"]),
], ids=["config-map", "inline", "both"])
def test_dag_configmaps_are_mounted_as_directories_with_the_sync_settings(
        render: Render, dags: dict[str, Any], expected: list[str]) -> None:
    docs = render({"dags": dags})
    assert dag_mounts(docs) == {f"{DAGS_DIR}/{name}": name for name in expected}
    env = env_of(container(docs))
    assert env["LEOFLOW_DAGS_DIR"] == {"name": "LEOFLOW_DAGS_DIR", "value": DAGS_DIR}
    assert env["LEOFLOW_DAGS_SOURCE"] == {"name": "LEOFLOW_DAGS_SOURCE", "value": "wf"}
    assert "LEOFLOW_DAGS_DIR" not in env_of(container(docs, "migrate")), "only the serving replica syncs"
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    assert names == ({"wf-leoflow-dags"} if "inline" in dags else set())
    for doc in docs:
        validate_strict(doc)


def test_inline_dags_become_the_charts_configmap_verbatim(render: Render) -> None:
    files = {"etl.yaml": "dag_id: etl\nschedule: '@daily'\ntasks: []\n", "more.json": '{"dag_id": "more"}'}
    configmap = named(render({"dags": {"inline": files}}), "ConfigMap", "wf-leoflow-dags")
    assert configmap["data"] == files
    assert configmap["metadata"]["namespace"] == NAMESPACE


def test_no_dag_values_means_no_dag_mount_and_no_dag_settings(render: Render, render_raw: RenderRaw) -> None:
    for docs in (render(), manifests(render_raw({})), render({"dags": {"source": "prod"}})):
        assert dag_mounts(docs) == {}
        assert not {"LEOFLOW_DAGS_DIR", "LEOFLOW_DAGS_SOURCE"} & set(env_of(container(docs)))
        assert "ConfigMap" not in kinds(docs)


def test_dag_source_defaults_to_the_release_and_can_be_named(render: Render) -> None:
    docs = render({"dags": {"configMaps": ["team-a-dags"], "source": "analytics"}})
    assert env_of(container(docs))["LEOFLOW_DAGS_SOURCE"]["value"] == "analytics"


def test_changing_dag_files_does_not_restart_the_replicas(render: Render) -> None:
    # The leader picks changes up from the updated volume; a changed pod template would roll
    # every replica (and the leader) for each DAG edit.
    before = one(render({"dags": {"inline": {"a.yaml": "dag_id: a\n"}}}), "Deployment")
    after = one(render({"dags": {"inline": {"a.yaml": "dag_id: a\nschedule: '@hourly'\n"}}}), "Deployment")
    assert before == after


# -------------------------------------------------------------------------------- Ingress

INGRESS_VARIANTS: dict[str, dict[str, Any]] = {
    "no-host": {"enabled": True},
    "one-host": {"enabled": True, "hosts": [{"host": "leoflow.example.com"}]},
    "tls": {"enabled": True, "hosts": [{"host": "leoflow.example.com", "paths": [{"path": "/", "pathType": "Prefix"}]}],
            "tls": [{"secretName": "leoflow-tls", "hosts": ["leoflow.example.com"]}]},
    "host-less-entry": {"enabled": True, "hosts": [{"paths": [{"path": "/", "pathType": "Prefix"}]}]},
    "tls-without-hosts": {"enabled": True, "hosts": [{"host": "leoflow.example.com"}],
                          "tls": [{"secretName": "wildcard-tls"}]},
    "class-and-annotations": {"enabled": True, "className": "nginx",
                              "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt",
                                              "nginx.ingress.kubernetes.io/proxy-body-size": "2m"},
                              "hosts": [{"host": "a.example.com"},
                                        {"host": "*.flows.example.com",
                                         "paths": [{"path": "/", "pathType": "ImplementationSpecific"}]}]},
}


def test_no_ingress_by_default(render: Render) -> None:
    assert "Ingress" not in kinds(render())


@pytest.mark.parametrize("variant", sorted(INGRESS_VARIANTS))
def test_ingress_variants_validate_and_route_to_the_api_service(render: Render, variant: str) -> None:
    values = INGRESS_VARIANTS[variant]
    docs = render({"ingress": values})
    ingress = one(docs, "Ingress")
    assert validate_strict(ingress)
    service = named(docs, "Service", "wf-leoflow")
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    rules = ingress["spec"]["rules"]
    hosts = values.get("hosts") or [{}]
    assert [r.get("host") for r in rules] == [h.get("host") for h in hosts]
    for rule, host in zip(rules, hosts, strict=True):
        paths = host.get("paths") or [{"path": "/", "pathType": "Prefix"}]
        assert [(p["path"], p["pathType"]) for p in rule["http"]["paths"]] == [
            (p["path"], p.get("pathType", "Prefix")) for p in paths]
        for path in rule["http"]["paths"]:
            assert path["backend"] == {"service": {"name": service["metadata"]["name"], "port": {"name": "http"}}}
            assert path["backend"]["service"]["port"]["name"] in service_ports
    assert ingress["spec"].get("ingressClassName") == (values.get("className") or None)
    assert ingress["metadata"].get("annotations") == (values.get("annotations") or None)
    assert ingress["spec"].get("tls") == (values.get("tls") or None)


@pytest.mark.parametrize(("variant", "url"), [
    ("one-host", "http://leoflow.example.com"),
    ("tls", "https://leoflow.example.com"),
])
def test_notes_print_the_ingress_url(render_raw: RenderRaw, variant: str, url: str) -> None:
    notes = render_raw(merged(MINIMAL, {"ingress": INGRESS_VARIANTS[variant]}))[NOTES]
    assert f"  {url}/\n" in notes and f"export LEOFLOW_URL={url}\n" in notes
    assert "port-forward" not in notes


@pytest.mark.parametrize("variant", ["no-host", "host-less-entry"])
def test_notes_without_an_ingress_host_fall_back_to_port_forward(render_raw: RenderRaw, variant: str) -> None:
    notes = render_raw(merged(MINIMAL, {"ingress": INGRESS_VARIANTS[variant]}))[NOTES]
    assert "kubectl -n workflows get ingress wf-leoflow" in notes and "port-forward service/wf-leoflow" in notes
    assert "export LEOFLOW_URL=http://127.0.0.1:8080\n" in notes
    assert "%!" not in notes and "<nil>" not in notes


# ---------------------------------------------------------------- retention / notification


def test_retention_days_reach_the_replicas(render: Render) -> None:
    assert env_of(container(render()))["LEOFLOW_RETENTION_DAYS"]["value"] == "30"
    assert env_of(container(render({"retention": {"days": 0}})))["LEOFLOW_RETENTION_DAYS"]["value"] == "0"
    assert "LEOFLOW_RETENTION_DAYS" not in env_of(container(render(), "migrate"))
    assert env_of(container(render()))["LEOFLOW_AUDIT_RETENTION_DAYS"]["value"] == "365"
    audit_forever = render({"retention": {"auditDays": 0}})
    assert env_of(container(audit_forever))["LEOFLOW_AUDIT_RETENTION_DAYS"]["value"] == "0"


@pytest.mark.parametrize(("webhook", "expected"), [
    ({}, None),
    ({"url": "https://hooks.example/T0/B0"}, {"value": "https://hooks.example/T0/B0"}),
    ({"existingSecret": "hooks", "secretKey": "slack"},
     {"valueFrom": {"secretKeyRef": {"name": "hooks", "key": "slack"}}}),
    ({"existingSecret": "hooks", "url": "https://ignored.example"},
     {"valueFrom": {"secretKeyRef": {"name": "hooks", "key": "url"}}}),
], ids=["none", "url", "existing-secret", "secret-wins-over-url"])
def test_notification_webhook_reaches_the_replicas(render: Render, webhook: dict[str, Any],
                                                   expected: dict[str, Any] | None) -> None:
    env = env_of(container(render({"notify": {"webhook": webhook}})))
    if expected is None:
        assert "LEOFLOW_NOTIFY_WEBHOOK" not in env
    else:
        assert env["LEOFLOW_NOTIFY_WEBHOOK"] == {"name": "LEOFLOW_NOTIFY_WEBHOOK", **expected}


# ---------------------------------------------------------------------- PrometheusRule

RULE_VALUES = {"metrics": {"prometheusRule": {"enabled": True, "additionalLabels": {"release": "kube-prometheus"}}}}
ALERTS = ["LeoflowDagNotSucceeding", "LeoflowTaskFailures", "LeoflowPoolWithoutSlots", "LeoflowNoLeader"]
#: Metrics the alerts use that the code exports later (issue 20: run history metrics). Once the
#: documented metrics list (docs/metrics.md) has them they drop out of this set by themselves.
PENDING_METRICS: set[str] = set()


def exported_metrics() -> set[str]:
    """The metric names docs/metrics.md lists (a test keeps that list equal to the code)."""
    page = (ROOT / "docs" / "metrics.md").read_text()
    block = page.split("<!-- metrics-list:start -->", 1)[1].split("<!-- metrics-list:end -->", 1)[0]
    return set(re.findall(r"^\| `(leoflow_\w+)`", block, re.M))


def rule_groups(docs: list[Manifest]) -> dict[str, Any]:
    return {"groups": one(docs, "PrometheusRule")["spec"]["groups"]}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not PROMTOOL.exists():
        pytest.skip(f"promtool is not installed at {PROMTOOL}")
    return subprocess.run([str(PROMTOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_prometheus_rule_only_when_enabled(render: Render, render_raw: RenderRaw) -> None:
    assert "PrometheusRule" not in kinds(render())
    assert "PrometheusRule" not in kinds(manifests(render_raw({})))
    rule = one(render(RULE_VALUES), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    assert [r["alert"] for r in rule["spec"]["groups"][0]["rules"]] == ALERTS


def test_alert_rules_pass_promtool_check(render: Render, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(render(RULE_VALUES))))
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 4 rules found" in checked.stdout


def test_alert_rules_use_only_metrics_leoflow_exports(render: Render) -> None:
    exprs = " ".join(r["expr"] for r in rule_groups(render(RULE_VALUES))["groups"][0]["rules"])
    used = set(re.findall(r"\b(leoflow_\w+)\b", exprs))
    unknown = used - exported_metrics() - PENDING_METRICS
    assert not unknown, f"alerts use metrics Leoflow does not export: {unknown}"
    assert {"leoflow_leader", "leoflow_scheduler_ticks_total"} <= used & exported_metrics()


def test_own_rules_replace_the_defaults(render: Render) -> None:
    own = [{"alert": "LeoflowDown", "expr": "up{job=\"wf-leoflow\"} == 0", "for": "5m"}]
    rule = one(render({"metrics": {"prometheusRule": {"enabled": True, "rules": own}}}), "PrometheusRule")
    assert rule["spec"]["groups"][0]["rules"] == own


def test_selector_restricts_every_default_alert(render: Render) -> None:
    default = rule_groups(render(RULE_VALUES))["groups"][0]["rules"]
    for rule in default:
        for selector in re.findall(r"leoflow_\w+(\{[^}]*\})", rule["expr"]):
            assert selector == '{job="wf-leoflow",namespace="workflows"}', rule["alert"]
    custom = {"metrics": {"prometheusRule": {"enabled": True, "selector": 'app_kubernetes_io_instance="wf"'}}}
    for rule in rule_groups(render(custom))["groups"][0]["rules"]:
        assert set(re.findall(r"leoflow_\w+(\{[^}]*\})", rule["expr"])) == {'{app_kubernetes_io_instance="wf"}'}


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    """One promtool input series of this release (job and namespace as the ServiceMonitor sets)."""
    all_labels = {"job": "wf-leoflow", "namespace": NAMESPACE, "pod": "wf-leoflow-0", **labels}
    rendered = ",".join(f'{k}="{v}"' for k, v in all_labels.items())
    return {"series": f"{name}{{{rendered}}}", "values": values}


#: (name, input series, [(eval time, alert, expected label sets)]) — the alerts' behaviour on
#: synthetic series, minute by minute. Expected labels omit alertname (promtool adds it).
SCENARIOS: list[tuple[str, list[dict[str, str]], list[tuple[str, str, list[dict[str, str]]]]]] = [
    ("no-replica-leads", [
        series("leoflow_leader", "0x20"), series("leoflow_leader", "0x20", pod="wf-leoflow-1"),
        series("leoflow_scheduler_ticks_total", "0x20"),
    ], [("1m", "LeoflowNoLeader", []), ("5m", "LeoflowNoLeader", [{"severity": "critical"}])]),
    ("healthy-leader", [
        series("leoflow_leader", "1x20"), series("leoflow_leader", "0x20", pod="wf-leoflow-1"),
        series("leoflow_scheduler_ticks_total", "0+60x20"),
    ], [("10m", "LeoflowNoLeader", [])]),
    ("leader-whose-scheduler-stalled", [
        series("leoflow_leader", "1x20"), series("leoflow_scheduler_ticks_total", "0+60x5 300x15"),
    ], [("5m", "LeoflowNoLeader", []), ("14m", "LeoflowNoLeader", [{"severity": "critical"}])]),
    ("another-release-leading-does-not-hide-ours", [
        series("leoflow_leader", "0x20"), series("leoflow_scheduler_ticks_total", "0x20"),
        series("leoflow_leader", "1x20", job="other-leoflow"),
        series("leoflow_scheduler_ticks_total", "0+60x20", job="other-leoflow"),
    ], [("5m", "LeoflowNoLeader", [{"severity": "critical"}])]),
    ("dag-without-success-for-26h", [
        # etl last succeeded at time 0; reports succeeds every minute (its timestamp tracks time()).
        series("leoflow_dag_last_success_timestamp_seconds", "0x1700", dag_id="etl"),
        series("leoflow_dag_last_success_timestamp_seconds", "0+60x1700", dag_id="reports"),
    ], [("25h", "LeoflowDagNotSucceeding", []),
        ("26h10m", "LeoflowDagNotSucceeding", []),  # stale, but not yet for 15 m
        ("26h20m", "LeoflowDagNotSucceeding", [{"severity": "warning", "dag_id": "etl"}])]),
    ("task-failures", [
        series("leoflow_task_failures_total", "0 0 1 1 2x10 2x120", dag_id="etl", task_id="extract"),
        series("leoflow_task_failures_total", "0x130", dag_id="etl", task_id="load"),
        # Every replica exports the same counts from the database: max across pods, not sum.
        series("leoflow_task_failures_total", "0 0 1 1 2x10 2x120", dag_id="etl", task_id="extract",
               pod="wf-leoflow-1"),
    ], [("1m", "LeoflowTaskFailures", []),
        ("5m", "LeoflowTaskFailures", [{"severity": "warning", "dag_id": "etl", "task_id": "extract"}]),
        ("2h", "LeoflowTaskFailures", [])]),
    ("pool-without-slots", [
        # "later" is named by waiting tasks but has no slots; "gpu" is full with a backlog (normal);
        # "etl" had no slots only briefly (created 10 minutes in).
        series("leoflow_pool_waiting_tasks", "3x40", pool="later"),
        series("leoflow_pool_slots", "0x40", pool="later"),
        series("leoflow_pool_waiting_tasks", "3x40", pool="later", pod="wf-leoflow-1"),
        series("leoflow_pool_slots", "0x40", pool="later", pod="wf-leoflow-1"),
        series("leoflow_pool_waiting_tasks", "50x40", pool="gpu"),
        series("leoflow_pool_slots", "4x40", pool="gpu"),
        series("leoflow_pool_waiting_tasks", "2x10 0x30", pool="etl"),
        series("leoflow_pool_slots", "0x10 2x30", pool="etl"),
    ], [("10m", "LeoflowPoolWithoutSlots", []),
        ("16m", "LeoflowPoolWithoutSlots", [{"severity": "warning", "pool": "later"}])]),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_alerts_fire_exactly_when_they_should(render: Render, tmp_path: Path,
                                              scenario: tuple[str, list[dict[str, str]], list[Any]]) -> None:
    """``promtool test rules`` on the rendered rules (annotations aside: checked by ``check``)."""
    _, inputs, expectations = scenario
    groups = copy.deepcopy(rule_groups(render(RULE_VALUES)))
    for rule in groups["groups"][0]["rules"]:
        rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": inputs,
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": labels}
                                                                                 for labels in expected]}
                            for at, alert, expected in expectations]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    result = promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_scenarios_can_fail(render: Render, tmp_path: Path) -> None:
    # Guards the test above: a wrong expectation is reported, not silently accepted.
    groups = rule_groups(render(RULE_VALUES))
    for rule in groups["groups"][0]["rules"]:
        rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [series("leoflow_leader", "1x20"),
                                           series("leoflow_scheduler_ticks_total", "0+60x20")],
        "alert_rule_test": [{"eval_time": "10m", "alertname": "LeoflowNoLeader",
                             "exp_alerts": [{"exp_labels": {"severity": "critical"}}]}]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    assert promtool("test", "rules", "test.yaml", cwd=tmp_path).returncode != 0


# ------------------------------------------------------------------------------ pod policy


def test_the_releases_own_secrets_are_protected_from_task_pods_by_default(render: Render) -> None:
    """Task pods share the release namespace: a DAG naming the database's Secret must be refused."""
    env = env_of(container(render()))
    assert env["LEOFLOW_K8S_PROTECTED_SECRETS"]["value"] == "wf-leoflow-database,wf-leoflow-auth"
    assert "LEOFLOW_K8S_POD_POLICY" not in env and "LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS" not in env
    bundled = env_of(container(render(base={})))  # the evaluation install: bundled database, generated token
    database = bundled["LEOFLOW_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"]
    assert bundled["LEOFLOW_K8S_PROTECTED_SECRETS"]["value"] == f"{database},wf-leoflow-admin-token"


def test_the_pod_policy_values_reach_the_server(render: Render) -> None:
    docs = render({"tasks": {"podPolicy": ["host-path", "capabilities"], "allowedServiceAccounts": ["etl", "ml"],
                             "protectedSecrets": ["payroll-db"]},
                   "notify": {"webhook": {"existingSecret": "slack-hook"}}})
    for doc in docs:
        validate_strict(doc)
    env = env_of(container(docs))
    assert env["LEOFLOW_K8S_POD_POLICY"]["value"] == "host-path,capabilities"
    assert env["LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS"]["value"] == "etl,ml"
    assert env["LEOFLOW_K8S_PROTECTED_SECRETS"]["value"] == "wf-leoflow-database,wf-leoflow-auth,slack-hook,payroll-db"


def test_the_server_reads_what_the_chart_renders(render: Render) -> None:
    """The rendered values parse as the server's settings (an allowance the server does not know fails the schema)."""
    from leoflow.settings import load_settings

    env = env_of(container(render({"tasks": {"podPolicy": ["all"], "allowedServiceAccounts": ["*"]}})))
    settings = load_settings({"LEOFLOW_DATABASE_URL": "postgresql://u:p@h/d", **{
        name: env[name]["value"] for name in ("LEOFLOW_K8S_POD_POLICY", "LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS",
                                              "LEOFLOW_K8S_PROTECTED_SECRETS")}})
    policy = settings.executor.kubernetes.pod_policy()
    assert policy.allows("host-path") and policy.service_account_allowed("anything")
    assert "wf-leoflow-database" in policy.protected_secrets
