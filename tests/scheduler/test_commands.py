"""Clear and mark applied by the leader, one tick at a time on real PostgreSQL.

Commands are recorded as the API records them (commands.create_command) and applied by the
next periodic tick of the test's scheduler under its term; the test then reads the database.
"""

from __future__ import annotations

import asyncio
from typing import Any

from leoflow.db import queued_tries
from leoflow.db.stores import commands
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import Stepper, container, stepper

CHAIN = {"dag_id": "chain", "tasks": [container("a", retries=1, retry_delay_seconds=0), container("b", "a"),
                                      container("c", "b")]}


async def started(st: Stepper, spec: dict[str, Any]) -> str:
    await apply(st.engine, spec)
    run_id = await trigger(st.engine, str(spec["dag_id"]))
    await st.tick(periodic=True)
    return run_id


async def command(st: Stepper, run_id: str, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """Record a command as the API does, let the leader apply it, return what it answered."""
    [(run_pk, dag_id)] = await rows(st.engine, "SELECT id, dag_id FROM dag_runs WHERE run_id = :r", r=run_id)
    async with st.engine.begin() as conn:
        command_id = await commands.create_command(conn, run_pk=run_pk, dag_id=dag_id, kind=kind, body=body,
                                                        requested_by="ops")
    await st.tick(periodic=True)
    async with st.engine.connect() as conn:
        state = await commands.command_state(conn, command_id)
    assert state is not None and state.applied_at is not None, "the leader did not apply the command"
    return {"error": state.error, **(state.outcome or {})}


async def tries(st: Stepper, run_id: str, task_id: str) -> list[tuple[int, str]]:
    """A task's tries, the queued one whose row is not written yet included (ADR 0013)."""
    return [(n, s) for n, s in await rows(st.engine, f"""
        SELECT tt.try_number, tt.state FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id
        JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r AND ti.task_id = :t
        UNION ALL
        SELECT ti.try_number, 'queued' FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
        WHERE r.run_id = :r AND ti.task_id = :t AND {queued_tries.implicit_try_sql('ti')}
        ORDER BY 1""", r=run_id, t=task_id)]


def test_clear_failed_with_downstream_reruns_as_new_tries_with_a_fresh_budget(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, CHAIN)
            st.finish("chain", run, "a", "failed")
            await st.tick()
            st.finish("chain", run, "a", "failed")  # its retry fails too: no tries left
            await st.tick()
            assert await st.run(run) == ("failed", "task 'a' failed: exit code 1")
            assert (await st.tasks(run))["b"][0] == "upstream_failed"

            answer = await command(st, run, "clear", {"failed_only": True, "downstream": True})
            assert answer == {"error": None, "tasks": ["a", "b", "c"]}
            # The run is running again and `a` is queued as try 3 (history kept, names unique).
            assert await st.run(run) == ("running", None)
            assert st.key("chain", run, "a").try_number == 3
            [(max_tries,)] = await rows(st.engine, "SELECT max_tries FROM task_instances WHERE task_id = 'a'")
            assert max_tries == 4  # try 3 plus one retry: a fresh budget
            assert await tries(st, run, "a") == [(1, "failed"), (2, "failed"), (3, "queued")]
            for task in ("a", "b", "c"):
                st.finish("chain", run, task)
                await st.tick()
            assert await st.run(run) == ("success", None)

    asyncio.run(main())


def test_clearing_a_running_task_kills_its_try_first(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, CHAIN)
            first = st.key("chain", run, "a")
            st.report(first, "running")
            await st.tick()
            answer = await command(st, run, "clear", {"tasks": ["a"]})
            assert answer["tasks"] == ["a"]
            # Not queued while try 1 may still run (issue 44): `a` waits, visibly, in `cancelling` (the
            # kill runs beside the loop: on a fast path try 1 is already `cancelled`, and still no try 2).
            seen = await tries(st, run, "a")
            assert seen in ([(1, "cancelling")], [(1, "cancelled")])
            if seen == [(1, "cancelling")]:
                assert (await st.tasks(run))["a"][0] == "cancelling"
            for _ in range(100):  # the kill runs beside the loop, records itself, then `a` is released
                await st.tick(periodic=True)
                if await tries(st, run, "a") == [(1, "cancelled"), (2, "queued")]:
                    break
                await asyncio.sleep(0.1)
            assert first in st.executor.cancelled
            assert await tries(st, run, "a") == [(1, "cancelled"), (2, "queued")]
            # A late report of the killed try changes nothing.
            st.report(first, "success")
            await st.tick()
            assert (await st.tasks(run))["a"][0] == "queued"
            assert (await st.tasks(run))["b"][0] == "pending"

    asyncio.run(main())


def test_clear_refuses_unknown_tasks_and_runs_not_started(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, CHAIN)
            answer = await command(st, run, "clear", {"tasks": ["a", "nope"]})
            assert answer["error"] == "tasks[1]: run '" + run + "' has no task 'nope'"
            assert await tries(st, run, "a") == [(1, "queued")]  # nothing changed
            await apply(st.engine, {**CHAIN, "dag_id": "later", "max_active_runs": 1})
            await trigger(st.engine, "later", run_id="one")
            await trigger(st.engine, "later", run_id="two")
            await st.tick(periodic=True)
            answer = await command(st, "two", "clear", {"failed_only": True})
            assert answer["error"] == "run 'two' has not started yet: it has no task instances"

    asyncio.run(main())


def test_mark_success_releases_downstream_as_if_the_task_succeeded(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, CHAIN)
            first = st.key("chain", run, "a")
            st.report(first, "running")
            await st.tick()
            answer = await command(st, run, "mark", {"task_id": "a", "state": "success"})
            assert answer == {"error": None, "tasks": ["a"], "marked": "success"}
            tasks = await st.tasks(run)
            assert tasks["a"] == ("success", "marked success by ops")
            assert tasks["b"][0] == "queued"  # in the same step
            assert await tries(st, run, "a") in ([(1, "cancelling")], [(1, "cancelled")])  # killed beside the loop
            again = await command(st, run, "mark", {"task_id": "a", "state": "success"})
            assert again["tasks"] == []  # already so: unchanged

    asyncio.run(main())


def test_mark_success_of_a_failed_task_redecides_what_its_failure_decided(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "rules", "tasks": [
                container("a"), container("b", "a"), container("c", "b"),
                container("alert", "a", trigger_rule="one_failed")]})
            st.finish("rules", run, "a", "failed")
            await st.tick()
            st.finish("rules", run, "alert")
            await st.tick()
            assert await st.run(run) == ("failed", "task 'a' failed: exit code 1")
            answer = await command(st, run, "mark", {"task_id": "a", "state": "success"})
            assert answer["tasks"] == ["a"]
            tasks = await st.tasks(run)
            # b and c were upstream_failed (never ran): decided again; the alert ran: kept.
            assert tasks["b"][0] == "queued" and tasks["c"][0] == "pending" and tasks["alert"][0] == "success"
            assert await st.run(run) == ("running", None)
            st.finish("rules", run, "b")
            await st.tick()
            st.finish("rules", run, "c")
            await st.tick()
            assert await st.run(run) == ("success", None)

    asyncio.run(main())


def test_mark_failed_dooms_downstream_and_ends_the_run(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, CHAIN)
            answer = await command(st, run, "mark", {"task_id": "a", "state": "failed"})
            assert answer["tasks"] == ["a"]
            tasks = await st.tasks(run)
            assert tasks["a"] == ("failed", "marked failed by ops")
            assert tasks["b"][0] == tasks["c"][0] == "upstream_failed"
            assert await st.run(run) == ("failed", "task 'a' failed: marked failed by ops")

    asyncio.run(main())


def test_a_command_is_applied_once_and_only_under_the_newest_term(settings: Settings) -> None:
    """A stale leader's step commits nothing: the command stays pending for the newest term."""
    async def main() -> None:
        async with stepper(settings, term=1) as old:
            run = await started(old, CHAIN)
            [(run_pk,)] = await rows(old.engine, "SELECT id FROM dag_runs WHERE run_id = :r", r=run)
            async with old.engine.begin() as conn:
                command_id = await commands.create_command(conn, run_pk=run_pk, dag_id="chain", kind="mark",
                                                                body={"task_id": "a", "state": "success"},
                                                                requested_by="ops")
            async with stepper(settings, term=2, engine=old.engine) as new:
                try:
                    await old.tick(periodic=True)
                except Exception as exc:  # FencedOut: the old term cannot write any more
                    assert type(exc).__name__ == "FencedOut"
                [(applied, term)] = await rows(old.engine, "SELECT applied_at, term FROM run_commands WHERE id = :i",
                                               i=command_id)
                assert applied is None and term is None
                await new.tick(periodic=True)
                [(applied, term)] = await rows(old.engine, "SELECT applied_at, term FROM run_commands WHERE id = :i",
                                               i=command_id)
                assert applied is not None and term == 2
                await new.tick(periodic=True)  # applied once: nothing more happens
                assert (await new.tasks(run))["a"] == ("success", "marked success by ops")

    asyncio.run(main())


def test_mark_run_failed_fails_running_tasks_and_skips_the_rest(settings: Settings) -> None:
    """Airflow's mark run failed: queued/running → failed (tries killed), other unfinished → skipped."""
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, CHAIN)
            first = st.key("chain", run, "a")
            st.report(first, "running")
            await st.tick()
            answer = await command(st, run, "mark_run", {"state": "failed"})
            assert answer == {"error": None, "tasks": ["a", "b", "c"], "marked": "failed"}
            assert {t: s for t, (s, _) in (await st.tasks(run)).items()} == {
                "a": "failed", "b": "skipped", "c": "skipped"}
            assert await st.run(run) == ("failed", "run marked failed by ops")
            assert (await tries(st, run, "a"))[0][1] in ("cancelling", "cancelled")

    asyncio.run(main())


def test_mark_run_success_makes_every_task_succeed(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, CHAIN)
            st.finish("chain", run, "a", "failed")
            await st.tick()
            st.finish("chain", run, "a", "failed")
            await st.tick()
            assert (await st.run(run))[0] == "failed"
            answer = await command(st, run, "mark_run", {"state": "success"})
            assert answer["tasks"] == ["a", "b", "c"]
            assert {s for s, _ in (await st.tasks(run)).values()} == {"success"}
            assert await st.run(run) == ("success", None)
            await st.tick(periodic=True)
            assert await st.run(run) == ("success", None)  # nothing reopens it

    asyncio.run(main())
