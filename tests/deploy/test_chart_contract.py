"""What the chart promises the code and the platform team, checked against the code itself.

The env vars must be real settings (``leoflow.settings.VARIABLES``), the commands real CLI verbs
(``leoflow.cli.main.build_parser``), the probe paths real routes of the API app, and the RBAC
exactly what the Kubernetes executor uses — so a rename on either side fails here, not in a
cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from typing import Any

import pytest

from leoflow.cli.main import build_parser
from leoflow.errors import SettingsError
from leoflow.settings import VARIABLES, ApiToken, Settings, load_settings
from tests.deploy.conftest import CHART_DIR, NAMESPACE, ROOT, Manifest, Render, kinds, one

KNOWN_VARIABLES = {v.name for v in VARIABLES if not v.name.endswith("*")}
#: Families of variables read by prefix (``LEOFLOW_NOTIFY_HEADER_*``): any name with the prefix.
KNOWN_FAMILIES = {v.name.removesuffix("*") for v in VARIABLES if v.name.endswith("*")}
#: Variables the chart already sets for features whose code lands later (issue 20: DAG sync,
#: retention, notifications): their names are a contract fixed by the chart. Once declared in
#: leoflow.settings they drop out of this set by themselves and get the full checks.
PENDING_VARIABLES = {"LEOFLOW_DAGS_DIR", "LEOFLOW_DAGS_SOURCE", "LEOFLOW_RETENTION_DAYS",
                     "LEOFLOW_NOTIFY_WEBHOOK"} - KNOWN_VARIABLES
VARIABLE_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def pod_spec(docs: list[Manifest]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def containers(docs: list[Manifest]) -> list[dict[str, Any]]:
    spec = pod_spec(docs)
    return [*spec.get("initContainers", []), *spec["containers"]]


def server(docs: list[Manifest]) -> dict[str, Any]:
    (container,) = pod_spec(docs)["containers"]
    return container  # type: ignore[no-any-return]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    names = [e["name"] for e in container.get("env", [])]
    assert len(names) == len(set(names)), f"duplicate env names in {container['name']}: {names}"
    return {e["name"]: e for e in container.get("env", [])}


def cli_verbs(argv: list[str]) -> list[str]:
    """The path of sub-commands ``argv`` selects in the real parser; fails on an unknown verb."""
    parser: argparse.ArgumentParser = build_parser()
    path: list[str] = []
    for word in argv:
        subactions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subactions:
            break
        choices = subactions[0].choices
        assert word in choices, f"{' '.join([*path, word])!r} is not a leoflow verb (known: {sorted(choices)})"
        parser = choices[word]
        path.append(word)
    assert not [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)], \
        f"{' '.join(path)!r} needs a sub-command"
    return path


# ---------------------------------------------------------------------------------------- env


@pytest.mark.parametrize("values", [
    {},
    {"tasks": {"namespace": "tasks", "serviceAccount": "runner", "imagePullSecrets": ["a"]}},
    {"auth": {"enabled": False, "tokens": []}},
    {"extraEnv": [{"name": "LEOFLOW_SCHEDULER_INTERVAL", "value": "2"}, {"name": "TZ", "value": "UTC"}]},
    {"dags": {"configMaps": ["team-dags"], "inline": {"a.yaml": "dag_id: a\n"}},
     "notify": {"webhook": {"url": "https://hooks.example/x"}}},
    {"extraEnv": [{"name": "LEOFLOW_NOTIFY_HEADER_ALERTS",
                   "valueFrom": {"secretKeyRef": {"name": "alerts", "key": "token"}}}]},
], ids=["defaults", "task-namespace", "auth-disabled", "extra-env", "dags-and-notify", "notify-header-family"])
def test_every_leoflow_variable_the_chart_sets_is_a_real_setting(render: Render, values: dict[str, Any]) -> None:
    for container in containers(render(values)):
        env = env_of(container)
        leoflow_vars = {name for name in env if name.startswith("LEOFLOW_")}
        known = KNOWN_VARIABLES | PENDING_VARIABLES
        unknown = {name for name in leoflow_vars - known if not name.startswith(tuple(KNOWN_FAMILIES))}
        assert not unknown, f"not settings: {unknown}"
        # Anything else the chart itself adds is plumbing referenced by a LEOFLOW_* value.
        referenced = {ref for e in env.values() for ref in VARIABLE_REF.findall(str(e.get("value", "")))}
        user_set = {e["name"] for e in values.get("extraEnv", [])}
        plumbing = set(env) - leoflow_vars - user_set
        assert plumbing <= referenced, f"unexplained env vars {plumbing - referenced}"


def test_values_schema_lists_exactly_the_real_settings() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    choices = schema["properties"]["extraEnv"]["items"]["then"]["properties"]["name"]["anyOf"]
    allowed = [name for choice in choices for name in choice.get("enum", [])]
    patterns = [choice["pattern"] for choice in choices if "pattern" in choice]
    assert sorted(allowed) == sorted(KNOWN_VARIABLES), (
        "update the extraEnv name enum in helm/leoflow/values.schema.json to leoflow.settings.VARIABLES")
    assert sorted(patterns) == sorted(f"^{prefix}[A-Z0-9_]+$" for prefix in KNOWN_FAMILIES)


def test_rendered_environment_loads_as_settings(render: Render) -> None:
    """The literal env values the chart renders parse with the real settings loader."""
    docs = render({"config": {"keepaliveInterval": 0.5, "leaderLease": 5}, "tasks": {"imagePullSecrets": ["a", "b"],
                                                                                        "podRetention": 2000000}})
    env = env_of(server(docs))
    literal = {name: e["value"] for name, e in env.items() if "value" in e and name.startswith("LEOFLOW_")}
    literal["LEOFLOW_API_URL"] = literal["LEOFLOW_API_URL"].replace("$(POD_IP)", "10.1.2.3")
    literal.pop("LEOFLOW_API_TOKENS_FILE")  # a file only the pod has; parsed in test_auth_tokens_file_parses
    settings: Settings = load_settings({**literal, "LEOFLOW_DATABASE_URL": "postgresql://u@db:5432/leoflow"})
    assert settings.executor.kind == "kubernetes"
    assert settings.cluster.name == "wf"
    assert settings.api.port == 8080 and settings.api_url == "http://10.1.2.3:8080"
    assert settings.election.keepalive_interval == 0.5 and settings.election.leader_lease == 5
    assert settings.executor.kubernetes.image_pull_secrets == ("a", "b")
    assert settings.executor.kubernetes.pod_retention == 2_000_000
    assert settings.logging.format == "json" and settings.logging.level == "INFO"
    assert str(settings.home) == "/var/lib/leoflow"


def test_auth_tokens_file_parses(render: Render, tmp_path: Any) -> None:
    import base64

    docs = render({"auth": {"tokens": [{"name": "ops", "scope": "admin", "token": "ops-token-123456"},
                                       {"name": "dash", "scope": "read", "token": "read-token-654321"}]}})
    secret = next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-auth"))
    env = env_of(server(docs))
    path = env["LEOFLOW_API_TOKENS_FILE"]["value"]
    mount = next(m for m in server(docs)["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod_spec(docs)["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    key = path.rsplit("/", 1)[1]
    token_file = tmp_path / key
    token_file.write_bytes(base64.b64decode(secret["data"][key]))
    settings = load_settings({"LEOFLOW_API_TOKENS_FILE": str(token_file)})
    assert [(t.name, t.scope) for t in settings.api.tokens] == [("ops", "admin"), ("dash", "read")]
    assert env["LEOFLOW_AUTH"]["value"] == "enabled"


def test_identity_and_namespace_come_from_the_downward_api(render: Render) -> None:
    env = env_of(server(render()))
    assert env["LEOFLOW_NODE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["LEOFLOW_K8S_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["LEOFLOW_EXECUTOR"]["value"] == "kubernetes"
    assert env["LEOFLOW_CLUSTER"]["value"] == "wf"


@pytest.mark.parametrize(("values", "secret", "key"), [
    ({}, "wf-leoflow-database", "uri"),
    ({"database": {"url": "", "existingSecret": "pg-credentials", "secretKey": "dsn"}}, "pg-credentials", "dsn"),
])
def test_database_url_comes_from_a_secret(render: Render, values: dict[str, Any], secret: str, key: str) -> None:
    docs = render(values)
    for container in containers(docs):
        ref = env_of(container)["LEOFLOW_DATABASE_URL"]
        assert ref == {"name": "LEOFLOW_DATABASE_URL", "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
    rendered_secrets = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    assert (secret in rendered_secrets) == (not values)
    assert "postgresql://" not in json.dumps(one(docs, "Deployment")), "the URL must never be inline"


def test_existing_auth_secret_is_mounted_not_rendered(render: Render) -> None:
    docs = render({"auth": {"tokens": [], "existingSecret": "leoflow-tokens", "secretKey": "lines"}})
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-auth")]
    assert env_of(server(docs))["LEOFLOW_API_TOKENS_FILE"]["value"] == "/etc/leoflow/auth/lines"
    volume = next(v for v in pod_spec(docs)["volumes"] if v["name"] == "auth")
    assert volume["secret"]["secretName"] == "leoflow-tokens"


def test_auth_disabled_is_explicit(render: Render) -> None:
    docs = render({"auth": {"enabled": False, "tokens": []}})
    env = env_of(server(docs))
    assert env["LEOFLOW_AUTH"]["value"] == "disabled"
    assert "LEOFLOW_API_TOKENS_FILE" not in env


# ------------------------------------------------------------------------------- commands


def test_containers_run_real_cli_verbs(render: Render) -> None:
    docs = render()
    by_name = {c["name"]: c for c in containers(docs)}
    assert by_name["leoflow"]["command"] == ["leoflow"]
    assert cli_verbs(by_name["leoflow"]["args"]) == ["serve"]
    assert by_name["migrate"]["command"] == ["leoflow"]
    assert cli_verbs(by_name["migrate"]["args"]) == ["db", "upgrade"]


def test_cli_verb_check_rejects_unknown_verbs() -> None:
    with pytest.raises(AssertionError, match="not a leoflow verb"):
        cli_verbs(["db", "explode"])
    with pytest.raises(AssertionError, match="needs a sub-command"):
        cli_verbs(["db"])


def test_migrations_can_be_left_to_an_operator(render: Render) -> None:
    assert "initContainers" not in pod_spec(render({"migrations": {"enabled": False}}))


# --------------------------------------------------------------------------------- probes


def _app_paths(settings: Settings) -> set[str]:
    from starlette.routing import Mount

    from leoflow.api.app import create_app

    # The chart always configures tokens (or disables auth explicitly); mirror that here.
    token = ApiToken(name="probe-test", scope="read", token="probe-test-token")
    app = create_app(settings.replace(api=dataclasses.replace(settings.api, tokens=(token,))))
    paths: set[str] = set()

    def walk(routes: list[Any], prefix: str) -> None:
        for route in routes:
            if isinstance(route, Mount):
                walk(list(route.routes), prefix + route.path)
            elif "GET" in (getattr(route, "methods", None) or {"GET"}):
                paths.add(prefix + route.path)

    walk(list(app.routes), "")
    return paths


def test_probe_paths_are_routes_of_the_api(render: Render, settings: Settings) -> None:
    container = server(render())
    paths = _app_paths(settings)
    probes = {kind: container[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe", "startupProbe")}
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    for probe in probes.values():
        assert probe["path"] in paths, f"{probe['path']} is not a GET route of leoflow.api.app"
        assert probe["port"] == "http"
    assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    service = one(render(), "Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]


def test_metrics_annotations_point_at_the_metrics_route(render: Render, settings: Settings) -> None:
    annotations = one(render(), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "8080"
    assert annotations["prometheus.io/path"] in _app_paths(settings)
    quiet = one(render({"metrics": {"podAnnotations": False}}), "Deployment")["spec"]["template"]["metadata"]
    assert "prometheus.io/scrape" not in quiet["annotations"]


# ------------------------------------------------------------------------ rolling + grace


def test_rolling_update_never_drops_below_the_replica_count(render: Render) -> None:
    deployment = one(render(), "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}


@pytest.mark.parametrize("grace", [10, 25])
def test_termination_grace_outlasts_the_leader_handover(render: Render, grace: int) -> None:
    docs = render({"config": {"shutdownGrace": grace}, "terminationGracePeriodSeconds": grace + 20})
    spec = pod_spec(docs)
    env = env_of(server(docs))
    pre_stop = int(server(docs)["lifecycle"]["preStop"]["exec"]["command"][1])
    assert float(env["LEOFLOW_SHUTDOWN_GRACE"]["value"]) == grace
    assert spec["terminationGracePeriodSeconds"] > pre_stop + grace
    default_settings = load_settings({})
    assert pod_spec(render())["terminationGracePeriodSeconds"] > default_settings.election.shutdown_grace


def test_replicas_spread_across_nodes(render: Render) -> None:
    spread = pod_spec(render())["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} >= {"kubernetes.io/hostname"}
    selector = one(render(), "Deployment")["spec"]["selector"]["matchLabels"]
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spread)


# --------------------------------------------------------------------------- security


def test_security_context_is_locked_down(render: Render) -> None:
    docs = render()
    pod = pod_spec(docs)["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in containers(docs):
        ctx = container["securityContext"]
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == pod["runAsUser"]
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "resources" in container and container["resources"]["requests"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/tmp" in mounts  # the only writable paths on a read-only root: emptyDirs
    home = env_of(server(docs))["LEOFLOW_HOME"]["value"]
    assert home in {m["mountPath"] for m in server(docs)["volumeMounts"]}


# ------------------------------------------------------------------------------- RBAC

EXECUTOR_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]},
]


@pytest.mark.parametrize(("values", "task_namespace"), [
    ({}, NAMESPACE),
    ({"tasks": {"namespace": "workflow-tasks"}}, "workflow-tasks"),
])
def test_rbac_is_exactly_what_the_executor_uses(render: Render, values: dict[str, Any], task_namespace: str) -> None:
    docs = render(values)
    assert not {"ClusterRole", "ClusterRoleBinding"} & set(kinds(docs))
    role = one(docs, "Role")
    binding = one(docs, "RoleBinding")
    assert role["rules"] == EXECUTOR_RULES
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == task_namespace
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    account = one(docs, "ServiceAccount")
    assert account["metadata"]["namespace"] == NAMESPACE
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": NAMESPACE}]
    assert pod_spec(docs)["serviceAccountName"] == account["metadata"]["name"]
    env = env_of(server(docs))
    if task_namespace != NAMESPACE:
        assert env["LEOFLOW_K8S_NAMESPACE"]["value"] == task_namespace


#: Official-client CoreV1Api method -> the (resource, verb) RBAC must allow for it.
CLIENT_CALLS = {
    "create_namespaced_pod": ("pods", "create"),
    "read_namespaced_pod": ("pods", "get"),
    "list_namespaced_pod": ("pods", "list"),
    "delete_namespaced_pod": ("pods", "delete"),
    "read_namespaced_pod_log": ("pods/log", "get"),
    "list_namespaced_event": ("events", "list"),
}


def test_rbac_matches_the_calls_the_executor_makes() -> None:
    """Read the executor's source: every Kubernetes API call it makes is granted, nothing more."""
    sources = sorted((ROOT / "leoflow" / "executor" / "kubernetes").glob("*.py"))
    assert sources, "the Kubernetes executor moved; update this test"
    text = "\n".join(p.read_text() for p in sources)
    calls = set(re.findall(r"\bcore\.(\w+)\(", text)) - {"api_client"}
    unknown = calls - set(CLIENT_CALLS)
    assert not unknown, f"executor calls {unknown}: grant them in helm/leoflow/templates/rbac.yaml and here"
    used = {CLIENT_CALLS[c] for c in calls}
    if re.search(r"\bwatch=True", text):  # a list made a watch (KubernetesApi.watch: pods, or their events)
        used |= {(resource, "watch") for resource, verb in used if verb == "list"}
    granted = {(resource, verb) for rule in EXECUTOR_RULES for resource in rule["resources"] for verb in rule["verbs"]}
    assert used == granted


def test_no_rbac_when_disabled(render: Render) -> None:
    assert not {"Role", "RoleBinding", "ClusterRole"} & set(kinds(render({"rbac": {"create": False}})))


def test_task_pod_settings_reach_the_executor(render: Render) -> None:
    env = env_of(server(render({"tasks": {"serviceAccount": "runner", "imagePullSecrets": ["a", "b"]}})))
    assert env["LEOFLOW_K8S_SERVICE_ACCOUNT"]["value"] == "runner"
    assert env["LEOFLOW_K8S_IMAGE_PULL_SECRETS"]["value"] == "a,b"
    assert "LEOFLOW_K8S_POD_TEMPLATE" not in env  # no template unless one is given


def test_the_cluster_pod_template_reaches_the_executor_and_is_validated(render: Render) -> None:
    template = {"metadata": {"labels": {"team": "data"}},
                "spec": {"tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
                         "initContainers": [{"name": "log-agent", "image": "fluent-bit:3", "restartPolicy": "Always"}]}}
    env = env_of(server(render({"tasks": {"podTemplate": template}})))
    value = env["LEOFLOW_K8S_POD_TEMPLATE"]["value"]
    settings = load_settings({"LEOFLOW_K8S_POD_TEMPLATE": value})
    assert settings.executor.kubernetes.pod_template == template
    with pytest.raises(Exception, match="invalid propertyName 'status'"):  # the values schema: a partial Pod only
        render({"tasks": {"podTemplate": {"status": {}}}})
    bad = json.dumps({"spec": {"containers": [{"image": "no-name"}]}})
    with pytest.raises(SettingsError, match=r"spec\.containers\[0\]\.name"):  # the replicas refuse to start
        load_settings({"LEOFLOW_K8S_POD_TEMPLATE": bad})


# ------------------------------------------------------------------------ PDB / network


@pytest.mark.parametrize(("replicas", "has_pdb"), [(1, False), (2, True), (3, True)])
def test_pdb_only_with_more_than_one_replica(render: Render, replicas: int, has_pdb: bool) -> None:
    docs = render({"replicaCount": replicas})
    assert ("PodDisruptionBudget" in kinds(docs)) is has_pdb
    if has_pdb:
        pdb = one(docs, "PodDisruptionBudget")
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"] == one(docs, "Deployment")["spec"]["selector"]


def test_network_policy_opens_only_the_http_port(render: Render) -> None:
    assert "NetworkPolicy" not in kinds(render())
    peer = {"namespaceSelector": {"matchLabels": {"team": "data"}}}
    policy = one(render({"networkPolicy": {"enabled": True, "ingressFrom": [peer]}}), "NetworkPolicy")
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert peer in rule["from"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    open_policy = one(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy")
    assert "from" not in open_policy["spec"]["ingress"][0]
