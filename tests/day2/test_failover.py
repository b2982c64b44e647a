"""A backfill across a leader failover: a newer term takes over mid-backfill (as after a
partition) while the old leader's local processes are still running. Every slot gets exactly one
run, every task runs exactly once (a journal written by the processes themselves), the backfill
completes under the new term, and every run's outcome is notified at least once."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import backfills as backfill_store
from leoflow.db.stores.backfills import NewBackfill
from leoflow.executor.local.executor import LocalExecutor
from leoflow.settings import NotifySettings, Settings
from tests.day2.harness import LOOPBACK, WebhookReceiver, leader, wait_for
from tests.scheduler.harness import apply, rows, set_term
from tests.scheduler.test_service_local import local, shell

SLOTS = 6


def _spec(url: str, journal: Path) -> dict[str, Any]:
    step = shell("x", 'pwd >> "$J"; sleep 0.2', env={"J": str(journal)})
    return {"dag_id": "catchup", "schedule": "0 * * * *", "start_date": "2026-01-01T00:00:00Z", "paused": True,
            "notify": [{"on": ["failure", "success"], "webhook": {"url": url}}],
            "tasks": [dict(step, id="extract"), dict(step, id="load", depends_on=["extract"])]}


def test_a_backfill_survives_a_leader_failover(settings: Settings, tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home", interval=0.1, parallelism=2).replace(
        notify=NotifySettings(retry_delay=0.05, allowed_hosts=LOOPBACK))
    journal = tmp_path / "journal.txt"

    with WebhookReceiver().serving() as receiver:
        async def main() -> None:
            engine = make_async_engine(s.database, pool_size=8)
            try:
                await apply(engine, _spec(receiver.url, journal))
                async with engine.begin() as conn:
                    bid = await backfill_store.create_backfill(conn, NewBackfill(
                        dag_id="catchup", start_at=datetime(2026, 3, 1, tzinfo=UTC),
                        end_at=datetime(2026, 3, 1, SLOTS, tzinfo=UTC), first_slot=datetime(2026, 3, 1, tzinfo=UTC),
                        slots_total=SLOTS, max_active_runs=2, rerun_failed=False, created_by="test"))
                async with leader(s, LocalExecutor(s, kill_grace=2.0), engine=engine, term=1, interval=0.1) as old:
                    # The old leader is mid-backfill: some runs made, a try of them launched.
                    await wait_for(lambda: _count(engine, "SELECT count(*) FROM task_tries"), timeout=60)
                    await set_term(engine, s.cluster.name, 2, node_id="newer")
                    # From here on every write of term 1 is fenced: later runs are the new leader's.
                    (made_by_old,), = await rows(engine, "SELECT count(*) FROM dag_runs")
                    async with leader(s, LocalExecutor(s, kill_grace=2.0), engine=engine, term=2, interval=0.1):
                        await wait_for(lambda: old.task.done(), timeout=30)
                        assert old.task.exception() is None  # it stopped on FencedOut, quietly
                        await wait_for(lambda: _backfill_state(engine, bid, "completed"), timeout=120)
                        await wait_for(lambda: len({d.json["run_id"] for d in receiver.accepted()}) == SLOTS,
                                       timeout=60)
                runs = await rows(engine, "SELECT logical_date, state FROM dag_runs ORDER BY logical_date")
                assert [r[1] for r in runs] == ["success"] * SLOTS
                assert len({r[0] for r in runs}) == SLOTS  # one run per slot
                assert 1 <= made_by_old < SLOTS  # both leaders created some of the backfill's runs
                per_ti = await rows(engine, "SELECT task_instance_id, count(*) FROM task_tries "
                                    "GROUP BY task_instance_id")
                assert len(per_ti) == 2 * SLOTS and all(n == 1 for _, n in per_ti)
                executions = Counter(journal.read_text().split())
                assert len(executions) == 2 * SLOTS and set(executions.values()) == {1}  # none launched twice
                b = await rows(engine, "SELECT runs_created, slots_skipped FROM backfills WHERE id = :b", b=bid)
                assert b == [(SLOTS, 0)]
                # At-least-once: every run's success was delivered (a redelivery is allowed, a loss is not).
                delivered = Counter(d.json["run_id"] for d in receiver.accepted())
                assert len(delivered) == SLOTS and {d.json["event"] for d in receiver.accepted()} == {"success"}
            finally:
                await engine.dispose()

        asyncio.run(main())


async def _count(engine: Any, sql: str) -> bool:
    return bool((await rows(engine, sql))[0][0])


async def _backfill_state(engine: Any, bid: int, state: str) -> bool:
    return (await rows(engine, "SELECT state FROM backfills WHERE id = :b", b=bid)) == [(state,)]
