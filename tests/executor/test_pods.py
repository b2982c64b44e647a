"""Pure pod data: names, labels, specs and what a pod's status means (no server needed)."""

from __future__ import annotations

import re

from leoflow.executor.kubernetes import pods
from leoflow.executor.naming import label_value, try_name
from leoflow.model.tries import TaskLaunch, TryKey

_LABEL = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_names_are_deterministic_unique_and_valid() -> None:
    key = TryKey("Very_Long.DAG name" * 3, "manual__" + "r" * 240, "Extract/Transform" * 3, 2)
    name = try_name("default", key)
    assert name == try_name("default", key) and len(name) <= 63 and _DNS.match(name)
    others = {try_name("default", TryKey(key.dag_id, key.run_id, key.task_id, 3)),
              try_name("other", key), try_name("default", TryKey(key.dag_id, key.run_id + "x", key.task_id, 2))}
    assert name not in others and len(others) == 3
    # Separators cannot be used to forge a collision.
    assert try_name("c", TryKey("a-b", "r", "c", 1)) != try_name("c", TryKey("a", "r", "b-c", 1))
    assert re.fullmatch(r"[0-9a-f]{16}", name.rsplit("-", 1)[1])  # 64 bits of hash


def test_label_values_are_valid_and_hashed_only_when_needed() -> None:
    assert label_value("etl_daily") == "etl_daily"
    long = label_value("scheduled__2026-01-01T00:00:00+00:00" + "x" * 80)
    assert len(long) <= 63 and _LABEL.match(long) and long != label_value("scheduled__2026-01-01T00:00:00+00:00")
    assert _LABEL.match(label_value("+++")) and label_value("+++") != label_value("---")


def test_pod_spec_carries_everything_the_try_needs() -> None:
    launch = TaskLaunch(key=TryKey("etl", "run 1", "load", 1), task_try_id=42, term=7, image="img:1",
                        command=["python", "-m", "job"], args=["--day", "1"], env={"B": "2", "A": "1"},
                        resources={"cpu": "500m", "memory": "1Gi"}, timeout_seconds=0.2)
    spec = pods.pod_spec("prod", "tasks", launch, service_account="runner", image_pull_secrets=("regcred",))
    meta, body = spec["metadata"], spec["spec"]
    assert meta["namespace"] == "tasks" and meta["labels"][pods.TERM] == "7"
    assert meta["labels"][pods.RUN] == label_value("run 1") and meta["annotations"][pods.A_RUN] == "run 1"
    assert meta["annotations"][pods.A_TRY_ID] == "42"
    assert body["serviceAccountName"] == "runner" and body["imagePullSecrets"] == [{"name": "regcred"}]
    assert body["activeDeadlineSeconds"] == 1 and body["restartPolicy"] == "Never"
    container = body["containers"][0]
    assert container["args"] == ["--day", "1"] and [e["name"] for e in container["env"]] == ["A", "B"]
    assert container["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"},
                                      "limits": {"cpu": "500m", "memory": "1Gi"}}
    assert pods.pod_try_key(spec) == launch.key and pods.is_same_try(spec, "prod", launch.key)
    assert not pods.is_same_try(spec, "staging", launch.key)
    assert not pods.is_same_try(spec, "prod", TryKey("etl", "run 1", "load", 2))
    assert pods.cluster_selector("prod") == "app.kubernetes.io/managed-by=leoflow,leoflow.io/cluster=prod"


def _pod(phase: str, state: dict[str, object], **status: object) -> dict[str, object]:
    return {"spec": {"activeDeadlineSeconds": 5},
            "status": {"phase": phase, "containerStatuses": [{"name": "task", "state": state}], **status}}


def test_pod_outcomes() -> None:
    assert pods.pod_outcome(_pod("Succeeded", {"terminated": {"exitCode": 0}})).state == "success"
    failed = pods.pod_outcome(_pod("Failed", {"terminated": {"exitCode": 3, "reason": "Error"}}))
    assert (failed.state, failed.exit_code, failed.reason) == ("failed", 3, "Error (exit code 3)")
    oom = pods.pod_outcome(_pod("Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}))
    assert oom.reason == "OOMKilled (exit code 137)"
    deadline = pods.pod_outcome(_pod("Failed", {"terminated": {"exitCode": 137}}, reason="DeadlineExceeded"))
    assert deadline.reason == "timed out after 5s (activeDeadlineSeconds)"
    evicted = pods.pod_outcome(_pod("Failed", {}, reason="Evicted", message="low on memory"))
    assert evicted.reason == "Evicted: low on memory"
    assert pods.pod_outcome(_pod("Running", {"running": {}})).state == "running"
    stuck = pods.pod_outcome(_pod("Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "nope"}}))
    assert (stuck.state, stuck.stuck) == (None, "ImagePullBackOff: nope")
    creating = pods.pod_outcome(_pod("Pending", {"waiting": {"reason": "ContainerCreating"}}))
    assert (creating.state, creating.stuck) == (None, None)


def test_the_task_container_decides_and_pods_that_cannot_start_say_why() -> None:
    task_done = {"name": "task", "state": {"terminated": {"exitCode": 0}}}
    sidecar = {"name": "istio-proxy", "state": {"running": {}}}
    held = pods.pod_outcome({"status": {"phase": "Running", "containerStatuses": [sidecar, task_done]}})
    assert (held.state, held.exit_code, held.sidecars_running) == ("success", 0, True)
    broke = {"name": "task", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}
    failed = pods.pod_outcome({"status": {"phase": "Running", "containerStatuses": [broke, sidecar]}})
    assert (failed.state, failed.reason, failed.sidecars_running) == ("failed", "Error (exit code 2)", True)
    # Native sidecars still stopping (init container statuses) need no delete.
    native = {"name": "proxy", "state": {"running": {}}}
    alone = pods.pod_outcome({"status": {"phase": "Running", "initContainerStatuses": [native],
                                         "containerStatuses": [task_done]}})
    assert (alone.state, alone.sidecars_running) == ("success", False)
    # A sidecar that failed does not fail the try.
    crashed = {"name": "agent", "state": {"terminated": {"exitCode": 1}}}
    after_crash = pods.pod_outcome({"status": {"phase": "Failed", "containerStatuses": [task_done, crashed]}})
    assert after_crash.state == "success"
    unschedulable = pods.pod_outcome({"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient cpu."}]}})
    assert unschedulable.stuck == "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu."
    sidecar_pull = pods.pod_outcome({"status": {"phase": "Pending", "containerStatuses": [
        {"name": "task", "state": {"waiting": {"reason": "ContainerCreating"}}},
        {"name": "agent", "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]}})
    assert sidecar_pull.stuck == "ErrImagePull (container agent): not found"
    init = pods.pod_outcome({"status": {"phase": "Failed", "initContainerStatuses": [
        {"name": "migrate", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}],
        "containerStatuses": [{"name": "task", "state": {"waiting": {"reason": "PodInitializing"}}}]}})
    assert (init.state, init.reason) == ("failed", "init container migrate failed: Error (exit code 3)")
