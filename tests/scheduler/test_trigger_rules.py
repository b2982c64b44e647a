"""Trigger rules and the skipped state in the scheduler, one tick at a time on real PostgreSQL.

The test plays the executor (tests/scheduler/stepper.py): it reports tries ended and reads the
database right after the tick that applied the report, so "decided in the same step" is an
assertion, not a race. The completion sweep must repair nothing (conftest's autouse fixture).
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from leoflow.model.spec.notify import DEADLINE_REASON
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import Stepper, container, stepper


def empty(task_id: str, *deps: str, **extra: object) -> dict[str, object]:
    return {"id": task_id, "kind": "empty", "depends_on": list(deps), **extra}


async def started(st: Stepper, spec: dict[str, object]) -> str:
    await apply(st.engine, spec)
    run_id = await trigger(st.engine, str(spec["dag_id"]))
    await st.tick(periodic=True)
    return run_id


def launched(st: Stepper, run_id: str) -> list[str]:
    return [launch.key.task_id for launch in st.executor.launched if launch.key.run_id == run_id]


#: The README's example shape: extract → load → publish; cleanup (all_done) after load; alert
#: (one_failed) after extract and load.
PIPELINE = {"dag_id": "pipeline", "tasks": [
    container("extract"), container("load", "extract"), container("publish", "load"),
    container("cleanup", "load", trigger_rule="all_done"),
    container("alert", "extract", "load", trigger_rule="one_failed")]}


def test_a_failure_runs_cleanup_and_alert_and_the_failed_leaf_fails_the_run(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, PIPELINE)
            st.finish("pipeline", run, "extract")
            await st.tick()
            st.finish("pipeline", run, "load", "failed", reason="exit code 2")
            await st.tick()
            # In the step of load's failure: publish doomed, cleanup and alert queued.
            tasks = await st.tasks(run)
            assert tasks["publish"] == ("upstream_failed", "an upstream task failed")
            assert tasks["cleanup"][0] == "queued" and tasks["alert"][0] == "queued"
            assert sorted(launched(st, run)) == ["alert", "cleanup", "extract", "load"]
            assert await st.run(run) == ("running", None)
            st.finish("pipeline", run, "cleanup")
            st.finish("pipeline", run, "alert")
            await st.tick()
            assert await st.run(run) == ("failed", "task 'load' failed: exit code 2")

    asyncio.run(main())


def test_without_a_failure_the_alert_is_skipped_and_the_run_succeeds(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, PIPELINE)
            st.finish("pipeline", run, "extract")
            await st.tick()
            st.finish("pipeline", run, "load")
            await st.tick()
            tasks = await st.tasks(run)
            assert tasks["alert"] == ("skipped", "skipped by trigger rule")
            assert tasks["publish"][0] == tasks["cleanup"][0] == "queued"
            st.finish("pipeline", run, "publish")
            st.finish("pipeline", run, "cleanup")
            await st.tick()
            # A skipped leaf counts as success (Airflow's leaves rule).
            assert await st.run(run) == ("success", None)

    asyncio.run(main())


def test_a_cleanup_leaf_decides_the_run_when_it_is_the_only_leaf(settings: Settings) -> None:
    """Airflow's rule, documented: the leaves decide; an all_done leaf that succeeds makes the run a success."""
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "only-cleanup", "tasks": [
                container("work"), container("cleanup", "work", trigger_rule="all_done")]})
            st.finish("only-cleanup", run, "work", "failed")
            await st.tick()
            st.finish("only-cleanup", run, "cleanup")
            await st.tick()
            assert await st.run(run) == ("success", None)
            assert (await st.tasks(run))["work"][0] == "failed"

    asyncio.run(main())


def test_one_success_runs_before_its_other_upstreams_end(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "race", "tasks": [
                container("mirror-a"), container("mirror-b"), container("use", "mirror-a", "mirror-b",
                                                                         trigger_rule="one_success")]})
            st.finish("race", run, "mirror-a")
            await st.tick()
            assert (await st.tasks(run))["use"][0] == "queued"  # mirror-b still running
            st.finish("race", run, "mirror-b", "failed")
            st.finish("race", run, "use")
            await st.tick()
            # The only leaf (use) succeeded: the run succeeds although mirror-b failed.
            assert await st.run(run) == ("success", None)
            [(launches,)] = await rows(st.engine, "SELECT count(*) FROM task_tries tt JOIN task_instances ti "
                                       "ON ti.id = tt.task_instance_id WHERE ti.task_id = 'use'")
            assert launches == 1  # counted once, not re-decided by mirror-b's end

    asyncio.run(main())


def test_one_success_fails_when_none_succeeded_and_skips_cascade_through_all_success(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "skips", "tasks": [
                container("a"),
                container("only-on-failure", "a", trigger_rule="all_failed"),
                empty("after", "only-on-failure"),
                empty("join", "after", trigger_rule="none_failed_min_one_success"),
                container("any", "only-on-failure", trigger_rule="one_success")]})
            st.finish("skips", run, "a")
            await st.tick()
            tasks = await st.tasks(run)
            # a succeeded: all_failed skips; the skip cascades through all_success and makes the
            # all-skipped join skip; one_success with its only upstream skipped skips too.
            assert {t: s for t, (s, _) in tasks.items()} == {
                "a": "success", "only-on-failure": "skipped", "after": "skipped", "join": "skipped", "any": "skipped"}
            assert await st.run(run) == ("success", None)
            run2 = await trigger(st.engine, "skips")
            await st.tick(periodic=True)
            st.finish("skips", run2, "a", "failed")
            await st.tick()
            st.finish("skips", run2, "only-on-failure", "failed")
            await st.tick()
            tasks = await st.tasks(run2)
            assert tasks["after"][0] == "upstream_failed"
            assert tasks["join"][0] == "upstream_failed"
            assert tasks["any"] == ("upstream_failed", "an upstream task failed")
            assert (await st.run(run2))[0] == "failed"

    asyncio.run(main())


def test_empty_tasks_follow_their_rules_in_one_step(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "empties", "tasks": [
                container("work"), empty("on-fail", "work", trigger_rule="one_failed"),
                empty("done", "on-fail", "work", trigger_rule="all_done"),
                empty("chained", "done")]})
            st.finish("empties", run, "work", "failed")
            await st.tick()
            tasks = await st.tasks(run)
            assert {t: s for t, (s, _) in tasks.items()} == {
                "work": "failed", "on-fail": "success", "done": "success", "chained": "success"}
            assert await st.run(run) == ("success", None)

    asyncio.run(main())


def test_a_default_rule_dag_dooms_all_descendants_in_one_statement(settings: Settings) -> None:
    """The hot path of default rules is unchanged: a failure at the root of a 300-task chain marks
    every descendant upstream_failed in the step of the failure."""
    async def main() -> None:
        async with stepper(settings) as st:
            tasks = [container("t0")] + [empty(f"t{i}", f"t{i - 1}") for i in range(1, 300)]
            run = await started(st, {"dag_id": "long", "tasks": tasks})
            st.finish("long", run, "t0", "failed")
            await st.tick()
            [(n,)] = await rows(st.engine, "SELECT count(*) FROM task_instances WHERE state = 'upstream_failed'")
            assert n == 299
            assert (await st.run(run))[0] == "failed"

    asyncio.run(main())


def test_the_run_deadline_counts_from_the_start_on_the_database_clock(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "bounded", "run_timeout_seconds": 600,
                                    "tasks": [container("slow"), container("next", "slow")]})
            run = await trigger(st.engine, "bounded")
            [(before,)] = await rows(st.engine, "SELECT now()")
            await st.tick(periodic=True)
            [(after,)] = await rows(st.engine, "SELECT now()")
            [(deadline,)] = await rows(st.engine, "SELECT deadline_at FROM dag_runs WHERE run_id = :r", r=run)
            assert isinstance(deadline, datetime)
            assert before.timestamp() + 600 <= deadline.timestamp() <= after.timestamp() + 600
            key = st.key("bounded", run, "slow")
            st.report(key, "running")
            await st.tick(periodic=True)
            assert await st.run(run) == ("running", None)  # not yet: the fake clock does not matter
            await st.sql("UPDATE dag_runs SET deadline_at = now() - interval '1 second' WHERE run_id = :r", r=run)
            await st.tick(periodic=True)
            assert await st.run(run) == ("failed", DEADLINE_REASON)
            tasks = await st.tasks(run)
            assert tasks == {"slow": ("cancelled", f"run failed: {DEADLINE_REASON}"),
                             "next": ("cancelled", f"run failed: {DEADLINE_REASON}")}
            for _ in range(50):  # the kill runs beside the loop
                if key in st.executor.cancelled:
                    break
                await asyncio.sleep(0.1)
            assert key in st.executor.cancelled

    asyncio.run(main())


def test_a_trigger_overrides_the_deadline_and_a_run_without_one_has_none(settings: Settings) -> None:
    async def main() -> None:
        from leoflow.clock import SystemClock
        from leoflow.db.stores.runs import lifecycle as run_store

        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "override", "run_timeout_seconds": 600, "tasks": [container("a")]})
            async with st.engine.begin() as conn:
                short = await run_store.trigger_run(conn, "override", run_id="short", conf={}, clock=SystemClock(),
                                                    run_timeout_seconds=30)
            await apply(st.engine, {"dag_id": "free", "tasks": [container("a")]})
            free = await trigger(st.engine, "free")
            await st.tick(periodic=True)
            found = dict(await rows(st.engine, "SELECT run_id, extract(epoch FROM deadline_at - now()) "
                                    "FROM dag_runs WHERE run_id IN (:a, :b)", a=short, b=free))
            assert found[free] is None
            assert 0 < float(found[short]) <= 30

    asyncio.run(main())


def test_the_queue_checks_the_rule_of_a_task_another_writer_left_ready(settings: Settings) -> None:
    """A reset (a backfill's rerun, a hand edit) only has to leave the counters right: a task left
    pending with every upstream ended is queued only if its rule says run."""
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "reset", "tasks": [
                container("a"), container("on-fail", "a", trigger_rule="one_failed"),
                container("always", "a", trigger_rule="all_done")]})
            await st.sql("UPDATE task_instances SET state = 'success' WHERE task_id = 'a'")
            await st.sql("UPDATE task_instances SET pending_upstreams = 0, upstream_successes = 1 "
                         "WHERE task_id IN ('on-fail', 'always')")
            await st.tick(periodic=True)
            tasks = await st.tasks(run)
            assert tasks["on-fail"] == ("skipped", "skipped by trigger rule")
            assert tasks["always"][0] == "queued"

    asyncio.run(main())
