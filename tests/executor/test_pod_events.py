"""The Kubernetes events of a try's pod: kept with the try, told in its failure reason, collected by one
list + watch of events per namespace (field selector, resourceVersion, 410 Gone) — against the fake API
server through the official client, on real Postgres."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores.pods import events as event_store
from leoflow.db.stores.pods.events import PodEventRow
from leoflow.executor.kubernetes.pod_events import parse_event
from leoflow.executor.naming import try_name
from leoflow.model.k8s.pod import EnvSource, PodFields
from leoflow.model.limits import POD_EVENT_MESSAGE, POD_EVENTS
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import run, started
from tests.executor.world import Recorder, seed_tries
from tests.harness.fake_k8s import FakeKubernetes


async def _events(engine: AsyncEngine, task_try_id: int) -> list[PodEventRow]:
    async with Database(engine).connect() as conn:
        return await event_store.events_of_try(conn, task_try_id)


async def _until_events(engine: AsyncEngine, task_try_id: int, wanted: set[str],
                        timeout: float = 30.0) -> list[PodEventRow]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rows = await _events(engine, task_try_id)
        if wanted <= {r.reason for r in rows}:
            return rows
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"events {wanted} not all kept; kept: {[r.reason for r in rows]}")
        await asyncio.sleep(0.1)


def test_a_finished_pods_events_are_kept_with_its_try(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await ex.submit(t.launch(["sh", "-c", "echo hi"], term=1))
        assert (await rec.wait_final(t.key)).state == "success"
        rows = await _until_events(engine, t.task_try_id, {"Scheduled", "Pulled", "Created", "Started"})
        await ex.stop()
        started_row = next(r for r in rows if r.reason == "Started")
        assert started_row.container == "task" and started_row.type == "Normal"
        assert next(r for r in rows if r.reason == "Scheduled").container is None
        # Collected by a field-selected list and watch of events, never per pod.
        event_calls = [r for r in fake_k8s.requests if r.get("verb") in ("list-events", "watch-events")]
        assert event_calls and all(r["selector"] == "involvedObject.kind=Pod" for r in event_calls)

    run(s, body)


def test_missing_secret_volume_fails_with_failedmount_in_the_reason(settings: Settings,
                                                                      fake_k8s: FakeKubernetes) -> None:
    """The pod's status only says ContainerCreating: its events say why, and the try fails saying so."""
    s = k8s_settings(settings, pending_timeout=1.0)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        fields = PodFields(volumes=({"name": "creds", "secret": {"secretName": "db-creds"}},),
                           volume_mounts=({"name": "creds", "mountPath": "/creds"},))
        await ex.submit(t.launch(["sh", "-c", "echo hi"], term=1, pod=fields))
        final = await rec.wait_final(t.key)
        rows = await _until_events(engine, t.task_try_id, {"Scheduled", "FailedMount"})
        await ex.stop()
        assert final.state == "failed"
        assert 'FailedMount: MountVolume.SetUp failed for volume "creds" : secret "db-creds" not found' in str(
            final.reason)
        mount = next(r for r in rows if r.reason == "FailedMount")
        assert mount.type == "Warning" and mount.count >= 2  # repeats fold into one row whose count grows

    run(s, body)


def test_image_pull_and_missing_secret_env_events_join_the_reason(settings: Settings,
                                                                    fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings, pending_timeout=1.0)

    async def body(engine: AsyncEngine) -> None:
        pull, config = await seed_tries(engine, 2)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await ex.submit(pull.launch(["true"], term=1, image="registry.example/pull-error:1"))
        await ex.submit(config.launch(["true"], term=1, pod=PodFields(env_from=(EnvSource("secret", "pg"),))))
        pulled, configured = await rec.wait_final(pull.key), await rec.wait_final(config.key)
        pull_rows = await _until_events(engine, pull.task_try_id, {"Pulling", "Failed", "BackOff"})
        config_rows = await _until_events(engine, config.task_try_id, {"Failed"})
        await ex.stop()
        assert pulled.state == "failed" and "registry.example/pull-error:1" in str(pulled.reason)
        assert str(pulled.reason).count("failed to pull and unpack") <= 1  # the events add nothing told twice
        assert any(r.message == 'Back-off pulling image "registry.example/pull-error:1"' for r in pull_rows)
        assert any(r.type == "Warning" and "Failed to pull image" in r.message for r in pull_rows)
        assert configured.state == "failed" and 'secret "pg" not found' in str(configured.reason)
        assert any(r.message == 'Error: secret "pg" not found' for r in config_rows)

    run(s, body)


def test_oomkilled_is_the_reason(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await ex.submit(t.launch(["sh", "-c", "echo allocating; oom"], term=1))
        final = await rec.wait_final(t.key)
        await ex.stop()
        assert final.state == "failed" and final.exit_code == 137 and str(final.reason).startswith("OOMKilled")

    run(s, body)


def test_events_after_410_are_relisted_without_duplicates(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    """A compacted history answers the event watch 410: the namespace's events are listed again and
    every event is still one row (by uid), with the latest count."""
    s = k8s_settings(settings, pending_timeout=300.0)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        fields = PodFields(volumes=({"name": "creds", "secret": {"secretName": "late"}},))
        await ex.submit(t.launch(["sh", "-c", "echo hi"], term=1, pod=fields))
        await _until_events(engine, t.task_try_id, {"FailedMount"})
        lists_before = sum(1 for r in fake_k8s.requests if r.get("verb") == "list-events")
        fake_k8s.store.compact()
        fake_k8s.drop_watches()
        await rec.wait_for(lambda: sum(1 for r in fake_k8s.requests if r.get("verb") == "list-events")
                           > lists_before, what="the events relisted after 410")
        fake_k8s.kubelet.secrets["late"] = {"k": "v"}  # mountable now: the pod starts
        assert (await rec.wait_final(t.key)).state == "success"
        rows = await _until_events(engine, t.task_try_id, {"FailedMount", "Started"})
        await ex.stop()
        assert len(rows) == len({r.uid for r in rows})
        kept = next(r for r in rows if r.reason == "FailedMount").count
        served = [e for e in fake_k8s.store.events.values() if e["reason"] == "FailedMount"]
        assert len(served) == 1 and kept == served[0]["count"]

    run(s, body)


def test_events_kept_per_try_are_bounded(settings: Settings) -> None:
    """Past the bound a new event is dropped (the first ones say why), a known one still counts up;
    a message is cut to its limit; NUL and odd data do not break the write."""
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        now = datetime.now(UTC)

        def event(i: int, count: int = 1, message: str = "m") -> dict[str, object]:
            return {"metadata": {"uid": f"uid-{i}"}, "involvedObject": {"kind": "Pod", "fieldPath": "spec.containers{"},
                    "reason": "BackOff", "message": message, "type": "Warning", "count": count,
                    "lastTimestamp": now.isoformat()}

        rows = [parse_event(t.task_try_id, event(i)) for i in range(POD_EVENTS.maximum + 5)]
        long = parse_event(t.task_try_id, event(0, count=7, message="x\x00" * 5000))
        assert long is not None and len(long.message) == POD_EVENT_MESSAGE.maximum and long.message.endswith("…")
        assert parse_event(t.task_try_id, {"metadata": {}}) is None
        async with Database(engine).transaction() as conn:
            await event_store.record_events(conn, [r for r in rows if r is not None])
        async with Database(engine).transaction() as conn:
            await event_store.record_events(conn, [long])
        kept = await _events(engine, t.task_try_id)
        assert len(kept) == POD_EVENTS.maximum
        assert {r.uid for r in kept} == {f"uid-{i}" for i in range(POD_EVENTS.maximum)}
        first = next(r for r in kept if r.uid == "uid-0")
        assert first.count == 7 and "\x00" not in first.message and first.container is None
        async with engine.begin() as conn:  # the rows go with their try
            await conn.execute(text("DELETE FROM task_tries WHERE id = :id"), {"id": t.task_try_id})
        assert await _events(engine, t.task_try_id) == []

    run(s, body)


def test_others_pods_events_are_not_kept(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        stranger = fake_k8s.store.create(NAMESPACE, {"metadata": {"name": "someone-elses"},
                                                     "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
        await ex.submit(t.launch(["sh", "-c", "echo hi"], term=1))
        await rec.wait_final(t.key)
        await _until_events(engine, t.task_try_id, {"Started"})
        await ex.stop()
        assert any(e["involvedObject"]["name"] == stranger["metadata"]["name"]
                   for e in fake_k8s.store.events.values())
        async with engine.begin() as conn:
            total = (await conn.execute(text("SELECT count(DISTINCT task_try_id) FROM pod_events"))).scalar_one()
        assert total == 1
        assert try_name("default", t.key) != stranger["metadata"]["name"]

    run(s, body)
