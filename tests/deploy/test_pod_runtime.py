"""The pod the chart renders, run the way a kubelet would run it, against real parts.

No cluster here, so this test plays the kubelet for one replica of the rendered Deployment:
it resolves every env var (downward API fields, Secret keys from the rendered Secrets, ``$(VAR)``
expansion), materialises the volumes (Secret files, emptyDirs) in a temp dir, runs the
``migrate`` init container to completion and then the ``leoflow`` container as real OS
processes, with a real PostgreSQL and the faithful fake Kubernetes API server
(``tests/harness/fake_k8s.py``) in place of the cluster. The only liberties: mount paths are
mapped into a temp dir (we cannot mount), and ``KUBECONFIG`` stands in for the in-cluster
service-account token.

It checks what only a running pod can show: the probes answer 200 on the rendered port, the
replica elects itself under its pod name, the leader syncs the DAG files the chart mounts from
ConfigMaps (``dags.configMaps`` and ``dags.inline``) and follows an update of a ConfigMap
without a restart, a triggered task of a synced DAG becomes a pod in the namespace the chart
configured — created with only the verbs the chart's Role grants — and SIGTERM ends the
replica well inside ``terminationGracePeriodSeconds``.

ConfigMap volumes are written, and updated, the way the kubelet's atomic writer does it
(``tests/harness/configmap_volume.py``: timestamped directory, ``..data`` symlink swap).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from leoflow.standalone.embedded import free_port
from tests.deploy.conftest import MINIMAL, NAMESPACE, Manifest, Render, merged, one
from tests.harness.configmap_volume import ConfigMapVolume
from tests.harness.fake_k8s import FakeKubernetes

POD_NAME = "wf-leoflow-5d8c7b9f6d-x7k2p"
POD_IP = "127.0.0.1"
TOKEN = MINIMAL["auth"]["tokens"][0]["token"]
#: RBAC verb of each request the fake API server logs (``log`` is ``get`` on ``pods/log``).
RBAC_OF_REQUEST = {"create": ("pods", "create"), "get": ("pods", "get"), "list": ("pods", "list"),
                   "watch": ("pods", "watch"), "delete": ("pods", "delete"), "log": ("pods/log", "get"),
                   "list-events": ("events", "list"), "watch-events": ("events", "watch")}


class Kubelet:
    """Just enough of a kubelet to run one pod of the rendered Deployment on this machine.

    ``config_maps`` are the ConfigMaps that exist in the cluster besides the rendered ones (what
    a user or a GitOps tool created); :meth:`update_config_map` changes one the way the kubelet
    refreshes a mounted ConfigMap after an update.
    """

    def __init__(self, docs: list[Manifest], root: Path, extra_env: dict[str, str],
                 config_maps: dict[str, dict[str, str]] | None = None) -> None:
        self.docs = docs
        self.spec: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]
        self.root = root
        self.extra_env = extra_env
        self.config_maps = {**{d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"},
                            **(config_maps or {})}
        self.mounts: dict[str, Path] = {}
        self.config_map_volumes: dict[str, ConfigMapVolume] = {}
        for volume in self.spec["volumes"]:
            path = root / "volumes" / volume["name"]
            if "configMap" in volume:
                name = volume["configMap"]["name"]
                self.config_map_volumes[name] = ConfigMapVolume(path)
                self.config_map_volumes[name].write(self.config_maps[name])  # a missing one: no pod start
                self.mounts[volume["name"]] = path
                continue
            path.mkdir(parents=True)
            if "secret" in volume:
                for key, value in self.secret(volume["secret"]["secretName"]).items():
                    (path / key).write_bytes(value)
            else:
                assert "emptyDir" in volume, f"unsupported volume {volume}"
            self.mounts[volume["name"]] = path

    def update_config_map(self, name: str, data: dict[str, str]) -> None:
        self.config_map_volumes[name].write(data)

    def rootfs(self, container: dict[str, Any]) -> Path:
        """The container's view of its mounts: each mountPath under one local root (links to the volumes)."""
        rootfs = self.root / f"rootfs-{container['name']}"
        for mount in container.get("volumeMounts", []):
            target = rootfs / mount["mountPath"].lstrip("/")
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(self.mounts[mount["name"]], target_is_directory=True)
        return rootfs

    def secret(self, name: str) -> dict[str, bytes]:
        secret = next(d for d in self.docs if d["kind"] == "Secret" and d["metadata"]["name"] == name)
        return {k: base64.b64decode(v) for k, v in secret["data"].items()}

    def field(self, path: str) -> str:
        return {"metadata.name": POD_NAME, "metadata.namespace": NAMESPACE, "status.podIP": POD_IP}[path]

    def environment(self, container: dict[str, Any]) -> dict[str, str]:
        mount_map = {m["mountPath"]: self.mounts[m["name"]] for m in container.get("volumeMounts", [])}
        env: dict[str, str] = {}
        for entry in container.get("env", []):
            if "value" in entry:
                # Kubernetes expands $(VAR) from variables defined earlier in the list.
                value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), entry["value"])
            elif "fieldRef" in entry["valueFrom"]:
                value = self.field(entry["valueFrom"]["fieldRef"]["fieldPath"])
            else:
                ref = entry["valueFrom"]["secretKeyRef"]
                value = self.secret(ref["name"])[ref["key"]].decode()
            for mount_path, local in mount_map.items():
                if value == mount_path or value.startswith(mount_path + "/"):
                    value = str(local) + value[len(mount_path):]
                elif value.startswith("/") and mount_path.startswith(value.rstrip("/") + "/"):
                    # A directory that holds mounts (LEOFLOW_DAGS_DIR holds one per ConfigMap).
                    value = str(self.rootfs(container)) + value
            env[entry["name"]] = value
        base = {k: v for k, v in os.environ.items() if not k.startswith(("LEOFLOW_", "KUBERNETES_"))}
        return {**base, **self.extra_env, **env}

    def start(self, container: dict[str, Any]) -> tuple[subprocess.Popen[bytes], Path]:
        assert container["command"] == ["leoflow"]
        log = self.root / f"{container['name']}.log"
        with log.open("wb") as out:  # the child keeps its own descriptor
            proc = subprocess.Popen([sys.executable, "-m", "leoflow", *container["args"]],
                                    env=self.environment(container), stdout=out, stderr=subprocess.STDOUT,
                                    cwd=self.root)
        return proc, log


@pytest.fixture
def fake_k8s() -> Iterator[FakeKubernetes]:
    with FakeKubernetes(startup_delay=0.05) as fake:
        yield fake


def wait_for(check: Any, *, timeout: float, what: str, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; replica log:\n{log.read_text()[-4000:]}")


def get(url: str, **kwargs: Any) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=5, **kwargs)
    except httpx.TransportError:
        return None


def dag_file(dag_id: str, command: str = "echo hello") -> str:
    return (f"dag_id: {dag_id}\ntasks:\n  - id: hello\n    image: busybox:1.36\n"
            f"    command: [sh, -c, {json.dumps(command)}]\n")


@pytest.mark.slow
def test_rendered_pod_runs_migrates_leads_syncs_dags_launches_a_task_and_stops_in_time(
        render: Render, empty_database_url: str, fake_k8s: FakeKubernetes, tmp_path: Path) -> None:
    port = free_port()
    docs = render(merged(MINIMAL, {"database": {"url": empty_database_url}, "containerPort": port,
                                   "config": {"logFormat": "text"},
                                   "dags": {"configMaps": ["team-a-dags"],
                                            "inline": {"deploy-smoke.yaml": dag_file("deploy-smoke")}}}))
    kubeconfig = fake_k8s.write_kubeconfig(tmp_path / "kubeconfig")
    team_a = {"etl.yaml": dag_file("etl"), "report.yaml": dag_file("report")}
    kubelet = Kubelet(docs, tmp_path, {"KUBECONFIG": str(kubeconfig)}, config_maps={"team-a-dags": team_a})

    (init,) = kubelet.spec["initContainers"]
    migrate, migrate_log = kubelet.start(init)
    assert migrate.wait(timeout=120) == 0, migrate_log.read_text()

    (container,) = kubelet.spec["containers"]
    replica, log = kubelet.start(container)
    try:
        base = f"http://{POD_IP}:{port}"
        probes = {k: container[k]["httpGet"]["path"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}

        def probes_pass() -> bool:
            assert replica.poll() is None, f"replica exited {replica.returncode}:\n{log.read_text()[-4000:]}"
            responses = [get(base + path) for path in probes.values()]
            return all(r is not None and r.status_code == 200 for r in responses)

        wait_for(probes_pass, timeout=150, what="the rendered probes to pass", log=log)

        auth = {"Authorization": f"Bearer {TOKEN}"}

        def leads_as_its_pod() -> bool:
            response = get(base + "/api/v2/cluster/leader", headers=auth)
            return response is not None and response.status_code == 200 and POD_NAME in response.text

        wait_for(leads_as_its_pod, timeout=60, what="the replica to lead under its pod name", log=log)

        def synced_dags() -> dict[str, tuple[str | None, int]]:
            response = get(base + "/api/v2/dags", headers=auth)
            assert response is not None and response.status_code == 200, response
            return {d["dag_id"]: (d["source"], d["version"]) for d in response.json()["items"]}

        # The leader syncs both ConfigMaps (one the user made, one rendered from dags.inline),
        # labelled with the release name.
        wanted = {"deploy-smoke": ("wf", 1), "etl": ("wf", 1), "report": ("wf", 1)}
        wait_for(lambda: synced_dags() == wanted, timeout=60, what="the mounted DAGs to be synced", log=log)
        # A GitOps tool updates the ConfigMap: etl changes, report's file is gone, daily is new.
        kubelet.update_config_map("team-a-dags", {"etl.yaml": dag_file("etl", "echo v2"),
                                                  "daily.yaml": dag_file("daily")})
        wanted = {"deploy-smoke": ("wf", 1), "etl": ("wf", 2), "daily": ("wf", 1)}
        wait_for(lambda: synced_dags() == wanted, timeout=60, what="the ConfigMap update to be synced", log=log)
        assert replica.poll() is None, "the replica restarted instead of syncing"

        triggered = httpx.post(base + "/api/v2/dags/deploy-smoke/runs", json={}, headers=auth, timeout=10)
        assert triggered.status_code == 201, triggered.text

        task_pods = wait_for(lambda: fake_k8s.pods(NAMESPACE), timeout=60, what="a task pod", log=log)
        assert all(p["metadata"]["namespace"] == NAMESPACE for p in task_pods)
        assert not fake_k8s.pods() or {p["metadata"]["namespace"] for p in fake_k8s.pods()} == {NAMESPACE}
    finally:
        replica.send_signal(signal.SIGTERM)
        grace = kubelet.spec["terminationGracePeriodSeconds"]
        pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
        try:
            # What is left of the grace period after the preStop pause: a kubelet SIGKILLs after it.
            code = replica.wait(timeout=grace - pre_stop)
        except subprocess.TimeoutExpired:
            replica.kill()
            replica.wait()
            tail = log.read_text()[-4000:]
            raise AssertionError(f"replica outlived terminationGracePeriodSeconds:\n{tail}") from None
    assert code == 0, log.read_text()[-4000:]

    role = one(docs, "Role")
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    requests = [r for r in fake_k8s.requests if "verb" in r]
    assert requests, "the executor made no Kubernetes API request"
    for request in requests:
        assert RBAC_OF_REQUEST[request["verb"]] in granted, f"{request['verb']} {request['path']} is not granted"
        assert request["path"].startswith(tuple(f"/api/v1/namespaces/{role['metadata']['namespace']}/{r}"
                                                for r in ("pods", "events"))), \
            f"{request['path']} is outside the Role's namespace"
