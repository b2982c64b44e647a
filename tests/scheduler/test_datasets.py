"""Dataset events and dataset-triggered runs on a real PostgreSQL, one tick at a time.

A producing task's success records its events and queues them in the step that records the
success; the leader's periodic part starts one run per consuming DAG whose condition is met, and
deletes what the run consumed in the same fenced transaction. The rules under test: all/any,
coalescing, at most one unfinished dataset-triggered run per DAG, paused DAGs hold their queue,
deleted DAGs drop it, exactly once across a change of leader, a poisoned queue stops one DAG only.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.api.routes.runs import PUBLIC_RUN
from leoflow.clock import SystemClock
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.datasets.events import record_api_event
from leoflow.db.stores.runs import reads as run_reads
from leoflow.errors import FencedOut
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, set_term, trigger
from tests.scheduler.stepper import container, insert_version, stepper

ORDERS = "s3://lake/orders"
CUSTOMERS = "pg://warehouse/customers"


def consumer(dag_id: str, mode: str = "all", *uris: str) -> dict[str, Any]:
    return {"dag_id": dag_id, "schedule": {"datasets": {mode: list(uris or (ORDERS,))}}, "tasks": [container("r")]}


async def event(engine: AsyncEngine, uri: str, extra: dict[str, Any] | None = None) -> int:
    async with engine.begin() as conn:
        return (await record_api_event(conn, uri, extra or {}, created_by="test", now=SystemClock().now())).queued


async def dataset_runs(engine: AsyncEngine, dag_id: str) -> list[tuple[str, str, Any]]:
    return [tuple(r) for r in await rows(engine, "SELECT run_id, state, triggering_events FROM dag_runs "
                                         "WHERE dag_id = :d AND run_type = 'dataset' ORDER BY id", d=dag_id)]


async def queued(engine: AsyncEngine, dag_id: str) -> dict[str, int]:
    return dict(await rows(engine, "SELECT uri, events FROM dataset_queue WHERE dag_id = :d", d=dag_id))  # type: ignore[arg-type]


def test_a_producers_success_records_its_event_and_starts_the_consumer_once(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "ingest", "tasks": [container("load", produces=[ORDERS])]})
            await apply(st.engine, consumer("report"))
            run_id = await trigger(st.engine, "ingest")
            await st.tick(periodic=True)
            st.finish("ingest", run_id, "load")
            await st.tick()
            # The success's step recorded the event, queued it for the consumer, and — the queue row
            # being its own — created and started the consumer's run in the same transaction.
            [(source, dag, run, task, try_number)] = await rows(
                st.engine, "SELECT source, dag_id, run_id, task_id, try_number FROM dataset_events")
            assert (source, dag, run, task, try_number) == ("task", "ingest", run_id, "load", 1)
            [(consumer_run, state, events)] = await dataset_runs(st.engine, "report")
            assert [la.key.dag_id for la in st.executor.launched] == ["ingest", "report"]  # its task queued too
            assert consumer_run.startswith("dataset__") and state in ("queued", "running")
            assert [(e["uri"], e["events"], e["dag_id"], e["task_id"]) for e in events] == [
                (ORDERS, 1, "ingest", "load")]
            assert await queued(st.engine, "report") == {}
            async with st.engine.connect() as conn:  # the run document carries them
                document = await run_reads.get_run(conn, "report", consumer_run)
            assert document is not None and document["run_type"] == "dataset"
            assert {k: document[k] for k in PUBLIC_RUN}["triggering_events"] == events
            await st.tick(periodic=True)
            assert len(await dataset_runs(st.engine, "report")) == 1

    asyncio.run(main())


def test_all_waits_for_every_uri_and_any_for_one(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("both", "all", ORDERS, CUSTOMERS))
            await apply(st.engine, consumer("either", "any", ORDERS, CUSTOMERS))
            assert await event(st.engine, ORDERS) == 2
            await st.tick(periodic=True)
            assert await dataset_runs(st.engine, "both") == []
            assert len(await dataset_runs(st.engine, "either")) == 1
            await event(st.engine, CUSTOMERS)
            await st.tick(periodic=True)
            [(_, _, events)] = await dataset_runs(st.engine, "both")
            assert sorted(e["uri"] for e in events) == sorted([ORDERS, CUSTOMERS])
            # "either" still has its first run unfinished: the customers event waits in its queue.
            assert len(await dataset_runs(st.engine, "either")) == 1
            assert await queued(st.engine, "either") == {CUSTOMERS: 1}

    asyncio.run(main())


def test_events_coalesce_while_a_dataset_triggered_run_is_unfinished(settings: Settings) -> None:
    """The rule against loops: at most one unfinished dataset-triggered run per DAG. A DAG that
    produces what it consumes (a cycle of one) gets its next run only after the last one ended."""
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {**consumer("loop"), "tasks": [container("r", produces=[ORDERS])]})
            for _ in range(5):
                await event(st.engine, ORDERS)
            await st.tick(periodic=True)
            [(first, _, events)] = await dataset_runs(st.engine, "loop")
            assert events[0]["events"] == 5
            await event(st.engine, ORDERS)  # while the first run is unfinished: it waits
            await st.tick(periodic=True)
            assert len(await dataset_runs(st.engine, "loop")) == 1
            assert await queued(st.engine, "loop") == {ORDERS: 1}
            st.finish("loop", first, "r")  # its success produces ORDERS: an event for itself
            await st.tick()
            assert await queued(st.engine, "loop") == {ORDERS: 2}
            await st.tick(periodic=True)
            runs = await dataset_runs(st.engine, "loop")
            assert len(runs) == 2 and runs[0][1] == "success"
            assert runs[1][2][0]["events"] == 2  # its own event and the outside one, coalesced
            await st.tick(periodic=True)
            assert len(await dataset_runs(st.engine, "loop")) == 2  # the second is unfinished: no third

    asyncio.run(main())


def test_a_paused_dag_holds_its_queue_and_a_deleted_one_drops_it(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {**consumer("held"), "paused": True})
            await apply(st.engine, consumer("gone"))
            async with st.engine.begin() as conn:
                await dag_store.delete_dag(conn, "gone")
            assert await event(st.engine, ORDERS) == 1  # only the live consumer
            await event(st.engine, ORDERS)
            await st.tick(periodic=True)
            assert await dataset_runs(st.engine, "held") == [] and await queued(st.engine, "held") == {ORDERS: 2}
            async with st.engine.begin() as conn:
                await dag_store.set_paused(conn, "held", False)
            await st.tick(periodic=True)
            [(_, _, events)] = await dataset_runs(st.engine, "held")
            assert events[0]["events"] == 2
            await apply(st.engine, consumer("dropping"))
            await event(st.engine, ORDERS)
            async with st.engine.begin() as conn:
                await dag_store.delete_dag(conn, "dropping")
            assert await queued(st.engine, "dropping") == {}
            await st.tick(periodic=True)
            assert await dataset_runs(st.engine, "dropping") == []

    asyncio.run(main())


def test_exactly_one_run_across_a_change_of_leader(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings, term=1) as old:
            await apply(old.engine, consumer("once"))
            await event(old.engine, ORDERS)
            # A new leader takes over before the old one's step: the old one's writes are fenced out.
            await set_term(old.engine, settings.cluster.name, 2, node_id="newer")
            with pytest.raises(FencedOut):
                await old.core.create_scheduled_runs()
                await old.core.tick()
                await old.tick(periodic=True)
            assert await dataset_runs(old.engine, "once") == [] and await queued(old.engine, "once") == {ORDERS: 1}
            async with stepper(settings, term=2, engine=old.engine) as new:
                await new.tick(periodic=True)
                await new.tick(periodic=True)
            assert len(await dataset_runs(old.engine, "once")) == 1
            assert await queued(old.engine, "once") == {}
            async with stepper(settings, term=3, engine=old.engine) as third:
                await third.tick(periodic=True)
            assert len(await dataset_runs(old.engine, "once")) == 1

    asyncio.run(main())


def test_a_poisoned_stored_schedule_stops_that_dag_and_the_leader_carries_on(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("healthy"))
            await apply(st.engine, consumer("poisoned"))
            await event(st.engine, ORDERS)
            bad = {**consumer("poisoned"), "schedule": {"datasets": {"all": "not a list"}}}
            await insert_version(st.engine, "poisoned", json.dumps(bad))
            # A stray row for a URI no condition names, written by hand: deleted, never read as an event.
            await st.sql("INSERT INTO dataset_queue (dag_id, uri, first_event_id, last_event_id, events, first_at, "
                         "last_at) SELECT 'healthy', 'stray', 1, 1, 1, now(), now()")
            await st.tick(periodic=True)
            assert len(await dataset_runs(st.engine, "healthy")) == 1
            assert await queued(st.engine, "healthy") == {}
            [(error,)] = await rows(st.engine, "SELECT schedule_error FROM dags WHERE dag_id = 'poisoned'")
            assert "schedule.datasets.all" in error
            assert await dataset_runs(st.engine, "poisoned") == []
            await st.tick(periodic=True)  # still alive, nothing more to do

    asyncio.run(main())


def test_a_triggering_list_too_long_for_an_environment_variable_is_replaced_by_a_note() -> None:
    from leoflow.model.run_context import TRIGGERING_ENV_BYTES, RunContext

    short = RunContext(conf={}, logical_date=None, triggering_events='[{"uri": "a", "events": 2}]')
    assert short.triggering_env == '[{"uri":"a","events":2}]'
    long = json.dumps([{"uri": "u" * 1_000, "events": 1} for _ in range(100)])
    assert len(long) > TRIGGERING_ENV_BYTES
    assert RunContext(conf={}, logical_date=None, triggering_events=long).triggering_env == '{"truncated":true}'


def test_a_consumer_failing_in_the_producers_step_does_not_fail_the_producer(settings: Settings) -> None:
    """The consumer's run is made in the producer's step when it can; if making it raises, the step
    is redone entity by entity without it: the success and its event commit, and the periodic part
    makes the run (contained as any periodic part is)."""
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "ingest", "tasks": [container("load", produces=[ORDERS])]})
            await apply(st.engine, consumer("report"))
            run_id = await trigger(st.engine, "ingest")
            await st.tick(periodic=True)
            real = st.core.periodic.trigger_dataset_runs

            async def broken(step: object) -> None:
                raise RuntimeError("the consumer's part broke")

            st.core.periodic.trigger_dataset_runs = broken  # type: ignore[method-assign]
            st.finish("ingest", run_id, "load")
            await st.tick()
            [(state,)] = await rows(st.engine, "SELECT ti.state FROM task_instances ti "
                                    "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.dag_id = 'ingest'")
            assert state == "success" and await queued(st.engine, "report") == {ORDERS: 1}
            assert await dataset_runs(st.engine, "report") == []
            st.core.periodic.trigger_dataset_runs = real  # type: ignore[method-assign]
            await st.tick(periodic=True)
            assert len(await dataset_runs(st.engine, "report")) == 1 and await queued(st.engine, "report") == {}

    asyncio.run(main())


def test_a_cycle_of_two_dags_runs_each_once_per_finished_run(settings: Settings) -> None:
    """A produces what B waits on and B what A waits on (allowed, as in Airflow): each success starts
    the other, one run at a time, never two unfinished dataset-triggered runs of one DAG."""
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {**consumer("a", "all", "u://b"), "tasks": [container("r", produces=["u://a"])]})
            await apply(st.engine, {**consumer("b", "all", "u://a"), "tasks": [container("r", produces=["u://b"])]})
            await event(st.engine, "u://a")
            for turn in range(4):
                await st.tick(periodic=True)
                await st.tick(periodic=True)
                unfinished = await rows(st.engine, "SELECT dag_id, run_id FROM dag_runs WHERE run_type = 'dataset' "
                                        "AND state IN ('queued', 'running')")
                assert len(unfinished) == 1, (turn, unfinished)  # the cycle carries one run at a time
                [(dag_id, run_id)] = unfinished
                assert dag_id == ("b" if turn % 2 == 0 else "a")
                st.finish(dag_id, run_id, "r")
                await st.tick()
            # The last success started b's third run in its own step: still one unfinished run.
            assert len(await dataset_runs(st.engine, "a")) == 2 and len(await dataset_runs(st.engine, "b")) == 3
            assert len(await rows(st.engine, "SELECT 1 FROM dag_runs WHERE state IN ('queued', 'running')")) == 1

    asyncio.run(main())


def test_a_burst_of_events_keeps_one_queue_row_and_makes_one_run(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("burst"))
            for _ in range(1_000):
                await event(st.engine, ORDERS)
            assert await queued(st.engine, "burst") == {ORDERS: 1_000}
            await st.tick(periodic=True)
            [(_, _, events)] = await dataset_runs(st.engine, "burst")
            assert events[0]["events"] == 1_000 and events[0]["last_event_id"] - events[0]["first_event_id"] == 999

    asyncio.run(main())


def test_a_leader_change_between_the_producers_success_and_the_consumers_run(settings: Settings) -> None:
    """The producer's success (with its event) commits under term 1; term 1 dies before creating the
    consumer's run; term 2 creates it, exactly once. (A success's own step creates the run when it
    can; a step split by run (ADR 0012) or redone entity by entity leaves it to the periodic part,
    the window this reproduces by keeping the step from doing it.)"""
    async def main() -> None:
        async with stepper(settings, term=1) as old:
            await apply(old.engine, {"dag_id": "prod", "tasks": [container("p", produces=[ORDERS])]})
            await apply(old.engine, consumer("cons"))
            run_id = await trigger(old.engine, "prod")
            await old.tick(periodic=True)
            old.finish("prod", run_id, "p")

            async def not_in_this_step(step: object) -> None:
                return None

            old.core.periodic.trigger_dataset_runs = not_in_this_step  # type: ignore[method-assign]
            await old.core.hot_step()  # the success and its event, no periodic part
            assert await queued(old.engine, "cons") == {ORDERS: 1}
            assert await dataset_runs(old.engine, "cons") == []
            async with stepper(settings, term=2, engine=old.engine) as new:
                await new.tick(periodic=True)
                await new.tick(periodic=True)
            with pytest.raises(FencedOut):
                await old.tick(periodic=True)
            assert len(await dataset_runs(old.engine, "cons")) == 1

    asyncio.run(main())


def test_run_triggering_events_renders_as_json_in_args(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            task = container("r", args=["{{ run.triggering_events }}"])
            await apply(st.engine, {**consumer("templated"), "tasks": [task]})
            await event(st.engine, ORDERS)
            await st.tick(periodic=True)
            await st.tick(periodic=True)
            [launch] = [la for la in st.executor.launched if la.key.dag_id == "templated"]
            [rendered] = json.loads(launch.args[0])
            assert rendered["uri"] == ORDERS and rendered["events"] == 1 and rendered["source"] == "api"
            manual = await trigger(st.engine, "templated")
            await st.tick(periodic=True)
            [again] = [la for la in st.executor.launched if la.key.run_id == manual]
            assert again.args == ("[]",)  # a run datasets did not trigger

    asyncio.run(main())


def test_the_last_events_extra_reaches_the_run_and_its_tasks(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, consumer("report", "all", ORDERS, CUSTOMERS))
            await event(st.engine, ORDERS, {"rows": 1})
            await event(st.engine, ORDERS, {"rows": 1200, "path": "s3://lake/orders/2026-11-29"})
            await event(st.engine, CUSTOMERS)  # no extra: none shown
            await st.tick(periodic=True)
            [(_, _, events)] = await dataset_runs(st.engine, "report")
            by_uri = {e["uri"]: e for e in events}
            assert by_uri[ORDERS]["extra"] == {"rows": 1200, "path": "s3://lake/orders/2026-11-29"}
            assert by_uri[ORDERS]["events"] == 2 and "extra" not in by_uri[CUSTOMERS]

    asyncio.run(main())


def _sample(name: str, dag_id: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, {"dag_id": dag_id}) or 0.0


def test_per_dag_metrics_count_the_producers_events_and_the_consumers_runs(settings: Settings) -> None:
    events, runs = "leoflow_dag_dataset_events_total", "leoflow_dag_dataset_triggered_runs_total"

    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "m-ingest", "tasks": [container("load", produces=[ORDERS, CUSTOMERS])]})
            await apply(st.engine, consumer("m-report", "all", ORDERS, CUSTOMERS))
            run_id = await trigger(st.engine, "m-ingest")
            await st.tick(periodic=True)
            st.finish("m-ingest", run_id, "load")
            await st.tick()
            await st.tick(periodic=True)
            assert len(await dataset_runs(st.engine, "m-report")) == 1

    before = (_sample(events, "m-ingest"), _sample(runs, "m-report"))
    asyncio.run(main())
    assert (_sample(events, "m-ingest") - before[0], _sample(runs, "m-report") - before[1]) == (2.0, 1.0)


def test_per_dag_dataset_metrics_fold_dags_beyond_the_limit_into_other() -> None:
    from leoflow.metrics import datasets as dataset_metrics

    before = _sample("leoflow_dag_dataset_triggered_runs_total", "_other")
    dataset_metrics.count_dags({}, {"m-beyond-the-limit": 3}, max_dags=0)
    assert _sample("leoflow_dag_dataset_triggered_runs_total", "_other") - before == 3.0
    assert _sample("leoflow_dag_dataset_triggered_runs_total", "m-beyond-the-limit") == 0.0
