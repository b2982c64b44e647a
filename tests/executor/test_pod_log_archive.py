"""Every container's log of a finished pod — init container, native sidecar, task — is archived in
full by the log shipper (before the tail is stored), read through the official client from the
fake API server, into a file:// archive."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores.log_archive import index as archive_store
from leoflow.executor.kubernetes.kube_client import KubernetesApi
from leoflow.executor.kubernetes.logs import PodLogShipper
from leoflow.settings import Settings
from leoflow.storage.log_chunks import decompress
from leoflow.storage.objects import ObjectStore
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.world import log_row, run_with_term, seed_tries
from tests.harness.fake_k8s import FakeKubernetes

POD = "leoflow-archive-pod"


def test_every_containers_log_is_archived_in_full(settings: Settings, fake_k8s: FakeKubernetes,
                                                  tmp_path: Path) -> None:
    url = (tmp_path / "archive").as_uri()
    s = k8s_settings(settings)
    s = s.replace(log_archive=dataclasses.replace(s.log_archive, url=url),
                  executor=dataclasses.replace(s.executor, task_log_max_bytes=100))
    long_task = "; ".join(f"echo task line {i} {'y' * 40}" for i in range(200))
    fake_k8s.store.create(NAMESPACE, {"metadata": {"name": POD}, "spec": {
        "initContainers": [
            {"name": "fetch", "image": "busybox", "command": ["sh", "-c", "echo fetched the inputs"]},
            {"name": "proxy", "image": "envoy", "restartPolicy": "Always",
             "command": ["sh", "-c", "echo proxy up; sleep 3600"]}],
        "containers": [{"name": "task", "image": "busybox", "command": ["sh", "-c", long_task]}]}})

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        deadline = time.monotonic() + 30
        while fake_k8s.store.get(NAMESPACE, POD)["status"].get("phase") != "Succeeded":
            assert time.monotonic() < deadline, "the pod did not finish"
            await asyncio.sleep(0.05)
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE task_tries SET executor_ref = :pod, ended_at = now(), state = 'success', "
                                    "claimed_by = 'default/test-node' WHERE id = :id"),
                               {"pod": POD, "id": t.task_try_id})
        api = KubernetesApi(s)
        try:
            assert await PodLogShipper().ship_once(s, Database(engine), api) == 1
        finally:
            api.close()
        uid = fake_k8s.store.get(NAMESPACE, POD)["metadata"]["uid"]
        store = ObjectStore(url)
        async with engine.connect() as conn:
            logs = {a.container: a for a in await archive_store.archived_logs(conn, t.task_try_id)}
            assert set(logs) == {"fetch", "proxy", "task"}
            for name, archived in logs.items():
                assert archived.complete, name
                chunks = await archive_store.chunks_between(conn, t.task_try_id, name, 0, 2**62)
                data = b"".join([decompress(await store.get(c.object_key)) for c in chunks])
                assert data.decode() == fake_k8s.kubelet.logs(uid, name), name
        assert logs["task"].size_bytes > 10_000  # the whole log, where PostgreSQL keeps the last 100 bytes
        stored = await log_row(engine, t.task_try_id)
        assert stored is not None and len(str(stored["content"])) <= 100

    run_with_term(s, body, pool_size=4)
