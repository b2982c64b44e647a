"""Task waits on a real PostgreSQL, one tick at a time: ``wait_for`` (another DAG's run, a dataset
event, a time, an approval), ``depends_on_past``, timeouts with and without ``soft_fail``, a DAG
deleted under a wait, and a change of leader between a producer's success and the waiting consumer.

A waiting task holds no slot and is never launched until its conditions are met; it is then
queued in the step that judged it. Every judgement is a compare-and-set under the step's term.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.clock import FakeClock
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.datasets.events import record_api_event
from leoflow.db.stores.waits import approvals
from leoflow.errors import Conflict, FencedOut
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, set_term, trigger
from tests.scheduler.stepper import Stepper, container, stepper

ORDERS = "s3://lake/orders"


def launched(st: Stepper, dag_id: str, task_id: str) -> int:
    return sum(1 for launch in st.executor.launched if (launch.key.dag_id, launch.key.task_id) == (dag_id, task_id))


async def logical_date(engine: AsyncEngine, run_id: str) -> datetime:
    [(value,)] = await rows(engine, "SELECT logical_date FROM dag_runs WHERE run_id = :r", r=run_id)
    return value  # type: ignore[no-any-return]


async def same_date(st: Stepper, run_id: str, as_run: str, *, days: int = 0) -> None:
    """Give ``run_id`` the logical date of ``as_run`` plus ``days``."""
    await st.sql("UPDATE dag_runs SET logical_date = (SELECT logical_date FROM dag_runs WHERE run_id = :o) "
                 "+ make_interval(days => :d) WHERE run_id = :r", r=run_id, o=as_run, d=days)


async def waits(engine: AsyncEngine, run_id: str, task_id: str) -> list[tuple[str, str, str | None]]:
    return [tuple(r) for r in await rows(engine, """
        SELECT w.kind, w.state, w.reason FROM task_waits w JOIN task_instances ti ON ti.id = w.task_instance_id
        JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r AND ti.task_id = :t ORDER BY w.position
    """, r=run_id, t=task_id)]


def consumer(dag_id: str, *wait_for: dict[str, Any], **task: Any) -> dict[str, Any]:
    return {"dag_id": dag_id, "tasks": [container("r", wait_for=list(wait_for), **task), container("after", "r")]}


def test_a_task_waits_for_another_dags_run_without_a_slot_and_runs_when_it_succeeds(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "ingest", "tasks": [container("load")]})
            await apply(st.engine, consumer("report", {"dag": "ingest"}))
            producer = await trigger(st.engine, "ingest")
            run_id = await trigger(st.engine, "report")
            await same_date(st, run_id, producer)
            await st.tick(periodic=True)
            assert (await st.tasks(run_id))["r"][0] == "waiting"
            assert launched(st, "report", "r") == 0
            assert await waits(st.engine, run_id, "r") == [("dag", "waiting", None)]
            # No slot held: the waiting task is not counted against the pool.
            [(slots,)] = await rows(st.engine, "SELECT count(*) FROM task_instances "
                                    "WHERE state IN ('queued', 'running')")
            assert slots == 1  # ingest's load only
            await st.tick(periodic=True)  # nothing changed: still waiting, still not launched
            assert launched(st, "report", "r") == 0
            st.finish("ingest", producer, "load")
            await st.tick()
            assert (await st.run(producer))[0] == "success"
            await st.tick(periodic=True)
            assert (await st.tasks(run_id))["r"][0] == "queued" and launched(st, "report", "r") == 1
            assert await waits(st.engine, run_id, "r") == [("dag", "met", None)]
            st.finish("report", run_id, "r")
            await st.settle()
            assert launched(st, "report", "r") == 1  # met once: never parked again for this try

    asyncio.run(main())


def test_an_offset_looks_at_another_logical_date_and_a_failed_run_does_not_count(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "ingest", "tasks": [container("load")]})
            await apply(st.engine, consumer("report", {"dag": "ingest", "offset": "-1d", "states": ["success"]}))
            yesterday = await trigger(st.engine, "ingest")
            run_id = await trigger(st.engine, "report")
            await same_date(st, run_id, yesterday, days=1)
            await st.tick(periodic=True)
            st.finish("ingest", yesterday, "load", state="failed")
            await st.settle()
            await st.tick(periodic=True)
            assert (await st.tasks(run_id))["r"][0] == "waiting"  # failed is not one of its states
            async with st.engine.connect() as conn:
                [doc] = (await approvals.waiting_for(conn, [await ti_id(st.engine, run_id, "r")])).values()
            assert "logical date" in doc[0]["reason"] and doc[0]["logical_date"] is not None

    asyncio.run(main())


async def ti_id(engine: AsyncEngine, run_id: str, task_id: str) -> int:
    [(value,)] = await rows(engine, "SELECT ti.id FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk "
                            "WHERE r.run_id = :r AND ti.task_id = :t", r=run_id, t=task_id)
    return int(value)


def test_a_condition_already_true_costs_no_extra_step(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("late", {"not_before": "-1h"}))
            run_id = await trigger(st.engine, "late")
            await st.tick(periodic=True)
            assert launched(st, "late", "r") == 1
            assert await waits(st.engine, run_id, "r") == [("time", "met", None)]

    asyncio.run(main())


def test_not_before_holds_until_the_moment(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("later", {"not_before": "+2h"}))
            run_id = await trigger(st.engine, "later")
            await st.tick(periodic=True)
            assert launched(st, "later", "r") == 0
            [(target, check)] = await rows(st.engine, "SELECT target_date, check_at FROM task_waits")
            assert check == target  # rechecked at the moment itself, not before
            await st.sql("UPDATE task_waits SET target_date = now() - interval '1 s', check_at = now()")
            await st.tick(periodic=True)
            assert launched(st, "later", "r") == 1 and (await st.tasks(run_id))["r"][0] == "queued"

    asyncio.run(main())


def test_a_dataset_wait_needs_an_event_after_the_run_started(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("fresh", {"dataset": ORDERS}))
            async with st.engine.begin() as conn:  # before the run: does not count
                await record_api_event(conn, ORDERS, {}, created_by="test", now=st.clock.now() - timedelta(hours=1))
            run_id = await trigger(st.engine, "fresh")
            await st.tick(periodic=True)
            await st.tick(periodic=True)
            assert (await st.tasks(run_id))["r"][0] == "waiting"
            async with st.engine.begin() as conn:
                await record_api_event(conn, ORDERS, {}, created_by="test", now=st.clock.now() + timedelta(seconds=1))
            await st.tick(periodic=True)  # the new event wakes the wait: judged in this step
            assert launched(st, "fresh", "r") == 1

    asyncio.run(main())


def test_a_dataset_wait_is_met_though_the_leaders_clock_runs_ahead(settings: Settings) -> None:
    """A leader whose wall clock is 60 s ahead (the soak's ``clock_skew``) stamps the run's start in
    the future; events recorded by replicas with a right clock must still count once they come after
    the wait began on the database's clock — the soak found a ``data`` task waiting forever."""
    async def main() -> None:
        ahead = FakeClock(datetime.now(UTC) + timedelta(seconds=60))
        async with stepper(settings, clock=ahead) as st:
            await apply(st.engine, consumer("skewed", {"dataset": ORDERS}))
            run_id = await trigger(st.engine, "skewed")
            await st.tick(periodic=True)
            assert (await st.tasks(run_id))["r"][0] == "waiting"
            async with st.engine.begin() as conn:  # a replica with a right clock, after the wait began
                right_now = datetime.now(UTC) + timedelta(seconds=1)
                await record_api_event(conn, ORDERS, {}, created_by="test", now=right_now)
            await st.tick(periodic=True)
            assert launched(st, "skewed", "r") == 1

    asyncio.run(main())


def test_approve_runs_the_task_and_reject_fails_it_with_the_comment(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("ship", {"approval": {"message": "Ship to production?"}}))
            yes = await trigger(st.engine, "ship")
            no = await trigger(st.engine, "ship")
            await st.tick(periodic=True)
            assert (await st.tasks(yes))["r"][0] == "waiting" and (await st.tasks(no))["r"][0] == "waiting"
            async with st.engine.begin() as conn:
                await approvals.decide_approval(conn, "ship", yes, "r", decision="approve", comment="ok", by="ann")
                await approvals.decide_approval(conn, "ship", no, "r", decision="reject", comment="not on Friday",
                                                by="bob")
            async with st.engine.begin() as conn:
                with pytest.raises(Conflict):  # decided once
                    await approvals.decide_approval(conn, "ship", yes, "r", decision="reject", comment="", by="eve")
            await st.tick(periodic=True)
            assert launched(st, "ship", "r") == 1
            assert (await st.tasks(yes))["r"][0] == "queued"
            tasks = await st.tasks(no)
            assert tasks["r"] == ("failed", "rejected by bob: not on Friday")
            assert tasks["after"][0] == "upstream_failed"
            assert (await st.run(no))[0] == "failed"

    asyncio.run(main())


def test_a_timeout_fails_the_task_or_skips_it_with_soft_fail(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("hard", {"approval": None, "timeout_seconds": 60}))
            await apply(st.engine, consumer("soft", {"approval": {}, "timeout_seconds": 60, "soft_fail": True}))
            hard, soft = await trigger(st.engine, "hard"), await trigger(st.engine, "soft")
            await st.tick(periodic=True)
            [(timeout_after,)] = await rows(st.engine, "SELECT DISTINCT timeout_at - created_at FROM task_waits")
            assert timeout_after.total_seconds() == pytest.approx(60, abs=1)
            await st.sql("UPDATE task_waits SET timeout_at = now() - interval '1 s', check_at = now()")
            await st.tick(periodic=True)
            await st.settle()
            assert (await st.tasks(hard))["r"][0] == "failed"
            assert "timed out" in str((await st.tasks(hard))["r"][1])
            assert (await st.tasks(soft))["r"][0] == "skipped"
            assert (await st.tasks(soft))["after"][0] == "skipped"  # all_success downstream of a skip
            assert launched(st, "hard", "r") == launched(st, "soft", "r") == 0

    asyncio.run(main())


def test_a_dag_deleted_under_a_wait_fails_it_with_a_reason(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "upstream", "tasks": [container("a")]})
            await apply(st.engine, consumer("down", {"dag": "upstream"}))
            run_id = await trigger(st.engine, "down")
            await st.tick(periodic=True)
            assert (await st.tasks(run_id))["r"][0] == "waiting"
            async with st.engine.begin() as conn:
                await dag_store.delete_dag(conn, "upstream")
            await st.sql("UPDATE task_waits SET check_at = now()")  # the coarse timer's turn
            await st.tick(periodic=True)
            state, reason = (await st.tasks(run_id))["r"]
            assert state == "failed" and "'upstream'" not in str(reason) and "upstream does not exist" in str(reason)

    asyncio.run(main())


def test_depends_on_past_waits_for_the_previous_runs_task(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "daily", "tasks": [container("a"), container("b", "a",
                                                                                           depends_on_past=True)]})
            first = await trigger(st.engine, "daily")
            second = await trigger(st.engine, "daily")
            await same_date(st, second, first, days=1)
            await st.tick(periodic=True)
            assert launched(st, "daily", "a") == 2
            st.finish("daily", first, "a")
            st.finish("daily", second, "a")
            await st.tick()
            await st.tick(periodic=True)
            # The first run has no previous run: b runs; the second's b waits for the first's.
            assert (await st.tasks(first))["b"][0] == "queued"
            assert (await st.tasks(second))["b"][0] == "waiting"
            st.finish("daily", first, "b")
            await st.tick()
            await st.tick(periodic=True)  # the first run ended: its DAG's past waits are woken
            assert (await st.tasks(second))["b"][0] == "queued"

    asyncio.run(main())


def test_exactly_one_consumer_launch_when_the_leader_changes_after_the_producers_success(
        settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, term=1) as old:
            await apply(old.engine, {"dag_id": "ingest", "tasks": [container("load")]})
            await apply(old.engine, consumer("report", {"dag": "ingest"}))
            producer = await trigger(old.engine, "ingest")
            run_id = await trigger(old.engine, "report")
            await same_date(old, run_id, producer)
            await old.tick(periodic=True)
            old.finish("ingest", producer, "load")
            await old.tick()  # the producer's success is committed; the consumer still waits
            assert (await old.run(producer))[0] == "success"
            assert (await old.tasks(run_id))["r"][0] == "waiting"
            # The old leader is cut off before it judges the wait.
            await set_term(old.engine, settings.cluster.name, 2, node_id="newer")
            with pytest.raises(FencedOut):
                await old.tick(periodic=True)
            assert (await old.tasks(run_id))["r"][0] == "waiting"
            async with stepper(settings, term=2, engine=old.engine) as new:
                await new.tick(periodic=True)  # its first look: everything due is judged
                await new.sql("UPDATE task_waits SET check_at = now()")
                await new.tick(periodic=True)
                assert launched(new, "report", "r") == 1
            async with stepper(settings, term=3, engine=old.engine) as third:
                await third.sql("UPDATE task_waits SET check_at = now()")
                await third.tick(periodic=True)
                assert launched(third, "report", "r") == 0
            # One try, queued by the second leader; the first launched nothing.
            [(state, tries)] = await rows(old.engine, "SELECT state, try_number FROM task_instances "
                                          "WHERE task_id = 'r'")
            assert (state, tries) == ("queued", 1) and launched(old, "report", "r") == 0

    asyncio.run(main())


def test_the_leader_publishes_waiting_tasks_per_dag(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from leoflow.metrics import waits as wait_metrics
    from leoflow.scheduler import waits as scheduler_waits

    monkeypatch.setattr(scheduler_waits, "GAUGE_INTERVAL", 0.0)

    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("gated", {"approval": {}}))
            await trigger(st.engine, "gated")
            await trigger(st.engine, "gated")
            await st.tick(periodic=True)
            await st.tick(periodic=True)
            assert wait_metrics.PENDING.labels(dag_id="gated")._value.get() == 2
            assert wait_metrics.OLDEST.labels(dag_id="gated")._value.get() >= 0
            await st.sql("UPDATE task_waits SET timeout_at = now(), check_at = now()")
            await st.tick(periodic=True)
            await st.tick(periodic=True)
            assert "gated" not in {s.labels.get("dag_id") for m in wait_metrics.PENDING.collect() for s in m.samples}

    asyncio.run(main())
