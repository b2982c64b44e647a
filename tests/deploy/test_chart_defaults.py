"""``helm install`` with no values at all comes up: a bundled PostgreSQL and a generated token.

What a first-time user gets without reading anything: a single-replica PostgreSQL StatefulSet
(for evaluation) whose generated password and URL live in a Secret the replicas read, one
generated admin token, and install notes with the one command that reveals it. With an
external database and tokens of their own, none of that is rendered. Generated values are kept
across upgrades by ``lookup``; that path is rendered cluster-aware against a small Secrets API.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import helm_python
import pytest

from leoflow.settings import load_settings, parse_api_tokens, validate_database_url
from tests.deploy.conftest import NAMESPACE, RELEASE, Manifest, kinds, manifests, named, one, validate_strict
from tests.deploy.secrets_api import SecretsApi

PG = "wf-leoflow-postgresql"
TOKEN_SECRET = "wf-leoflow-admin-token"
NOTES = "leoflow/templates/NOTES.txt"
EXTERNAL_TOKENS = {"auth": {"existingSecret": "leoflow-tokens"}}
RenderRaw = Callable[..., dict[str, str]]


def decoded(secret: Manifest) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def pod_spec(workload: Manifest) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def leoflow_containers(docs: list[Manifest]) -> dict[str, dict[str, Any]]:
    spec = pod_spec(one(docs, "Deployment"))
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


@pytest.fixture(scope="module")
def defaults(render_raw: RenderRaw) -> list[Manifest]:
    return manifests(render_raw({}))


# ------------------------------------------------------------------------------ no values


def test_no_values_render_valid_objects_with_the_bundled_database_and_generated_secrets(
        defaults: list[Manifest]) -> None:
    for doc in defaults:
        assert validate_strict(doc), f"{doc['kind']} is not a built-in kind"
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE and labels["app.kubernetes.io/part-of"] == "leoflow"
    assert kinds(defaults) == sorted(["Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "Secret", "Secret",
                                      "Service", "Service", "Service", "ServiceAccount", "StatefulSet"])
    statefulset = named(defaults, "StatefulSet", PG)
    assert statefulset["spec"]["replicas"] == 1
    assert named(defaults, "Service", PG)["spec"]["type"] == "ClusterIP"
    headless = named(defaults, "Service", f"{PG}-hl")
    assert headless["spec"]["clusterIP"] == "None" and statefulset["spec"]["serviceName"] == f"{PG}-hl"
    assert set(decoded(named(defaults, "Secret", PG))) == {"password", "uri"}
    assert set(decoded(named(defaults, "Secret", TOKEN_SECRET))) == {"tokens"}
    (container,) = pod_spec(statefulset)["containers"]
    assert container["image"] == "postgres:17"


def test_replicas_read_the_generated_url_from_its_secret(defaults: list[Manifest]) -> None:
    containers = leoflow_containers(defaults)
    for name in ("migrate", "leoflow"):
        assert env_of(containers[name])["LEOFLOW_DATABASE_URL"]["valueFrom"] == {
            "secretKeyRef": {"name": PG, "key": "uri"}}


def test_generated_url_reaches_the_bundled_server_as_its_user(defaults: list[Manifest]) -> None:
    secret = decoded(named(defaults, "Secret", PG))
    url = validate_database_url(secret["uri"])
    parts = urlsplit(url)
    service = named(defaults, "Service", PG)
    statefulset = named(defaults, "StatefulSet", PG)
    (container,) = pod_spec(statefulset)["containers"]
    env = env_of(container)
    assert parts.scheme == "postgresql"
    assert parts.hostname == f"{service['metadata']['name']}.{NAMESPACE}.svc"
    (port,) = service["spec"]["ports"]
    assert parts.port == port["port"] == 5432 and port["targetPort"] == container["ports"][0]["name"]
    assert service["spec"]["selector"].items() <= statefulset["spec"]["template"]["metadata"]["labels"].items()
    assert parts.username == env["POSTGRES_USER"]["value"] == "leoflow"
    assert parts.path == "/" + env["POSTGRES_DB"]["value"]
    assert parts.password == secret["password"]
    assert re.fullmatch(r"[A-Za-z0-9]{32}", secret["password"]), "alphanumeric: safe inside the URL unescaped"
    assert env["POSTGRES_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": PG, "key": "password"}}


@pytest.mark.parametrize("values", [{}, {"postgresql": {"auth": {"username": "flows", "database": "wf_meta"}}}],
                         ids=["defaults", "custom-user-and-database"])
def test_probes_and_url_name_the_configured_user_and_database(render_raw: RenderRaw, values: dict[str, Any]) -> None:
    docs = manifests(render_raw(values))
    user = values.get("postgresql", {}).get("auth", {}).get("username", "leoflow")
    database = values.get("postgresql", {}).get("auth", {}).get("database", "leoflow")
    assert urlsplit(decoded(named(docs, "Secret", PG))["uri"]).path == f"/{database}"
    (container,) = pod_spec(named(docs, "StatefulSet", PG))["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[0] == "pg_isready" and ["-U", user] == command[5:7] and ["-d", database] == command[7:9]
        assert command[1:5] == ["-h", "127.0.0.1", "-p", "5432"], "over TCP: ready only once the real server listens"
    wait = leoflow_containers(docs)["wait-for-postgresql"]["args"][0]
    assert f"-h {PG}.{NAMESPACE}.svc -p 5432 -U {user} -d {database}" in wait


def test_bundled_database_volume_is_a_claim_template_that_outlives_the_statefulset(render_raw: RenderRaw) -> None:
    default = named(manifests(render_raw({})), "StatefulSet", PG)["spec"]
    (claim,) = default["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    assert "storageClassName" not in claim["spec"], "empty storageClass: the cluster's default class"
    assert default["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    tuned = named(manifests(render_raw({"postgresql": {
        "persistence": {"size": "50Gi", "storageClass": "fast-ssd"},
        "image": {"repository": "mirror.example/postgres", "tag": "17.2"},
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}})), "StatefulSet", PG)["spec"]
    (claim,) = tuned["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    (container,) = pod_spec({"spec": tuned})["containers"]
    assert container["image"] == "mirror.example/postgres:17.2"
    # Helm merges maps: the default memory limit stays unless set (or set to null).
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "1Gi"}}


def test_pgdata_lives_below_the_volume_and_every_writable_path_is_a_volume(defaults: list[Manifest]) -> None:
    spec = pod_spec(named(defaults, "StatefulSet", PG))
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    pgdata = env_of(container)["PGDATA"]["value"]
    # A subdirectory: the volume root may hold lost+found and belongs to root, not to uid 999.
    assert Path(pgdata).parent.as_posix() in mounts and mounts[Path(pgdata).parent.as_posix()] == "data"
    assert {"/var/run/postgresql", "/tmp"} <= set(mounts), "socket directory and /tmp on a read-only root"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["enableServiceLinks"] is False and spec["automountServiceAccountToken"] is False


# Fields of the restricted Pod Security Standard (kubernetes.io/docs/concepts/security/pod-security-standards).
RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                           "projected", "secret"}


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """What in a pod spec the restricted Pod Security Standard would refuse."""
    problems = [f"spec.{k}" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    pod_ctx = spec.get("securityContext", {})
    for volume in spec.get("volumes", []):
        if not set(volume) - {"name"} <= RESTRICTED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']} type {set(volume) - {'name'}}")
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        ctx = container.get("securityContext", {})
        where = f"container {container['name']}"
        if ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")) is not True:
            problems.append(f"{where}: runAsNonRoot")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            problems.append(f"{where}: runAsUser 0")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation")
        if ctx.get("privileged"):
            problems.append(f"{where}: privileged")
        if "ALL" not in ctx.get("capabilities", {}).get("drop", []):
            problems.append(f"{where}: capabilities.drop ALL")
        if set(ctx.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{where}: capabilities.add")
        seccomp = ctx.get("seccompProfile", pod_ctx.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}: seccompProfile")
        if container.get("ports") and any(p.get("hostPort") for p in container["ports"]):
            problems.append(f"{where}: hostPort")
    return problems


def test_every_pod_of_the_default_install_is_restricted_compatible(defaults: list[Manifest]) -> None:
    workloads = [d for d in defaults if d["kind"] in ("Deployment", "StatefulSet")]
    assert len(workloads) == 2
    for workload in workloads:
        assert restricted_violations(pod_spec(workload)) == [], workload["metadata"]["name"]
    pg_ctx = pod_spec(named(defaults, "StatefulSet", PG))["securityContext"]
    assert (pg_ctx["runAsUser"], pg_ctx["runAsGroup"], pg_ctx["fsGroup"]) == (999, 999, 999)


def test_restricted_check_catches_a_root_container() -> None:
    # Guards the test above: the checker really refuses what the standard refuses.
    spec = {"containers": [{"name": "x", "securityContext": {"runAsUser": 0}}],
            "volumes": [{"name": "h", "hostPath": {}}]}
    problems = restricted_violations(spec)
    assert any("runAsUser 0" in p for p in problems) and any("hostPath" in p for p in problems)
    assert any("allowPrivilegeEscalation" in p for p in problems)


def test_database_pods_never_match_the_replicas_selectors(render_raw: RenderRaw) -> None:
    docs = manifests(render_raw({"networkPolicy": {"enabled": True}}))
    pg_labels = named(docs, "StatefulSet", PG)["spec"]["template"]["metadata"]["labels"]
    leoflow_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    selectors = {
        "Deployment": one(docs, "Deployment")["spec"]["selector"]["matchLabels"],
        "Service": named(docs, "Service", "wf-leoflow")["spec"]["selector"],
        "PodDisruptionBudget": one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        "NetworkPolicy": named(docs, "NetworkPolicy", "wf-leoflow")["spec"]["podSelector"]["matchLabels"],
        **{f"spread {c['topologyKey']}": c["labelSelector"]["matchLabels"]
           for c in pod_spec(one(docs, "Deployment"))["topologySpreadConstraints"]},
    }
    for what, selector in selectors.items():
        assert selector.items() <= leoflow_labels.items(), f"{what} must select the replicas"
        assert not selector.items() <= pg_labels.items(), f"{what} selects the database pod"
    pg_selector = named(docs, "Service", PG)["spec"]["selector"]
    assert not pg_selector.items() <= leoflow_labels.items()


def test_network_policy_lets_only_the_replicas_reach_the_bundled_database(render_raw: RenderRaw) -> None:
    assert "NetworkPolicy" not in kinds(manifests(render_raw({})))
    docs = manifests(render_raw({"networkPolicy": {"enabled": True}}))
    policy = named(docs, "NetworkPolicy", PG)
    assert validate_strict(policy)
    statefulset = named(docs, "StatefulSet", PG)
    assert policy["spec"]["podSelector"]["matchLabels"] == statefulset["spec"]["selector"]["matchLabels"]
    (rule,) = policy["spec"]["ingress"]
    replicas = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert rule["from"] == [{"podSelector": {"matchLabels": replicas}}]
    (port,) = rule["ports"]
    assert port == {"port": "postgresql", "protocol": "TCP"}
    assert port["port"] in {p["name"] for p in pod_spec(statefulset)["containers"][0]["ports"]}
    external = manifests(render_raw({"networkPolicy": {"enabled": True}, "database": {"existingSecret": "pg"}}))
    assert [d["metadata"]["name"] for d in external if d["kind"] == "NetworkPolicy"] == ["wf-leoflow"]


def test_replicas_wait_for_the_bundled_database_before_migrating(defaults: list[Manifest]) -> None:
    spec = pod_spec(one(defaults, "Deployment"))
    assert [c["name"] for c in spec["initContainers"]] == ["wait-for-postgresql", "migrate"]
    wait = spec["initContainers"][0]
    assert wait["image"] == "postgres:17" and wait["command"] == ["sh", "-c"]
    assert wait["securityContext"] == spec["containers"][0]["securityContext"]
    assert wait["resources"]["requests"] and wait["resources"]["limits"]


PG_ISREADY = shutil.which("pg_isready", path="/usr/lib/postgresql/15/bin")


@pytest.mark.skipif(PG_ISREADY is None, reason="pg_isready (PostgreSQL 15 client) is not installed")
def test_wait_loop_returns_once_the_server_answers(defaults: list[Manifest], empty_database_url: str,
                                                   tmp_path: Path) -> None:
    """Run the rendered wait command (host and port mapped, as DNS would) against a real server."""
    target = urlsplit(empty_database_url)
    script = pod_spec(one(defaults, "Deployment"))["initContainers"][0]["args"][0]
    script = script.replace(f"-h {PG}.{NAMESPACE}.svc -p 5432", f"-h {target.hostname} -p {target.port}")
    env = {"PATH": f"{Path(str(PG_ISREADY)).parent}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    # ... and keeps waiting while nothing listens (a closed port on the same host).
    closed = script.replace(f"-p {target.port}", "-p 1")
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run(["sh", "-c", closed], env=env, capture_output=True, timeout=5)


# ---------------------------------------------------------------------------------- token


def test_generated_token_is_one_admin_line_the_replicas_load(defaults: list[Manifest], tmp_path: Path) -> None:
    text = decoded(named(defaults, "Secret", TOKEN_SECRET))["tokens"]
    (token,) = parse_api_tokens(text, variable="test")
    assert (token.name, token.scope) == ("admin", "admin")
    assert re.fullmatch(r"[A-Za-z0-9]{40}", token.token)
    server = leoflow_containers(defaults)["leoflow"]
    path = env_of(server)["LEOFLOW_API_TOKENS_FILE"]["value"]
    volume = next(v for v in pod_spec(one(defaults, "Deployment"))["volumes"] if v["name"] == "auth")
    assert volume["secret"]["secretName"] == TOKEN_SECRET and path == "/etc/leoflow/auth/tokens"
    (tmp_path / "tokens").write_text(text)
    settings = load_settings({"LEOFLOW_API_TOKENS_FILE": str(tmp_path / "tokens")})
    assert [(t.name, t.scope, t.token) for t in settings.api.tokens] == [("admin", "admin", token.token)]


def fake_kubectl(bin_dir: Path, secrets: list[Manifest]) -> None:
    """A ``kubectl`` that answers ``get secret NAME -o jsonpath={.data.KEY}`` from manifests."""
    table = {s["metadata"]["name"]: s["data"] for s in secrets}
    script = bin_dir / "kubectl"
    script.write_text(f"""#!/usr/bin/env python3
import re, sys
table = {table!r}
args = sys.argv[1:]
name = args[args.index("secret") + 1]
path = args[args.index("-o") + 1]
match = re.fullmatch(r"jsonpath=\\{{\\.data\\.(.+)\\}}", path)
assert match, path
sys.stdout.write(table[name][match.group(1).replace("\\\\.", ".")])
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("secret_key", ["tokens", "api.tokens"])
def test_notes_print_the_one_command_that_reveals_the_token(render_raw: RenderRaw, tmp_path: Path,
                                                            secret_key: str) -> None:
    rendered = render_raw({"auth": {"secretKey": secret_key}})
    docs = manifests(rendered)
    token_line = decoded(named(docs, "Secret", TOKEN_SECRET))[secret_key]
    commands = [line.strip() for line in rendered[NOTES].splitlines() if line.strip().startswith("kubectl")
                and TOKEN_SECRET in line]
    assert len(commands) == 1, rendered[NOTES]
    fake_kubectl(tmp_path, [named(docs, "Secret", TOKEN_SECRET)])
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    printed = subprocess.run(["sh", "-c", commands[0]], env=env, capture_output=True, text=True, timeout=30)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == token_line.strip().split(":")[2]
    assert f"export LEOFLOW_TOKEN=$({commands[0]})" in rendered[NOTES]


def test_notes_for_the_evaluation_install(render_raw: RenderRaw) -> None:
    notes = render_raw({})[NOTES]
    assert "bundled PostgreSQL" in notes and "for evaluation" in notes
    assert "use an external database in production" in notes
    assert f"PVC data-{PG}-0" in notes
    assert "port-forward service/wf-leoflow 8080:8080" in notes and "http://127.0.0.1:8080/" in notes
    assert "export LEOFLOW_URL=http://127.0.0.1:8080" in notes


@pytest.mark.parametrize(("auth", "says"), [
    ({"existingSecret": "leoflow-tokens"}, "your token from auth.existingSecret (Secret leoflow-tokens"),
    ({"tokens": [{"name": "ops", "scope": "admin", "token": "ops-token-123456"}]}, "one of your auth.tokens"),
    ({"enabled": False}, "no token needed"),
])
def test_notes_for_tokens_of_your_own(render_raw: RenderRaw, auth: dict[str, Any], says: str) -> None:
    notes = render_raw({"database": {"existingSecret": "pg"}, "auth": auth})[NOTES]
    assert says in notes
    assert "get secret" not in notes and "bundled PostgreSQL" not in notes


# ------------------------------------------------------------------------- external / modes


@pytest.mark.parametrize("database", [
    {"url": "postgresql://leoflow:secret@db.example:5432/leoflow"},
    {"existingSecret": "pg-credentials", "secretKey": "dsn"},
], ids=["url", "existing-secret"])
def test_external_database_and_tokens_render_no_postgresql_and_no_generated_secret(
        render_raw: RenderRaw, database: dict[str, Any]) -> None:
    docs = manifests(render_raw({"database": database, **EXTERNAL_TOKENS}))
    assert "StatefulSet" not in kinds(docs)
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Service"] == ["wf-leoflow"]
    secrets = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    assert secrets == ({"wf-leoflow-database"} if "url" in database else set())
    assert "postgresql" not in " ".join(d["metadata"]["name"] for d in docs)
    containers = leoflow_containers(docs)
    assert "wait-for-postgresql" not in containers
    expected = ({"name": "wf-leoflow-database", "key": "uri"} if "url" in database
                else {"name": "pg-credentials", "key": "dsn"})
    assert env_of(containers["leoflow"])["LEOFLOW_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == expected


@pytest.mark.parametrize(("values", "bundled"), [
    ({}, True),
    ({"postgresql": {"enabled": "auto"}}, True),
    ({"postgresql": {"enabled": True}}, True),
    ({"postgresql": {"enabled": "auto"}, "database": {"existingSecret": "pg"}}, False),
    ({"postgresql": {"enabled": False}, "database": {"url": "postgresql://u:p@db:5432/x"}}, False),
], ids=["no-values", "auto", "true", "auto-with-external", "false-with-external"])
def test_postgresql_enabled_modes(render_raw: RenderRaw, values: dict[str, Any], bundled: bool) -> None:
    docs = manifests(render_raw(values))
    assert ("StatefulSet" in kinds(docs)) is bundled
    assert any(d["kind"] == "Secret" and d["metadata"]["name"] == PG for d in docs) is bundled


def test_generated_secrets_outlive_helm_uninstall_and_value_secrets_do_not(render_raw: RenderRaw) -> None:
    docs = manifests(render_raw({}))
    for name in (PG, TOKEN_SECRET):
        assert named(docs, "Secret", name)["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    own = manifests(render_raw({"database": {"url": "postgresql://u:p@db:5432/x"},
                                "auth": {"tokens": [{"name": "a", "scope": "admin", "token": "a-token-1234"}]}}))
    for secret in (d for d in own if d["kind"] == "Secret"):
        assert "annotations" not in secret["metadata"], secret["metadata"]["name"]


# ---------------------------------------------------------------------------- lookup


def test_lookup_keeps_generated_values_across_upgrades(chart: helm_python.Chart) -> None:
    """First install generates; every upgrade reads the applied Secrets back, so nothing rolls."""
    with SecretsApi().running() as api, helm_python.Config(kube_apiserver=api.url, kube_token="test",
                                                          namespace=NAMESPACE) as cluster:
        def render(**kind: bool) -> list[Manifest]:
            return manifests(cluster.render(chart, {}, name=RELEASE, namespace=NAMESPACE, **kind))

        install = render(is_install=True)
        assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{PG}" in api.requests, "lookup never asked the cluster"
        for doc in install:
            if doc["kind"] == "Secret":
                api.store(doc)  # as helm install would have applied it
        upgrades = [render(is_upgrade=True) for _ in range(2)]
        for upgrade in upgrades:
            for name in (PG, TOKEN_SECRET):
                assert decoded(named(upgrade, "Secret", name)) == decoded(named(install, "Secret", name))
            checksum = one(upgrade, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/secrets"]
            assert checksum == one(install, "Deployment")["spec"]["template"]["metadata"]["annotations"][
                "checksum/secrets"], "an upgrade without changes must not roll the replicas"


def test_lookup_generates_again_when_a_kept_secret_lacks_the_value(chart: helm_python.Chart) -> None:
    with SecretsApi().running() as api, helm_python.Config(kube_apiserver=api.url, kube_token="test",
                                                          namespace=NAMESPACE) as cluster:
        api.secrets[(NAMESPACE, PG)] = {"uri": b"postgresql://stale"}  # no password key
        api.secrets[(NAMESPACE, TOKEN_SECRET)] = {"tokens": b"ops:admin:kept-token-0123456789\n"}
        docs = manifests(cluster.render(chart, {}, name=RELEASE, namespace=NAMESPACE, is_upgrade=True))
    assert re.fullmatch(r"[A-Za-z0-9]{32}", decoded(named(docs, "Secret", PG))["password"])
    assert decoded(named(docs, "Secret", TOKEN_SECRET))["tokens"] == "ops:admin:kept-token-0123456789\n"


def test_offline_rendering_generates_fresh_values_each_time(render_raw: RenderRaw) -> None:
    # What helm template / Argo CD see: lookup answers nothing, so nothing can be kept.
    first, second = (manifests(render_raw({})) for _ in range(2))
    for name in (PG, TOKEN_SECRET):
        assert decoded(named(first, "Secret", name)) != decoded(named(second, "Secret", name))
