"""Injected failures for the Kubernetes executor: lost watches, 410 Gone, deleted pods, stuck images,
deadlines, cancel; and the log shipper / GC pair (logs survive pod GC, no try shipped twice)."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.executor.kubernetes.gc import PodGarbageCollector
from leoflow.executor.kubernetes.logs import PodLogShipper
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import one_running_pod, run, started
from tests.executor.world import Recorder, log_row, seed_tries, try_row
from tests.harness.fake_k8s import FakeKubernetes, Fault


def test_watch_drop_and_410_gone_relist_and_still_report(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        first, second = await seed_tries(engine, 2)
        rec = Recorder(engine)
        # Resync far away: only the watch (and its recovery) can deliver these reports in time.
        ex = await started(s, engine, 1, rec, resync_interval=3600)
        fake_k8s.kubelet.paused.set()
        await ex.submit(first.launch(["sh", "-c", "sleep 0.2"], term=1))
        await rec.wait_for(lambda: len(fake_k8s.pods(NAMESPACE)) == 1, what="first pod")
        await rec.wait_for(lambda: fake_k8s.open_watches() > 0, what="the executor's watch")
        fake_k8s.store.compact()  # the executor's resourceVersion is now too old: 410 on reconnect
        fake_k8s.drop_watches()
        fake_k8s.kubelet.paused.clear()
        assert (await rec.wait_final(first.key)).state == "success"
        # Cut the watch the executor opened after its relist (cutting before it is open cuts nothing,
        # and the second report would arrive on it without the 500s ever being answered).
        await rec.wait_for(lambda: fake_k8s.open_watches() > 0, what="the watch after the relist")
        fake_k8s.inject(Fault("watch", code=500, times=2))
        fake_k8s.drop_watches()
        await ex.submit(second.launch(["sh", "-c", "exit 4"], term=1))
        assert (await rec.wait_final(second.key)).exit_code == 4
        await ex.stop()
        watches = [r for r in fake_k8s.requests if r["verb"] == "watch"]
        assert len(watches) >= 4 and any(r["code"] == 500 for r in watches)
        lists = [r for r in fake_k8s.requests if r["verb"] == "list"]
        assert len(lists) >= 2  # the initial reconcile and the relist after 410 Gone
        assert len(fake_k8s.creates()) == 2

    run(s, body)


def test_pod_deleted_behind_our_back_fails_the_try(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        t, rec, ex = await one_running_pod(s, engine, ["sh", "-c", "sleep 30"])
        fake_k8s.store.delete(NAMESPACE, try_name("default", t.key), 0)
        final = await rec.wait_final(t.key)
        await ex.stop()
        assert final.state == "failed" and "deleted before it finished" in str(final.reason)

    run(s, body)


def test_image_pull_errors_fail_after_pending_timeout(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings, pending_timeout=1.0)

    async def body(engine: AsyncEngine) -> None:
        pull, config = await seed_tries(engine, 2)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await ex.submit(pull.launch(["true"], term=1, image="registry.example/pull-error:1"))
        await ex.submit(config.launch(["true"], term=1, image="busybox-config-error"))
        pulled = await rec.wait_final(pull.key)
        configured = await rec.wait_final(config.key)
        await ex.stop()
        assert pulled.state == "failed" and ("ImagePullBackOff" in str(pulled.reason)
                                             or "ErrImagePull" in str(pulled.reason))
        assert "pending longer than 1s" in str(pulled.reason)
        assert configured.state == "failed" and "CreateContainerConfigError" in str(configured.reason)
        assert "running" not in rec.states(pull.key)
        assert fake_k8s.pods(NAMESPACE) == []  # deleted
        logs = await log_row(engine, pull.task_try_id)
        assert logs is not None and "container never started" in str(logs["content"])

    run(s, body)


def test_timeout_uses_active_deadline_and_cancel_deletes(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        slow, cancelled = await seed_tries(engine, 2)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await ex.submit(slow.launch(["sh", "-c", "echo started; sleep 60"], term=1, timeout_seconds=1))
        await ex.submit(cancelled.launch(["sh", "-c", "echo waiting; sleep 60"], term=1))
        timed_out = await rec.wait_final(slow.key)
        assert timed_out.state == "failed" and "timed out after 1s" in str(timed_out.reason)
        await rec.wait_for(lambda: "running" in rec.states(cancelled.key), what="running")
        await ex.cancel(cancelled.key)
        final = await rec.wait_final(cancelled.key)
        await ex.cancel(cancelled.key)  # no-op
        await ex.stop()
        assert (final.state, final.reason) == ("failed", "cancelled")
        assert [p["metadata"]["name"] for p in fake_k8s.pods(NAMESPACE)] == [try_name("default", slow.key)]
        logs = await log_row(engine, cancelled.task_try_id)
        assert logs is not None and logs["content"] == "waiting\n"  # saved before the delete

    run(s, body)


def test_logs_survive_pod_gc_and_no_try_is_shipped_twice(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings, pod_retention=0)
    s = s.replace(executor=s.executor.__class__(**{**s.executor.__dict__, "task_log_max_bytes": 200}))

    async def body(engine: AsyncEngine) -> None:
        tries = await seed_tries(engine, 12)
        rec = Recorder(engine)
        rec.track(tries)
        ex = await started(s, engine, 1, rec)
        for t in tries:
            await ex.submit(t.launch(["sh", "-c", f"echo {t.key.task_id} says hi; seq 100"], term=1))
        for t in tries:
            await rec.wait_final(t.key)
        gc = PodGarbageCollector(ex)
        ctx = LeaderContext(1, s, Database(engine))
        assert await gc.collect_once(ctx) == 0  # nothing shipped yet: nothing collected
        # Three replicas ship at once; SKIP LOCKED makes each try go to exactly one of them.
        shippers = [PodLogShipper(batch=3) for _ in range(3)]
        while True:
            counts = await asyncio.gather(*(sh.ship_once(s, Database(engine), ex.api) for sh in shippers))
            if sum(counts) == 0:
                break
        log_reads = [r for r in fake_k8s.requests if r["verb"] == "log"]
        assert sorted(r["name"] for r in log_reads) == sorted(try_name("default", t.key) for t in tries)
        assert await gc.collect_once(ctx) == 12
        await ex.stop()
        assert fake_k8s.pods(NAMESPACE) == []
        for t in tries:
            logs = await log_row(engine, t.task_try_id)
            assert logs is not None and str(logs["content"]).endswith("99\n100\n")
            assert logs["truncated"] is True and len(str(logs["content"])) == 200
            assert (await try_row(engine, t.task_try_id))["resource_deleted_at"] is not None

    run(s, body)


def test_start_retries_the_initial_list_when_the_api_server_blips(settings: Settings,
                                                                  fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        fake_k8s.inject(Fault("list", code=503, times=2))
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await ex.submit(t.launch(["true"], term=1))
        assert (await rec.wait_final(t.key)).state == "success"
        await ex.stop()
        assert [r["code"] for r in fake_k8s.requests if r["verb"] == "list"][:3] == [503, 503, 200]

    run(s, body)


def test_database_outage_while_recording_launches_fails_the_tries(settings: Settings,
                                                                  fake_k8s: FakeKubernetes) -> None:
    import dataclasses

    from leoflow.db.connection.engine import make_async_engine
    from leoflow.standalone.embedded import free_port

    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder()
        ex = await started(s, engine, 1, rec, create_deadline=1.0)
        assert ex._ctx is not None
        dead = dataclasses.replace(s.database, url=f"postgresql://nobody@127.0.0.1:{free_port()}/gone")
        ex._ctx.db = Database(make_async_engine(dead, pool_size=1))  # the database goes away
        try:
            await ex.submit(t.launch(["true"], term=1))
            final = await rec.wait_final(t.key)
        finally:
            await ex.stop()
            await ex._ctx.db.dispose()
        assert final.state == "failed" and "could not record the launch" in str(final.reason)
        assert fake_k8s.creates() == []

    run(s, body)


def test_cancel_asks_the_api_server_when_the_try_is_not_in_memory(settings: Settings,
                                                                   fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        t, rec, ex = await one_running_pod(s, engine, ["sh", "-c", "echo hi; sleep 60"], resync_interval=3600)
        ex._tracked.clear()  # the executor forgot (e.g. state lost); the pod is still there
        await ex.cancel(t.key)
        final = await rec.wait_final(t.key)
        await ex.stop()
        assert (final.state, final.reason) == ("failed", "cancelled")
        assert fake_k8s.pods(NAMESPACE) == []
        logs = await log_row(engine, t.task_try_id)
        assert logs is not None and logs["content"] == "hi\n"

    run(s, body)
