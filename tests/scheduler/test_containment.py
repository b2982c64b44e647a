"""Issue 16: one entity's data fails that entity, never the leader — and no later leader trips on it again.

Each poison is written straight into the database (an older release or a hand edit could have
left it there; the API refuses most of them), next to a healthy DAG whose run must still
succeed. The scheduler is driven one tick at a time (:mod:`tests.scheduler.stepper`), so "the
tick did not raise" and "the entity is failed with its reason" are exact assertions.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.metrics import scheduler as metrics
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import T0, Stepper, container, insert_version, stepper


def entity_errors(kind: str) -> float:
    return metrics.ENTITY_ERRORS.labels(kind=kind)._value.get()


async def healthy_run(st: Stepper) -> str:
    await apply(st.engine, {"dag_id": "healthy", "tasks": [container("a"), container("b", "a")]})
    return await trigger(st.engine, "healthy")


async def finish_healthy(st: Stepper, run_id: str) -> None:
    """Play the executor for the healthy run to its end; it must succeed."""
    for task in ("a", "b"):
        st.finish("healthy", run_id, task)
        await st.tick()
    assert await st.run(run_id) == ("success", None)


@pytest.mark.parametrize("timeout", [1_000_000_000_000, 1e300], ids=["1e12", "1e300"])
def test_a_timeout_beyond_the_calendar_fails_its_run_and_no_leader_trips_on_it_again(settings: Settings,
                                                                                     timeout: float) -> None:
    """The issue's 1e12 s raised OverflowError in ``timedelta`` on 4122883, in every leader in turn.

    Deadlines are set on the database's clock now (no ``timedelta``), and a stored spec is compiled
    under today's limits (at most 30 days), so a version written by an older release or by hand
    fails its run before it starts, with the field named; 1e300 s (beyond what the database's
    ``interval`` holds) goes the same way.
    """
    async def main() -> None:
        async with stepper(settings) as st:
            ok = await healthy_run(st)
            await insert_version(st.engine, "poison", {"dag_id": "poison", "tasks": [
                container("a", timeout_seconds=timeout), container("b", "a")]})
            bad = await trigger(st.engine, "poison")
            before = entity_errors("dag_version")
            await st.tick(periodic=True)  # 4122883 raised here once the task ran, and so did every next leader
            assert "poison" not in {launch.key.dag_id for launch in st.executor.launched}
            state, reason = await st.run(bad)
            assert state == "failed", reason
            assert (reason or "").startswith("scheduler error: ValidationFailed: tasks[0].timeout_seconds: "), reason
            await finish_healthy(st, ok)
            assert entity_errors("dag_version") == before + 1

        # The next leader trips on nothing: the failure is stored, not recomputed.
        async with stepper(settings, term=2) as st:
            await st.tick(periodic=True)
            await st.settle()
            assert entity_errors("dag_version") == before + 1
            assert await st.run(bad) == (state, reason)

    asyncio.run(main())


def test_300_dag_versions_in_one_batch_schedule_correctly(settings: Settings) -> None:
    """Issue 16 behaviour 5: a batch touching more versions than the graph cache holds (256)."""
    async def main() -> None:
        async with stepper(settings, parallelism=1000) as st:
            st.core.graphs.cache.size = 256  # the cache of issue 16 (it holds 32,768 small versions now)
            runs: dict[str, str] = {}
            async with st.engine.begin() as conn:  # one transaction: 300 DAGs and runs in ~1 s
                for i in range(300):
                    spec = parse_dag_spec({"dag_id": f"d{i:03d}", "tasks": [container("a"), container("b", "a")]})
                    await dag_store.apply_dag(conn, spec, clock=st.clock)
                    runs[spec.dag_id] = await run_store.trigger_run(conn, spec.dag_id, run_id=None, conf={},
                                                                    clock=st.clock)
            await st.tick(periodic=True)
            assert len(st.executor.launched) == 300
            for dag_id, run_id in runs.items():  # 300 reports: one batch (500) over 300 versions
                st.report(st.key(dag_id, run_id, "a"), "success")
            await st.tick()  # main: KeyError (the cache evicted versions the batch still needed)
            assert len(st.executor.launched) == 600
            for dag_id, run_id in runs.items():
                st.report(st.key(dag_id, run_id, "b"), "success")
            await st.tick()
            states = await rows(st.engine, "SELECT state, count(*) FROM dag_runs GROUP BY state")
            assert states == [("success", 300)]

    asyncio.run(main())


def test_a_conf_nested_too_deep_to_decode_fails_its_run_only(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            ok = await healthy_run(st)
            await apply(st.engine, {"dag_id": "deep", "tasks": [container("a")]})
            bad = await trigger(st.engine, "deep")
            deep = '{"a":' * 3000 + "1" + "}" * 3000
            await st.sql("UPDATE dag_runs SET conf = CAST(:c AS jsonb) WHERE run_id = :r", c=deep, r=bad)
            before = entity_errors("run")
            await st.tick(periodic=True)  # main: RecursionError decoding the conf
            state, reason = await st.run(bad)
            assert state == "failed" and reason is not None
            assert reason.startswith("scheduler error: RecursionError: maximum recursion depth exceeded")
            assert await st.tasks(bad) == {"a": ("cancelled", f"run failed: {reason}")}
            assert entity_errors("run") == before + 1
            await finish_healthy(st, ok)

    asyncio.run(main())


def test_a_cron_that_never_fires_stops_its_schedule_only(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            for dag_id in ("hourly", "never"):
                await apply(st.engine, {"dag_id": dag_id, "schedule": "@hourly",
                                        "start_date": (T0 - timedelta(hours=2)).isoformat(),
                                        "tasks": [{"id": "t", "kind": "empty"}]}, st.clock)
            await st.sql("UPDATE dags SET schedule = '0 0 31 2 *' WHERE dag_id = 'never'")
            before = entity_errors("dag")
            await st.tick(periodic=True)  # main: CroniterBadDateError out of the tick
            [(next_run_at, error)] = await rows(st.engine, "SELECT next_run_at, schedule_error FROM dags "
                                                "WHERE dag_id = 'never'")
            assert next_run_at is None
            assert error == "scheduler error: CroniterBadDateError: failed to find prev date"
            assert entity_errors("dag") == before + 1
            assert await rows(st.engine, "SELECT dag_id, state FROM dag_runs") == [("hourly", "success")]
            st.clock.advance(3600)
            await st.tick(periodic=True)
            assert entity_errors("dag") == before + 1  # stopped for good: not evaluated again
            assert await rows(st.engine, "SELECT dag_id, count(*) FROM dag_runs GROUP BY dag_id") == [("hourly", 2)]

    asyncio.run(main())


def wide_dag(width: int) -> dict[str, object]:
    return {"dag_id": "wide", "tasks": [container("root"), *(container(f"t{i:02d}", "root") for i in range(width))]}


def test_a_row_the_database_refuses_is_bisected_out_of_its_batch(settings: Settings) -> None:
    """A batch statement failing because of one row: the batch is split until that row stands alone."""
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, wide_dag(21))
            run = await trigger(st.engine, "wide")
            await st.tick(periodic=True)
            # A hand edit: the next queue transition of t07 overflows its integer try counter.
            await st.sql("UPDATE task_instances SET try_number = 2147483647 WHERE task_id = 't07'")
            before = entity_errors("task")
            st.finish("wide", run, "root")
            await st.tick()  # main: ValueRejected out of every tick, forever (then the stall watchdog)
            launched = sorted(launch.key.task_id for launch in st.executor.launched)
            assert launched == ["root", *(f"t{i:02d}" for i in range(21) if i != 7)]
            state, reason = (await st.tasks(run))["t07"]
            assert state == "failed" and reason is not None
            assert reason.startswith("scheduler error: ValueRejected: a value is not acceptable to the database")
            assert entity_errors("task") == before + 1
            for i in range(21):
                if i != 7:
                    st.finish("wide", run, f"t{i:02d}")
            await st.tick()
            assert await st.run(run) == ("failed", f"task 't07' failed: {reason}")

    asyncio.run(main())


#: A damaged row: every state change of task t07 is refused (as PostgreSQL refuses a value it cannot store).
REFUSE_T07 = ("""CREATE FUNCTION refuse_t07() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN RAISE EXCEPTION 'this row is damaged' USING ERRCODE = '22023'; END $$""",
              """CREATE TRIGGER refuse_t07 BEFORE UPDATE ON task_instances FOR EACH ROW
                 WHEN (OLD.task_id = 't07' AND NEW.state <> OLD.state) EXECUTE FUNCTION refuse_t07()""")


def test_an_entity_whose_failure_cannot_be_written_is_skipped_for_the_term(settings: Settings,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, wide_dag(12))
            run = await trigger(st.engine, "wide")
            await st.tick(periodic=True)
            for statement in REFUSE_T07:
                await st.sql(statement)
            st.finish("wide", run, "root")
            await st.tick()
            assert len(st.executor.launched) == 1 + 11  # every sibling of the damaged row runs
            assert ("task", (await rows(st.engine, "SELECT id FROM task_instances WHERE task_id = 't07'"))[0][0]) \
                in st.core.quarantine
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="leoflow.scheduler.core"):
                await st.tick(periodic=True)  # the scan finds it again: it is skipped, no bisection
            assert not [r for r in caplog.records if "entity by entity" in r.getMessage()]

    asyncio.run(main())


def test_a_version_this_release_cannot_compile_fails_its_runs_queued_and_running(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            engine = st.engine
            ok = await healthy_run(st)
            await apply(engine, {"dag_id": "old", "tasks": [container("a"), container("b", "a")]})
            running = await trigger(engine, "old")
            await st.tick(periodic=True)
            key = st.key("old", running, "a")
        # A later release (or a hand edit) cannot read the stored specs any more.
        await insert_version(engine, "broken", {"dag_id": "broken", "tasks": "not a list"})
        queued = await trigger(engine, "broken")
        await st.sql("UPDATE dag_versions SET spec = jsonb_set(spec, '{tasks,0,retries}', '\"many\"') "
                     "WHERE dag_id = 'old'")
        async with stepper(settings, term=2, engine=engine) as st:
            st.report(key, "running")  # the old run's try, reconciled by the new term's executor
            await st.tick(periodic=True)
            state, reason = await st.run(queued)
            assert state == "failed" and reason is not None
            assert reason.startswith("scheduler error: ValidationFailed: tasks: must be a list")
            state, reason = await st.run(running)
            assert state == "failed" and reason is not None and "tasks[0].retries" in reason
            assert {t: s for t, (s, _) in (await st.tasks(running)).items()} == {"a": "cancelled", "b": "cancelled"}
            assert await st.core.resubmit_queued() == 1  # the healthy run carries on under the new term
            await finish_healthy(st, ok)
        await engine.dispose()

    asyncio.run(main())


def test_report_text_the_database_cannot_store_is_cleaned_not_fatal(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run, key = await st.launch_alone("nul")
            st.report(key, "running")
            st.report(key, "failed", exit_code=1, reason="pod said \x00 and died")
            await st.tick()  # main: ValueRejected (NUL in text) out of every tick
            assert await st.tasks(run) == {"a": ("failed", "pod said \\0 and died")}

    asyncio.run(main())
