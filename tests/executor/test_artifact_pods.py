"""Artifacts on Kubernetes: the pod of a task with artifacts gets an ``emptyDir``, an init container
that fetches the inputs and a native sidecar that uploads the outputs, both in Leoflow's image —
rendered and validated offline, and created through the official client against the fake API server
with the inputs resolved from the index (the upstream's latest successful try)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores.log_archive import artifacts as artifact_store
from leoflow.executor.artifacts import manifest_key
from leoflow.executor.kubernetes import pods
from leoflow.executor.kubernetes.artifact_containers import FETCH, UPLOAD, UPLOAD_GRACE, VOLUME, with_artifacts
from leoflow.executor.kubernetes.pod_render import check_rendered
from leoflow.executor.naming import try_name
from leoflow.model.artifacts.declared import InputArtifact, OutputArtifact, TaskArtifacts
from leoflow.model.artifacts.objects import PackedArtifact
from leoflow.settings import Settings
from leoflow.storage.objects import ObjectStore
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.pod_cases import Case, launch_of, validate_strictly
from tests.executor.test_kubernetes import run, started
from tests.executor.world import Recorder, seed_tries, set_term
from tests.harness.fake_k8s import FakeKubernetes

ARTIFACTS = TaskArtifacts(outputs=(OutputArtifact("report", "out/report"),),
                          inputs=(InputArtifact("data", "extract", "data", "in/data"),))
INPUTS = [{"name": "data", "path": "in/data", "optional": False, "key": "artifacts/default/1/data.tar.gz",
           "digest": "sha256:" + "a" * 64, "problem": None}]


def _render(artifacts: TaskArtifacts | None) -> dict[str, Any]:
    launch = launch_of(Case({}))._replace(artifacts=artifacts)
    pod = pods.pod_spec("default", NAMESPACE, launch, service_account=None, image_pull_secrets=())
    return with_artifacts(pod, launch, cluster="default", archive_url="s3://bucket/archive", inputs=INPUTS)


def _named(containers: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(c for c in containers if c["name"] == name)


def test_the_pod_gets_a_fetch_init_container_an_upload_sidecar_and_a_shared_empty_dir() -> None:
    pod = _render(ARTIFACTS)
    spec = pod["spec"]
    assert {"name": VOLUME, "emptyDir": {}} in spec["volumes"]
    fetch, upload = spec["initContainers"]
    assert (fetch["name"], upload["name"]) == (FETCH, UPLOAD)  # fetch completes before the sidecar starts
    assert "restartPolicy" not in fetch and upload["restartPolicy"] == "Always"  # a native sidecar
    assert fetch["command"] == upload["command"] == ["leoflow", "artifacts"]
    assert fetch["args"][:4] == ["fetch", "--root", "/leoflow/artifacts", "--inputs"]
    assert json.loads(fetch["args"][4]) == INPUTS
    assert upload["args"][upload["args"].index("--try-id") + 1] == "7" and "--on-signal" in upload["args"]
    assert json.loads(upload["args"][-1]) == [{"name": "report", "path": "out/report", "optional": False}]
    task = _named(spec["containers"], "task")
    for container in (task, fetch, upload):
        assert {"name": VOLUME, "mountPath": "/leoflow/artifacts"} in container["volumeMounts"]
    assert {"name": "LEOFLOW_ARTIFACTS", "value": "/leoflow/artifacts"} in task["env"]
    assert {"name": "LEOFLOW_LOG_ARCHIVE_URL", "value": "s3://bucket/archive"} in upload["env"]
    assert spec["terminationGracePeriodSeconds"] == UPLOAD_GRACE
    plain = _render(None)
    assert task["image"] == _named(plain["spec"]["containers"], "task")["image"]  # the task's own image
    assert fetch["image"] == upload["image"] != task["image"]  # Leoflow's, so the task's needs nothing
    check_rendered(pod)
    validate_strictly(pod)


@pytest.mark.parametrize("artifacts", [None, TaskArtifacts()])
def test_a_task_without_artifacts_keeps_its_pod(artifacts: TaskArtifacts | None) -> None:
    launch = launch_of(Case({}))
    plain = pods.pod_spec("default", NAMESPACE, launch, service_account=None, image_pull_secrets=())
    assert _render(artifacts) == plain


def test_only_outputs_means_no_fetch_container() -> None:
    pod = _render(TaskArtifacts(outputs=ARTIFACTS.outputs))
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [UPLOAD]


def test_the_executor_creates_the_pod_with_the_upstreams_stored_artifact(settings: Settings,
                                                                         fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)  # and a mirrored image for the artifact containers (LEOFLOW_K8S_ARTIFACTS_IMAGE)
    s = s.replace(executor=dataclasses.replace(s.executor, kubernetes=dataclasses.replace(
        s.executor.kubernetes, artifacts_image="registry.example/leoflow:mirror")))

    async def body(engine: AsyncEngine) -> None:
        upstream, consumer = await seed_tries(engine, 2)
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE task_tries SET state = 'success' WHERE id = :id"),
                               {"id": upstream.task_try_id})
        stored = PackedArtifact("data", "directory", 10, 5, 2, "sha256:" + "b" * 64,
                                object_key=f"artifacts/default/{upstream.task_try_id}/data.tar.gz")
        async with Database(engine).transaction() as conn:
            await artifact_store.record_artifacts(conn, upstream.task_try_id, [stored])
        artifacts = TaskArtifacts(inputs=(InputArtifact("d", upstream.key.task_id, "data", "in/d"),))
        rec = Recorder(engine)
        rec.track([consumer])
        ex = await started(s, engine, 1, rec)
        await ex.submit(consumer.launch(["sh", "-c", "true"], term=1, artifacts=artifacts))
        name = try_name("default", consumer.key)
        for _ in range(200):
            found = [p for p in fake_k8s.pods(NAMESPACE) if p["metadata"]["name"] == name]
            if found:
                break
            await asyncio.sleep(0.05)
        await ex.stop()
        [pod] = found
        fetch = _named(pod["spec"]["initContainers"], FETCH)
        [item] = json.loads(fetch["args"][fetch["args"].index("--inputs") + 1])
        assert (item["key"], item["digest"], item["path"]) == (stored.object_key, stored.digest, "in/d")
        assert fetch["image"] == "registry.example/leoflow:mirror"

    run(s, body)


@pytest.mark.parametrize("manifest", ["stored", "missing", "none"])
def test_the_try_ends_once_the_sidecars_manifest_is_indexed(settings: Settings, fake_k8s: FakeKubernetes,
                                                             tmp_path: Any, manifest: str) -> None:
    """The fake kubelet interprets commands rather than running images, so the sidecar's manifest is
    written here as ``leoflow artifacts upload`` writes it; the executor waits for it, indexes it, and
    a success whose required output was not stored fails naming it (no manifest at all: the same)."""
    archive = (tmp_path / "archive").as_uri()
    s = k8s_settings(settings)
    s = s.replace(log_archive=dataclasses.replace(s.log_archive, url=archive))

    async def body(engine: AsyncEngine) -> None:
        [producer] = await seed_tries(engine, 1)
        results = [PackedArtifact("report", "file", 5, 30, 1, "sha256:" + "c" * 64,
                                  object_key=f"artifacts/default/{producer.task_try_id}/report.tar.gz")]
        if manifest == "missing":
            results = [PackedArtifact("report", None, missing=True)]
        if manifest != "none":
            await ObjectStore(archive).put(manifest_key("default", producer.task_try_id),
                                           json.dumps([r.to_json() for r in results]).encode())
        rec = Recorder(engine)
        rec.track([producer])
        ex = await started(s, engine, 1, rec)
        ex.artifact_wait = 1.0  # the sidecar's grace, shortened: the "none" case waits this long
        await ex.submit(producer.launch(["sh", "-c", "true"], term=1,
                                        artifacts=TaskArtifacts(outputs=(OutputArtifact("report", "r.txt"),))))
        final = await rec.wait_final(producer.key)
        await ex.stop()
        async with engine.connect() as conn:
            rows = await artifact_store.list_artifacts(conn, producer.key.dag_id, producer.key.run_id,
                                                       producer.key.task_id)
        if manifest == "stored":
            assert (final.state, final.reason) == ("success", None)
            assert [(r.name, r.complete, r.object_key) for r in rows] == [("report", True, results[0].object_key)]
        else:
            assert final.state == "failed" and "artifact 'report'" in (final.reason or "")
            assert [(r.name, r.complete) for r in rows] == [("report", False)]
        if manifest == "none":
            assert "wrote no manifest" in (final.reason or "")

    run(s, body)


def test_a_leader_that_adopts_the_try_waits_for_its_manifest_too(settings: Settings, fake_k8s: FakeKubernetes,
                                                                   tmp_path: Any) -> None:
    """The leader that created the pod dies while it runs; its successor has no launch for it. It reads
    the outputs back from the pod's upload sidecar and judges the end the same way: here the sidecar
    found the required output missing, so the success becomes a failure naming it (a successor that
    forgot the artifacts reported success, and the consumer failed on an input never stored)."""
    archive = (tmp_path / "archive").as_uri()
    s = k8s_settings(settings)
    s = s.replace(log_archive=dataclasses.replace(s.log_archive, url=archive))

    async def body(engine: AsyncEngine) -> None:
        [producer] = await seed_tries(engine, 1)
        await ObjectStore(archive).put(manifest_key("default", producer.task_try_id), json.dumps(
            [PackedArtifact("report", None, missing=True).to_json()]).encode())
        rec1 = Recorder(engine)
        rec1.track([producer])
        old = await started(s, engine, 1, rec1)
        await old.submit(producer.launch(["sh", "-c", "sleep 1.5"], term=1,
                                         artifacts=TaskArtifacts(outputs=(OutputArtifact("report", "r.txt"),))))
        await rec1.wait_for(lambda: "running" in rec1.states(producer.key), what="running")
        await old.stop()  # the leader dies; its pod keeps running
        await set_term(engine, "default", 2)
        rec2 = Recorder(engine)
        rec2.track([producer])
        new = await started(s, engine, 2, rec2)
        new.artifact_wait = 1.0
        final = await rec2.wait_final(producer.key)
        await new.stop()
        assert final.state == "failed" and "artifact 'report'" in (final.reason or ""), final
        assert len(fake_k8s.creates()) == 1

    run(s, body)
