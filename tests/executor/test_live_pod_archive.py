"""A running pod's container logs are archived while it runs, and a leader change resumes where the archive's
index ends — no gap, no duplicate — through the official client against the fake API server (``follow=true``),
into a file:// archive on real Postgres."""

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
from leoflow.executor.naming import try_name
from leoflow.model.k8s.pod import PodFields
from leoflow.settings import Settings
from leoflow.storage.log_chunks import CONTAINER_NAME, attempt_name, chunk_key, decompress
from leoflow.storage.objects import ObjectStore
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import run, started
from tests.executor.world import Recorder, seed_tries, set_term
from tests.harness.fake_k8s import FakeKubernetes


async def _archived(engine: AsyncEngine, task_try_id: int, container: str = "task") -> int:
    async with engine.connect() as conn:
        logs = {a.container: a for a in await archive_store.archived_logs(conn, task_try_id)}
    return logs[container].size_bytes if container in logs else 0


async def _until(predicate: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_a_running_pods_log_grows_in_the_archive_and_a_new_leader_resumes_it(
        settings: Settings, fake_k8s: FakeKubernetes, tmp_path: Path) -> None:
    url = (tmp_path / "archive").as_uri()
    s = k8s_settings(settings)
    s = s.replace(log_archive=dataclasses.replace(s.log_archive, url=url, flush_interval=0.2))
    script = "; ".join(f"echo line {i} {'z' * 30}; sleep 1" for i in range(14)) + "; echo done"

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        name = try_name("default", t.key)
        rec = Recorder(engine)
        first = await started(s, engine, 1, rec)
        await first.submit(t.launch(["sh", "-c", script], term=1))

        def running() -> bool:
            pods = fake_k8s.pods(NAMESPACE)
            return bool(pods) and pods[0]["status"].get("phase") == "Running"

        async def some_archived() -> bool:
            return await _archived(engine, t.task_try_id) > 0

        await _until(some_archived, "the first lines archived while the pod runs")
        assert running(), "archived only once the pod ended: not live"
        follows = [r for r in fake_k8s.requests if r.get("verb") == "log" and r.get("query", {}).get("follow")]
        assert follows, "the archive was not fed by a followed log"
        await first.stop()  # the leader goes away mid-log
        at_handover = await _archived(engine, t.task_try_id)

        await set_term(engine, "default", 2)
        second = await started(s, engine, 2, rec)

        async def grew() -> bool:
            return await _archived(engine, t.task_try_id) > at_handover

        await _until(grew, "the new leader to carry the archive on")
        assert running(), "the new leader archived only after the pod ended: not live"
        assert (await rec.wait_final(t.key, timeout=60)).state == "success"
        await second.stop()

        # The log shipper completes the archive after the pod ended, reading past what is archived.
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE task_tries SET executor_ref = :pod, ended_at = now(), state = 'success', "
                                    "claimed_by = 'default/test-node' WHERE id = :id"),
                               {"pod": name, "id": t.task_try_id})
        api = KubernetesApi(s)
        try:
            assert await PodLogShipper().ship_once(s, Database(engine), api) == 1
        finally:
            api.close()
        uid = fake_k8s.store.get(NAMESPACE, name)["metadata"]["uid"]
        store = ObjectStore(url)
        async with engine.connect() as conn:
            [archived] = [a for a in await archive_store.archived_logs(conn, t.task_try_id) if a.container == "task"]
            chunks = await archive_store.chunks_between(conn, t.task_try_id, "task", 0, 2**62)
        assert archived.complete and archived.chunks >= 3  # shipped in pieces while it ran, then completed
        assert [c.start for c in chunks] == [0, *[c.end for c in chunks[:-1]]]  # contiguous: no gap, no overlap
        data = b"".join([decompress(await store.get(c.object_key)) for c in chunks])
        assert data.decode() == fake_k8s.kubelet.logs(uid, "task")
        assert data.decode().endswith("done\n")
        # The completing read skipped what was archived: it wrote only the missing end.
        assert archived.size_bytes == len(data)

    run(s, body)


def test_each_restart_of_a_container_keeps_its_own_log(settings: Settings, fake_k8s: FakeKubernetes,
                                                       tmp_path: Path) -> None:
    """A native sidecar that keeps crashing: every run's log is archived apart — ``proxy`` (the first
    run, the name every log had before), ``proxy#1``, ``proxy#2`` … — each read with ``previous=true``
    before the next restart loses it, and the last run's completed after the pod ends."""
    url = (tmp_path / "archive").as_uri()
    s = k8s_settings(settings)
    s = s.replace(log_archive=dataclasses.replace(s.log_archive, url=url, flush_interval=0.2))

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        name = try_name("default", t.key)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        fields = PodFields()
        launch = t.launch(["sh", "-c", "echo working; sleep 4; echo done"], term=1, pod=fields)
        await ex.submit(launch)
        # The sidecar is added the way part of a pod template would be (the fake serves what it is given).
        await rec.wait_for(lambda: bool(fake_k8s.pods(NAMESPACE)), what="the pod")
        assert (await rec.wait_final(t.key, timeout=60)).state == "success"
        await ex.stop()
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE task_tries SET executor_ref = :pod, ended_at = now(), state = 'success', "
                                    "claimed_by = 'default/test-node' WHERE id = :id"),
                               {"pod": name, "id": t.task_try_id})
        api = KubernetesApi(s)
        try:
            assert await PodLogShipper().ship_once(s, Database(engine), api) == 1
        finally:
            api.close()
        store = ObjectStore(url)
        async with engine.connect() as conn:
            logs = {a.container: a for a in await archive_store.archived_logs(conn, t.task_try_id)}
            texts = {}
            for container in logs:
                chunks = await archive_store.chunks_between(conn, t.task_try_id, container, 0, 2**62)
                texts[container] = b"".join([decompress(await store.get(c.object_key)) for c in chunks]).decode()
        runs = sorted((c for c in logs if c.startswith("proxy")), key=lambda c: int(c.partition("#")[2] or 0))
        assert runs[:3] == ["proxy", "proxy#1", "proxy#2"], runs
        assert texts["proxy"] == "proxy run \n"
        for run_name in runs[1:]:
            assert texts[run_name] == f"proxy run {run_name.partition('#')[2]}\n", run_name
            assert logs[run_name].complete, run_name
        assert texts["task"] == "working\ndone\n" and logs["task"].complete

    sidecar = {"name": "proxy", "image": "envoy", "restartPolicy": "Always",
               "command": ["sh", "-c", "echo proxy run $FAKE_RESTART_COUNT; sleep 0.6; exit 1"]}
    original = fake_k8s.store.create

    def with_sidecar(ns: str, body: dict[str, object]) -> dict[str, object]:
        spec = body.setdefault("spec", {})
        assert isinstance(spec, dict)
        spec["initContainers"] = [*(spec.get("initContainers") or []), sidecar]
        return original(ns, body)

    fake_k8s.store.create = with_sidecar  # type: ignore[method-assign]
    run(s, body)


def test_a_restarts_log_name_is_a_valid_archive_container() -> None:
    assert attempt_name("proxy", 0) == "proxy" and attempt_name("proxy", 3) == "proxy#3"
    long = "a" * 62 + "b"
    assert len(attempt_name(long, 12)) == 63 and attempt_name(long, 12).endswith("#12")
    assert all(CONTAINER_NAME.fullmatch(n) for n in ("task", "proxy#1", attempt_name(long, 99_999)))
    assert not any(CONTAINER_NAME.fullmatch(n) for n in ("proxy#0", "proxy#", "#1", "proxy#1#2", "Proxy#1"))
    assert chunk_key("c", 7, "proxy#2", 0, 4096) == "logs/c/7/proxy.2/000000000000000-000000000004096.gz"
