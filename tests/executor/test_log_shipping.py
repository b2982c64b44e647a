"""Logs are never lost and never block each other (faults in the fake API server, a second host directory).

- Unreadable logs (a ``NotReady`` node's kubelet answering 500) get their own backoff and attempt
  budget: the other tries are shipped meanwhile, and once the budget is spent the logs are
  marked unavailable with the reason — and garbage collection proceeds.
- No transaction is held while a log is read: with one pooled connection, the database stays
  usable during a slow read.
- The local executor adopting a try whose files are on another host keeps the output stored
  while it ran and says "output unavailable on this host" (it used to store "" over it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.api.app import create_app
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import task_logs as log_store
from leoflow.db.stores import tries as try_store
from leoflow.errors import DatabaseUnavailable
from leoflow.executor.kubernetes import logs as logs_module
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.executor.kubernetes.gc import PodGarbageCollector
from leoflow.executor.kubernetes.logs import PodLogShipper
from leoflow.executor.local.executor import LocalExecutor
from leoflow.executor.log_tail import CappedOutput
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.api.live import client_for
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import run, started
from tests.executor.test_local import local_settings
from tests.executor.world import Recorder, Seeded, log_row, seed_tries, try_row
from tests.harness.fake_k8s import FakeKubernetes, Fault


def with_attempts(s: Settings, attempts: int) -> Settings:
    return s.replace(executor=dataclasses.replace(s.executor, log_ship_attempts=attempts))


def test_unreadable_logs_back_off_alone_then_are_marked_unavailable_and_gc_proceeds(
        settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = with_attempts(k8s_settings(settings, pod_retention=0), 3)

    async def body(engine: AsyncEngine) -> None:
        bad = await seed_tries(engine, 20, task_prefix="bad")
        good = await seed_tries(engine, 5, run="manual-2", task_prefix="good")
        rec = Recorder(engine)
        rec.track([*bad, *good])
        ex = await started(s, engine, 1, rec)
        for t in bad:  # the 20 oldest finished tries: the ones a batch of 20 takes first
            fake_k8s.inject(Fault("log", code=500, times=1000, name_prefix=try_name("default", t.key)))
            await ex.submit(t.launch(["sh", "-c", f"echo {t.key.task_id}"], term=1))
        for t in bad:
            await rec.wait_final(t.key)
        for t in good:
            await ex.submit(t.launch(["sh", "-c", f"echo {t.key.task_id} shipped"], term=1))
        for t in good:
            await rec.wait_final(t.key)
        db = Database(engine)
        shipper = PodLogShipper(batch=20, backoff_base=0.01, backoff_cap=0.01)
        assert await shipper.ship_once(s, db, ex.api) == 0  # the 20 unreadable ones, each now backing off
        assert await shipper.ship_once(s, db, ex.api) == 5  # untried tries first: the good ones ship
        for t in good:
            logs = await log_row(engine, t.task_try_id)
            assert logs is not None and logs["content"] == f"{t.key.task_id} shipped\n"
        rounds = 0
        while await executor_store_unsettled(engine):
            rounds += 1
            assert rounds < 50, "unreadable logs were never given up"
            await asyncio.sleep(0.02)
            await shipper.ship_once(s, db, ex.api)
        for t in bad:
            row = await try_row(engine, t.task_try_id)
            assert row["log_attempts"] == 3 and row["logs_shipped_at"] is not None
            assert "could not be read in 3 attempts" in str(row["logs_unavailable"])
            assert "500 InternalError" in str(row["logs_unavailable"])
        reads = [r for r in fake_k8s.requests if r["verb"] == "log"]
        assert sum(r["code"] == 500 for r in reads) == 60 and sum(r["code"] == 200 for r in reads) == 5
        # Garbage collection is no longer held up: every pod goes.
        assert await PodGarbageCollector(ex).collect_once(LeaderContext(1, s, db)) == 25
        await ex.stop()
        assert fake_k8s.pods(NAMESPACE) == []
        await check_api_says_unavailable(s, bad[0].key.run_id, bad[0].key.task_id)

    run(s, body)


async def executor_store_unsettled(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(
            "SELECT count(*) FROM task_tries WHERE ended_at IS NOT NULL AND logs_shipped_at IS NULL"))).scalar_one())


async def check_api_says_unavailable(s: Settings, run_id: str, task_id: str) -> None:
    def fetch() -> tuple[str, dict[str, object]]:
        app_settings = s.replace(api=dataclasses.replace(s.api, auth_enabled=False))
        with client_for(create_app(app_settings)) as client:
            logs = client.get(f"/api/v2/dags/etl/runs/{run_id}/tasks/{task_id}/logs")
            task = client.get(f"/api/v2/dags/etl/runs/{run_id}/tasks/{task_id}")
            assert logs.status_code == 200 and task.status_code == 200, (logs.text, task.text)
            assert logs.headers["X-Leoflow-Log-Complete"] == "true"
            return logs.text, task.json()

    body, task = await asyncio.to_thread(fetch)
    assert body.startswith("[leoflow: logs unavailable: the pod's log could not be read in 3 attempts")
    assert "could not be read" in str(task["tries"][0]["logs_unavailable"])  # type: ignore[index]


async def one_finished_pod(s: Settings, engine: AsyncEngine,
                           script: str) -> tuple[Seeded, Recorder, KubernetesExecutor]:
    """One seeded try run to its end in a pod (its logs not shipped yet): (try, recorder, executor)."""
    [t] = await seed_tries(engine, 1)
    rec = Recorder(engine)
    rec.track([t])
    ex = await started(s, engine, 1, rec)
    await ex.submit(t.launch(["sh", "-c", script], term=1))
    await rec.wait_final(t.key)
    return t, rec, ex


def test_no_transaction_is_held_while_a_log_is_read(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        t, rec, ex = await one_finished_pod(s, engine, "echo slow node")
        fake_k8s.inject(Fault("log", delay=3.0))
        one = make_async_engine(s.database, pool_size=1)  # the shipper's only connection
        db = Database(one)
        try:
            shipping = asyncio.ensure_future(PodLogShipper().ship_once(s, db, ex.api))
            await rec.wait_for(lambda: any(r["verb"] == "log" for r in fake_k8s.requests), what="the read")
            # The read is in flight for 3 s; the one connection is free for others meanwhile.
            async with asyncio.timeout(2.0), db.transaction() as conn:
                await conn.execute(text("SELECT 1"))
            assert not shipping.done()
            assert await shipping == 1
        finally:
            await one.dispose()
        await ex.stop()
        logs = await log_row(engine, t.task_try_id)
        assert logs is not None and logs["content"] == "slow node\n"

    run(s, body)


def test_logs_read_while_the_database_is_away_are_stored_when_it_returns(
        settings: Settings, fake_k8s: FakeKubernetes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that fails (a restart, a partition) is retried; it used to wait out the 300 s claim."""
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        t, _, ex = await one_finished_pod(s, engine, "echo read before the outage")
        real_store = logs_module.store_pod_logs
        failures: list[int] = []

        async def store_after_an_outage(db: Database, task_try_id: int, logs: CappedOutput) -> None:
            if len(failures) < 2:
                failures.append(task_try_id)
                raise DatabaseUnavailable("connection refused (injected)")
            await real_store(db, task_try_id, logs)

        monkeypatch.setattr(logs_module, "store_pod_logs", store_after_an_outage)
        shipper = PodLogShipper(store_retry_base=0.01)
        assert await shipper.ship_once(s, Database(engine), ex.api) == 1
        await ex.stop()
        assert failures == [t.task_try_id, t.task_try_id]
        assert sum(r["verb"] == "log" for r in fake_k8s.requests) == 1  # stored what was read, no second read
        logs = await log_row(engine, t.task_try_id)
        assert logs is not None and logs["content"] == "read before the outage\n"
        row = await try_row(engine, t.task_try_id)
        assert row["logs_shipped_at"] is not None and row["logs_unavailable"] is None

    run(s, body)


def test_adopting_a_try_from_another_host_keeps_its_stored_output(settings: Settings, tmp_path: Path) -> None:
    here = local_settings(settings, tmp_path / "host-b")  # this host's directory: the try ran on host a

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        name = try_name("default", t.key)
        async with engine.begin() as conn:  # host a claimed it and stored its output while it ran
            assert await try_store.claim_try(conn, cluster="default", term=1, task_try_id=t.task_try_id, key=t.key,
                                                  executor_ref=name, node_id="host-a")
            await log_store.store_partial_logs(conn, t.task_try_id, "step 1 done\nstep 2 done\n",
                                                    truncated=False, size_bytes=24)
            # Less of the same output never replaces more of it (a shorter re-read, an empty file).
            await log_store.store_partial_logs(conn, t.task_try_id, "step 1", truncated=False, size_bytes=6)
        rec = Recorder(engine)
        rec.track([t])
        ex = LocalExecutor(here, kill_grace=1.0)
        await ex.start(LeaderContext(1, here, Database(engine)), rec)
        final = await rec.wait_final(t.key)
        await ex.stop()
        assert final.state == "failed"  # its process is not here either: the scheduler decides a retry
        logs = await log_row(engine, t.task_try_id)
        assert logs is not None and logs["content"] == "step 1 done\nstep 2 done\n"
        row = await try_row(engine, t.task_try_id)
        assert row["logs_shipped_at"] is not None
        assert str(row["logs_unavailable"]).startswith("output unavailable on this host (test-node)")

    run(here, body)


async def claim_as_another_replica(engine: AsyncEngine, claim_for: float) -> list[int]:
    """What another replica's shipper would claim right now (try ids)."""
    async with Database(engine).transaction() as conn:
        claims = await log_store.claim_unshipped(conn, "default", limit=5, claim_for=claim_for)
    return [c.record.task_try_id for c in claims]


def test_a_read_longer_than_the_claim_keeps_it_renewed(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    """The claim is a lease: a slow read renews it, so no other replica reads the same log meanwhile."""
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        t, rec, ex = await one_finished_pod(s, engine, "echo slow read")
        fake_k8s.inject(Fault("log", delay=9.0))  # three claims long
        shipping = asyncio.ensure_future(PodLogShipper(claim_seconds=3.0).ship_once(s, Database(engine), ex.api))
        await rec.wait_for(lambda: any(r["verb"] == "log" for r in fake_k8s.requests), what="the read")
        stolen: list[int] = []
        while not shipping.done():
            stolen += await claim_as_another_replica(engine, claim_for=3.0)
            await asyncio.sleep(0.2)
        assert await shipping == 1
        await ex.stop()
        assert stolen == [], "another replica took a claim that was being renewed"
        assert sum(r["verb"] == "log" for r in fake_k8s.requests) == 1
        logs = await log_row(engine, t.task_try_id)
        assert logs is not None and logs["content"] == "slow read\n"

    run(s, body)


def test_a_shipper_that_dies_mid_read_holds_its_claim_only_until_it_lapses(
        settings: Settings, fake_k8s: FakeKubernetes) -> None:
    """A replica killed mid-read stops renewing: another ships the try once the lease lapses (not 5 min later)."""
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        t, rec, ex = await one_finished_pod(s, engine, "echo shipped by the survivor")
        fake_k8s.inject(Fault("log", delay=60.0))
        dying = asyncio.ensure_future(PodLogShipper(claim_seconds=3.0).ship_once(s, Database(engine), ex.api))
        await rec.wait_for(lambda: any(r["verb"] == "log" for r in fake_k8s.requests), what="the read")
        dying.cancel()  # the replica dies: its read and its renewals stop
        with contextlib.suppress(asyncio.CancelledError):
            await dying
        assert await claim_as_another_replica(engine, claim_for=3.0) == []  # the claim still holds
        survivor = PodLogShipper(claim_seconds=3.0)
        async with asyncio.timeout(60):  # the lease is 3 s; generous for a loaded machine
            while await survivor.ship_once(s, Database(engine), ex.api) == 0:
                await asyncio.sleep(0.2)
        await ex.stop()
        logs = await log_row(engine, t.task_try_id)
        assert logs is not None and logs["content"] == "shipped by the survivor\n"

    run(s, body)
