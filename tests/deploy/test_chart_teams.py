"""The chart's teams: the teams file it renders is the one Leoflow parses, and each team namespace gets
the executor's Role and RoleBinding (never a ClusterRole) and, when asked, a NetworkPolicy — every
object valid for ``kubernetes-validate --strict`` and the chart clean under ``helm lint --strict``."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
import yaml

from leoflow.model.access.teams import parse_teams
from tests.deploy.conftest import CHART_DIR, MINIMAL, NAMESPACE, Render, kinds, merged, validate_strict

TEAMS: dict[str, Any] = {
    "teams": [
        {"name": "data", "dagIdPrefixes": ["data-", "etl-"], "namespace": "team-data",
         "serviceAccount": "data-tasks", "groups": {"data-eng": "editor", "data-viewers": "viewer"},
         "podTemplate": {"metadata": {"labels": {"cost-center": "data"}}},
         "networkPolicy": {"enabled": True,
                           "ingressFrom": [{"namespaceSelector": {
                               "matchLabels": {"kubernetes.io/metadata.name": "mon"}}}],
                           "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}},
        {"name": "ml", "dagIdPrefixes": ["ml-"], "namespace": "team-ml", "groups": {"ml": "operator"}},
        {"name": "shared", "dagIdPrefixes": ["shared-"], "namespace": "team-ml"},  # one namespace, two teams
        {"name": "ops", "dagIdPrefixes": ["ops-"]},  # no namespace: the task namespace
    ],
    "teamAdminGroups": ["platform"],
}


def _by(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d for d in docs if d["kind"] == kind}


def test_teams_render_the_teams_file_and_a_role_per_team_namespace(render: Render) -> None:
    docs = render(TEAMS)
    for doc in docs:
        validate_strict(doc)
    assert "ClusterRole" not in kinds(docs) and "ClusterRoleBinding" not in kinds(docs)
    [config] = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "wf-leoflow-teams"]
    teams = parse_teams(yaml.safe_load(config["data"]["teams.yaml"]))  # what every replica reads
    assert teams.names == {"data", "ml", "shared", "ops"} and teams.admin_groups == {"platform"}
    data = teams.placement("data")
    assert (data.namespace, data.service_account) == ("team-data", "data-tasks")
    assert data.pod_template == {"metadata": {"labels": {"cost-center": "data"}}}
    assert teams.group_roles(("data-eng", "ml")) == {"data": "editor", "ml": "operator"}
    assert teams.placement("ops").namespace is None and teams.team_of("etl-x") == "data"
    roles, bindings = _by(docs, "Role"), _by(docs, "RoleBinding")
    assert set(roles) == set(bindings) == {f"{NAMESPACE}/wf-leoflow-executor", "team-data/wf-leoflow-executor",
                                           "team-ml/wf-leoflow-executor"}
    for key, role in roles.items():
        assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                                  "verbs": ["create", "get", "list", "watch", "delete"]},
                                 {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
                                 {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]}], key
        assert bindings[key]["subjects"] == [{"kind": "ServiceAccount", "name": "wf-leoflow", "namespace": NAMESPACE}]
        assert bindings[key]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                            "name": "wf-leoflow-executor"}
    policies = _by(docs, "NetworkPolicy")
    assert set(policies) == {"team-data/wf-leoflow-tasks"}  # only the team that asked
    spec = policies["team-data/wf-leoflow-tasks"]["spec"]
    assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "leoflow"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"][0]["from"][0] == {"podSelector": {}}  # its own namespace
    assert spec["egress"] == [{"ports": [{"port": 53, "protocol": "UDP"}]}]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["LEOFLOW_TEAMS_FILE"]["value"] == "/etc/leoflow/teams/teams.yaml"
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "teams"]
    assert mount == {"name": "teams", "mountPath": "/etc/leoflow/teams", "readOnly": True}  # no subPath: reloads
    assert {"name": "teams", "configMap": {"name": "wf-leoflow-teams", "defaultMode": 0o444}} in pod["volumes"]


def test_no_teams_renders_nothing_new(render: Render) -> None:
    docs = render()
    assert not [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-teams")]
    assert [d["metadata"]["namespace"] for d in docs if d["kind"] == "Role"] == [NAMESPACE]
    env = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "LEOFLOW_TEAMS_FILE" not in {e["name"] for e in env}


def test_rbac_off_leaves_team_roles_to_the_operator(render: Render) -> None:
    docs = render(merged(TEAMS, {"rbac": {"create": False}}))
    assert "Role" not in kinds(docs) and "RoleBinding" not in kinds(docs)


def test_helm_lint_strict_passes_with_teams() -> None:
    report = helm_python.lint(str(CHART_DIR), merged(MINIMAL, TEAMS), strict=True, kube_version="v1.30.0")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize(("team", "where"), [
    pytest.param({"name": "Data"}, "/teams/0/name", id="bad-name"),
    pytest.param({"name": "data", "namespace": "Team_Data"}, "/teams/0/namespace", id="namespace-not-dns"),
    pytest.param({"name": "data", "groups": {"eng": "admin"}}, "/teams/0/groups/eng", id="team-admin-role"),
    pytest.param({"name": "data", "serviceAccount": "a b"}, "/teams/0/serviceAccount", id="bad-service-account"),
    pytest.param({"name": "data", "networkPolicy": {"enabled": True, "allow": "all"}}, "/teams/0/networkPolicy",
                 id="unknown-network-policy-key"),
    pytest.param({"name": "data", "rules": []}, "/teams/0", id="unknown-team-key"),
])
def test_bad_team_values_are_refused_naming_the_field(render: Render, team: dict[str, Any], where: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as caught:
        render({"teams": [team]})
    assert where in str(caught.value)
