"""Issue 21: a run is terminal in the same scheduler step as its last task, whatever its shape.

The scheduler is driven one tick (one transaction) at a time, and the run is read right after
the tick that applied its last task's report: no sleeps, no sweep (the autouse fixture in
conftest.py also fails any test in which the completion sweep had to finish a run).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.settings import Settings
from tests.scheduler.conftest import SweepRepairs
from tests.scheduler.harness import apply, in_conn, rows, trigger
from tests.scheduler.stepper import Stepper, container, stepper


async def started(st: Stepper, spec: dict[str, object]) -> str:
    await apply(st.engine, spec)
    run_id = await trigger(st.engine, str(spec["dag_id"]))
    await st.tick(periodic=True)
    return run_id


def test_success_chain_ends_with_its_leaf(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "chain", "tasks": [container("a"), container("b", "a")]})
            st.finish("chain", run, "a")
            await st.tick()
            assert await st.run(run) == ("running", None)
            st.finish("chain", run, "b")
            await st.tick()
            assert await st.run(run) == ("success", None)

    asyncio.run(main())


def test_a_failing_leaf_fails_the_run_in_its_step(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "leaf", "tasks": [container("a"), container("b", "a")]})
            st.finish("leaf", run, "a")
            await st.tick()
            st.finish("leaf", run, "b", "failed", reason="exited with code 3")
            await st.tick()
            assert await st.run(run) == ("failed", "task 'b' failed: exited with code 3")

    asyncio.run(main())


def test_a_failure_dooms_its_downstream_and_ends_the_run_at_once(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "root-fails", "tasks": [container("a"), container("b", "a")]})
            st.finish("root-fails", run, "a", "failed")
            await st.tick()
            assert await st.tasks(run) == {"a": ("failed", "exit code 1"),
                                           "b": ("upstream_failed", "an upstream task failed")}
            assert await st.run(run) == ("failed", "task 'a' failed: exit code 1")

    asyncio.run(main())


def test_the_last_task_to_end_need_not_be_a_leaf(settings: Settings) -> None:
    """The issue's shape: fetch → [ok, fails] → report; `ok` ends last, after `report` is upstream_failed."""
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "sibling", "tasks": [
                container("fetch"), container("ok", "fetch"), container("fails", "fetch"),
                container("report", "ok", "fails")]})
            st.finish("sibling", run, "fetch")
            await st.tick()
            st.finish("sibling", run, "fails", "failed")
            await st.tick()
            assert await st.run(run) == ("running", None)  # `ok` still runs
            st.finish("sibling", run, "ok")
            await st.tick()  # main: the run stayed running until the 10 s sweep
            assert await st.run(run) == ("failed", "task 'fails' failed: exit code 1")

    asyncio.run(main())


def test_an_empty_leaf_ends_the_run_in_the_step_that_releases_it(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "empty-leaf", "tasks": [
                container("a"), {"id": "done", "kind": "empty", "depends_on": ["a"]}]})
            st.finish("empty-leaf", run, "a")
            await st.tick()  # main: finished the run one step later
            assert await st.run(run) == ("success", None)

    asyncio.run(main())


def test_a_dag_of_empty_tasks_runs_to_the_end_in_the_step_that_starts_it(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            steps = [{"id": f"e{i:03d}", "kind": "empty", "depends_on": [f"e{i - 1:03d}"] if i else []}
                     for i in range(100)]
            run = await started(st, {"dag_id": "empties", "tasks": steps})
            assert await st.run(run) == ("success", None)
            assert st.executor.launched == []

    asyncio.run(main())


def test_a_retry_that_fails_again_ends_the_run_in_its_step(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "retry", "tasks": [
                container("a", retries=1, retry_delay_seconds=0)]})
            st.finish("retry", run, "a", "failed")
            await st.tick()  # up_for_retry, due at once: queued again in the same step
            assert st.key("retry", run, "a").try_number == 2
            assert await st.run(run) == ("running", None)
            st.finish("retry", run, "a", "failed")
            await st.tick()
            assert await st.run(run) == ("failed", "task 'a' failed: exit code 1")

    asyncio.run(main())


def test_a_timeout_ends_the_run_in_the_step_that_times_the_task_out(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "slow", "tasks": [container("a", timeout_seconds=60)]})
            st.report(st.key("slow", run, "a"), "running")
            await st.tick()
            # The deadline is on the database's clock (issue 17): 60 s from the report's commit.
            assert await rows(st.engine, "SELECT timeout_at - now() > interval '50 seconds' FROM task_instances "
                                         "WHERE state = 'running'") == [(True,)]
            await st.sql("UPDATE task_instances SET timeout_at = now() - interval '1 second' WHERE state = 'running'")
            await st.tick(periodic=True)
            assert await st.run(run) == ("failed", "task 'a' failed: timed out after 60s")
            await asyncio.gather(*st.core.kills.tasks)
            assert st.executor.cancelled == [st.key("slow", run, "a")]

    asyncio.run(main())


def test_a_cancelled_run_is_terminal_when_the_cancel_commits(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "cancel", "tasks": [container("a"), container("b", "a")]})
            st.report(st.key("cancel", run, "a"), "running")
            await st.tick()
            await in_conn(st.engine, lambda c: run_store.cancel_run(c, "cancel", run))
            assert (await st.run(run))[0] == "cancelled"  # no scheduler step needed
            await st.tick(periodic=True)
            await asyncio.gather(*st.core.kills.tasks)
            assert st.executor.cancelled == [st.key("cancel", run, "a")]
            st.report(st.key("cancel", run, "a"), "failed", reason="cancelled")  # the killed try reports
            await st.tick()
            assert (await st.run(run))[0] == "cancelled"
            assert await st.tasks(run) == {"a": ("cancelled", "run cancelled"), "b": ("cancelled", "run cancelled")}

    asyncio.run(main())


def test_the_sweep_repairs_a_run_left_complete_and_counts_it(settings: Settings, sweep_repairs: SweepRepairs) -> None:
    """The safety net still works (and its counter can move): a run completed behind the scheduler's back."""
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "behind", "tasks": [container("a")]})
            await st.sql("UPDATE task_instances SET state = 'success', ended_at = now()")  # a hand edit
            st.clock.advance(timedelta(minutes=1).total_seconds())
            await st.tick()
            assert await rows(st.engine, "SELECT state FROM dag_runs WHERE run_id = :r", r=run) == [("success",)]
        sweep_repairs.expected = 1

    asyncio.run(main())
