"""The day-2 verbs with real executors: a backfill runs its slots and each run's outcome is
notified, on the local executor (real subprocesses) and on the Kubernetes executor (the fake API
server, reached through the official client)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import backfills as backfill_store
from leoflow.db.stores.backfills import NewBackfill
from leoflow.executor.base import Executor
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.executor.local.executor import LocalExecutor
from leoflow.settings import NotifySettings, Settings
from tests.day2.harness import LOOPBACK, WebhookReceiver, leader, wait_for
from tests.executor.conftest import fake_k8s, k8s_settings
from tests.harness.fake_k8s import FakeKubernetes
from tests.scheduler.harness import apply, fast, rows

__all__ = ["fake_k8s"]  # the executor tests' fixture: a fake API server behind a kubeconfig


def _spec(url: str) -> dict[str, Any]:
    # The fake kubelet understands `exit N` in the command, so the same DAG runs on both executors.
    return {"dag_id": "daily", "schedule": "0 * * * *", "start_date": "2026-01-01T00:00:00Z", "paused": True,
            "notify": [{"on": ["failure", "success"], "webhook": {"url": url}}],
            "tasks": [{"id": "work", "image": "busybox", "command": ["sh", "-c", "exit 0"]}]}


async def _backfill(engine: Any, end_hour: int) -> int:
    async with engine.begin() as conn:
        return await backfill_store.create_backfill(conn, NewBackfill(
            dag_id="daily", start_at=datetime(2026, 3, 1, tzinfo=UTC),
            end_at=datetime(2026, 3, 1, end_hour, tzinfo=UTC),
            first_slot=datetime(2026, 3, 1, tzinfo=UTC), slots_total=end_hour, max_active_runs=2, rerun_failed=False,
            created_by="test"))


def _run(settings: Settings, make_executor: Any) -> None:
    with WebhookReceiver().serving() as receiver:
        async def main() -> None:
            engine = make_async_engine(settings.database, pool_size=4)
            try:
                await apply(engine, _spec(receiver.url))
                executor: Executor = make_executor()
                async with leader(settings, executor, engine=engine, interval=0.1):
                    bid = await _backfill(engine, 3)
                    await wait_for(lambda: _completed(engine, bid), timeout=90)
                    await wait_for(lambda: len(receiver.accepted()) >= 3, timeout=60)
                states = await rows(engine, "SELECT run_id, state, run_type FROM dag_runs ORDER BY run_id")
                assert [(s, t) for _, s, t in states] == [("success", "scheduled")] * 3
                events = sorted((d.json["run_id"], d.json["event"]) for d in receiver.accepted())
                assert [e for _, e in events] == ["success"] * 3
            finally:
                await engine.dispose()

        asyncio.run(main())


async def _completed(engine: Any, bid: int) -> bool:
    return (await rows(engine, "SELECT state FROM backfills WHERE id = :b", b=bid)) == [("completed",)]


def _notifying(settings: Settings) -> Settings:
    return fast(settings).replace(notify=NotifySettings(retry_delay=0.05, allowed_hosts=LOOPBACK))


def test_backfill_and_notifications_with_the_local_executor(settings: Settings, tmp_path: Path) -> None:
    base = _notifying(settings)
    s = base.replace(home=tmp_path / "home", executor=dataclasses.replace(base.executor, kind="local",
                                                                          local_parallelism=2))
    _run(s, lambda: LocalExecutor(s, kill_grace=2.0))


def test_backfill_and_notifications_with_the_kubernetes_executor(settings: Settings,
                                                                 fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(_notifying(settings))
    _run(s, lambda: KubernetesExecutor(s, resync_interval=0.5, create_deadline=20.0, delete_grace=0))
    assert len(fake_k8s.creates(code=201)) == 3  # one pod per slot, none twice
