"""``when:`` in the scheduler, one tick at a time on real PostgreSQL (ADR 0014, decision 4).

The test plays the executor (tests/scheduler/stepper.py). A condition is evaluated when its task's
trigger rule says run: true queues it, false skips it (``when was false``, and the trigger rules
carry the skip on), an error fails it with the message, without a try and without retries.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from leoflow.clock import FakeClock, SystemClock
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows
from tests.scheduler.stepper import Stepper, container, stepper

#: ``day`` has no type: the dry run at apply cannot judge it, so run time does.
PARAMS = {"type": "object", "properties": {"go": {"type": "boolean", "default": True}, "day": {}}}


def dag(dag_id: str, when: str, **extra: Any) -> dict[str, Any]:
    """a → b (``when``) → after (all_success), done (all_done)."""
    return {"dag_id": dag_id, "params": PARAMS, "tasks": [
        container("a", outputs={"n": {"type": "integer", "optional": True}}),
        container("b", "a", when=when, **extra),
        container("after", "b"), container("done", "b", trigger_rule="all_done")]}


async def started(st: Stepper, spec: dict[str, Any], conf: dict[str, Any] | None = None) -> str:
    await apply(st.engine, spec)
    async with st.engine.begin() as conn:
        run_id = await run_store.trigger_run(conn, str(spec["dag_id"]), run_id=None, conf=conf or {},
                                             clock=SystemClock())
    await st.tick(periodic=True)
    return run_id


def launched(st: Stepper, run_id: str) -> list[str]:
    return sorted(la.key.task_id for la in st.executor.launched if la.key.run_id == run_id)


async def try_count(st: Stepper, run_id: str, task_id: str) -> int:
    [(n,)] = await rows(st.engine, "SELECT count(*) FROM task_tries tt JOIN task_instances ti ON ti.id = "
                        "tt.task_instance_id JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r "
                        "AND ti.task_id = :t", r=run_id, t=task_id)
    return int(n)


def test_a_true_condition_queues_the_task_in_the_step_of_its_upstreams_success(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, dag("yes", "params.go && run.id != ''"))
            st.finish("yes", run, "a")
            await st.tick()
            assert (await st.tasks(run))["b"][0] == "queued"
            assert launched(st, run) == ["a", "b"]

    asyncio.run(main())


def test_a_false_condition_skips_the_task_and_the_rules_carry_the_skip(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, dag("no", "params.go"), conf={"go": False})
            st.finish("no", run, "a")
            await st.tick()
            tasks = await st.tasks(run)
            assert tasks["b"] == ("skipped", "when was false")
            assert tasks["after"] == ("skipped", "skipped by trigger rule")
            assert tasks["done"][0] == "queued"
            assert launched(st, run) == ["a", "done"] and await try_count(st, run, "b") == 0
            st.finish("no", run, "done")
            await st.tick()
            assert await st.run(run) == ("success", None)

    asyncio.run(main())


def test_a_condition_that_fails_fails_the_task_once_without_a_try(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, dag("bad", "params.day == '2026-11-29'", retries=3))
            st.finish("bad", run, "a")
            await st.tick()
            tasks = await st.tasks(run)
            assert tasks["b"] == ("failed", "when failed: no such key: 'day'")
            assert tasks["after"] == ("upstream_failed", "an upstream task failed")
            assert tasks["done"][0] == "queued"
            assert await try_count(st, run, "b") == 0
            st.finish("bad", run, "done")
            await st.settle()
            assert (await st.tasks(run))["b"][0] == "failed"  # no retry: the same facts fail the same way
            assert await st.run(run) == ("failed", "task 'b' failed: when failed: no such key: 'day'")

    asyncio.run(main())


def test_a_non_boolean_fails_and_a_root_task_is_judged_when_the_run_starts(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            spec = {"dag_id": "roots", "params": PARAMS, "tasks": [
                container("text", when="params.day"), container("skip", when="!params.go"),
                {"id": "gate", "kind": "empty", "when": "params.go"}, container("next", "gate")]}
            run = await started(st, spec, conf={"day": "x"})
            await st.settle()
            tasks = await st.tasks(run)
            assert tasks["text"] == ("failed", "when must be a boolean, got a string")
            assert tasks["skip"] == ("skipped", "when was false")
            assert tasks["gate"][0] == "success" and tasks["next"][0] == "queued"
            assert launched(st, run) == ["next"]

    asyncio.run(main())


def test_a_condition_reads_the_runs_data_interval_as_timestamps(settings: Settings) -> None:
    """``run.data_interval_start/end``: an hourly slot's interval is an hour; a manual run's is empty."""
    start = datetime(2026, 3, 1, 11, 30, tzinfo=UTC)
    clock = FakeClock(start)
    when = ("run.data_interval_end - run.data_interval_start == duration('1h') "
            "&& run.data_interval_end == run.logical_date && run.data_interval_start.getHours() == 11")

    async def main() -> None:
        async with stepper(settings, clock=clock) as st:
            await apply(st.engine, {"dag_id": "hourly", "schedule": "0 * * * *", "start_date": start.isoformat(),
                                    "tasks": [container("b", when=when)]}, clock)
            clock.advance(1800 + 5)
            await st.tick(periodic=True)  # the 12:00 slot: interval 11:00-12:00
            async with st.engine.begin() as conn:
                manual = await run_store.trigger_run(conn, "hourly", run_id=None, conf={}, clock=clock)
            await st.tick(periodic=True)
            states = dict(await rows(st.engine, "SELECT r.run_type, ti.state FROM task_instances ti "
                                                "JOIN dag_runs r ON r.id = ti.run_pk"))  # type: ignore[arg-type]
            assert states == {"scheduled": "queued", "manual": "skipped"}, manual

    asyncio.run(main())
