"""The task pod examples of docs/task-pods.md: each one parses, renders and passes ``kubernetes-validate --strict``;
the full example runs end to end on two real replicas, followed live from the one that does not lead."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from leoflow.executor.kubernetes import pods
from leoflow.executor.naming import try_name
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.tries import TryKey
from tests.election.cluster import Cluster, wait_for
from tests.executor.pod_cases import Case, launch_for, render, validate_strictly
from tests.harness.fake_k8s_remote import FakeKubernetesProcess

PAGE = Path(__file__).resolve().parents[2] / "docs" / "task-pods.md"


def section_blocks() -> list[dict[str, Any]]:
    text = PAGE.read_text()
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def full_example() -> dict[str, Any]:
    [dag] = [b for b in section_blocks() if "dag_id" in b]
    return dag


def test_every_readme_example_renders_a_pod_kubernetes_accepts() -> None:
    blocks = section_blocks()
    assert len(blocks) >= 7
    for block in blocks:
        if "dag_id" in block:
            for task in parse_dag_spec(block).tasks:
                validate_strictly(pods.pod_spec("default", "tasks", launch_for(task), service_account=None,
                                                image_pull_secrets=()))
            continue
        validate_strictly(render(Case(block)))  # a task's fields …
        parse_dag_spec({"dag_id": "d", "defaults": block,  # … and the same as defaults
                        "tasks": [{"id": "t", "image": "i", "command": ["true"]}]})


@pytest.mark.slow
def test_the_readme_example_runs_end_to_end_and_is_followed_live_from_a_follower(
        database_url: str, tmp_path: Path) -> None:
    dag = full_example()
    with FakeKubernetesProcess(tmp_path / "kubeconfig", namespace="tasks") as k8s:
        k8s.objects(secrets={"pg": {"password": "pw"}}, config_maps={"etl-config": {"user": "etl"}},
                    pvcs=["etl-data"], node_labels={"pool": "batch"})
        cluster = Cluster(database_url, tmp_path, probe=False, env={
            "LEOFLOW_EXECUTOR": "kubernetes", "KUBECONFIG": str(k8s.kubeconfig),
            "LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS": "etl-runner"})  # the example's own, as the page says
        try:
            for replica in [cluster.start(node, wait=False) for node in ("a", "b")]:  # they start in parallel
                cluster.wait_healthy(replica)
            leader, _ = cluster.wait_leader()
            follower = cluster.replicas["b" if leader == "a" else "a"]
            with httpx.Client(base_url=follower.url, timeout=30) as api:
                answer = api.post("/api/v2/dags", content=yaml.safe_dump(dag),
                                  headers={"Content-Type": "application/yaml"})
                assert answer.status_code == 201, answer.text
                api.post(f"/api/v2/dags/{dag['dag_id']}/runs", json={"run_id": "r1"}).raise_for_status()
                env = {**{k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")},
                       "LEOFLOW_URL": follower.url}
                followed = subprocess.Popen(  # started before the try: it waits for it
                    [str(Path(sys.executable).parent / "leoflow"), "tasks", "logs", dag["dag_id"], "r1", "load",
                     "--follow"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                logs = f"/api/v2/dags/{dag['dag_id']}/runs/r1/tasks/load/logs"
                live = wait_for(lambda: (lambda a: a if a.headers.get("X-Leoflow-Log-Source") == "pod"
                                         and "loading for etl" in a.text else None)(api.get(logs)),
                                60, "the follower's live read of the running pod")
                assert "loaded" not in live.text and live.headers["X-Leoflow-Log-Complete"] == "false"
                out, err = followed.communicate(timeout=120)
                assert followed.returncode == 0, err
                assert out == "loading for etl\nloaded\n"
                run = wait_for(lambda: (lambda r: r if r["state"] in ("success", "failed") else None)(
                    api.get(f"/api/v2/dags/{dag['dag_id']}/runs/r1").json()), 60, "the run's end")
                assert run["state"] == "success", run
                final = api.get(logs)
                assert (final.text, final.headers["X-Leoflow-Log-Source"]) == ("loading for etl\nloaded\n", "stored")
                pod_name = try_name("default", TryKey(dag["dag_id"], "r1", "load", 1))
                [body] = [r["body"] for r in k8s.creates(code=201) if r["name"] == pod_name]
                spec = body["spec"]
                assert spec["nodeSelector"] == {"pool": "batch"} and spec["serviceAccountName"] == "etl-runner"
                [task] = [c for c in spec["containers"] if c["name"] == "task"]
                secret = {"name": "pg", "key": "password"}
                assert {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": secret}} in task["env"]
                assert [v["name"] for v in spec["volumes"]] == ["data"]
                # The log agent never ends: Leoflow deleted the pod once the task container had.
                assert any(r.get("verb") == "delete" and r.get("name") == pod_name for r in k8s.requests())
                read = httpx.get(f"{follower.url}/api/v2/dags/{dag['dag_id']}")
                assert "pw" not in read.text
        finally:
            cluster.stop_all()

