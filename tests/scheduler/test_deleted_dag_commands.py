"""A deleted DAG's runs take no commands, even ones recorded just before the delete (issue 44, item 10).

The delete cancels the DAG's runs; a clear recorded a moment earlier used to re-open its run and
run its task. The leader now refuses it (and leaves it pending while the delete is in progress).
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from leoflow.db.stores import commands as command_store
from leoflow.db.stores import dags as dag_store
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import Stepper, container, stepper

CHAIN = {"dag_id": "doomed", "tasks": [container("a"), container("b", "a")]}


async def record(st: Stepper, run_id: str, kind: str, body: dict[str, Any]) -> int:
    """Record a command as the API does (not applied yet)."""
    [(run_pk, dag_id)] = await rows(st.engine, "SELECT id, dag_id FROM dag_runs WHERE run_id = :r", r=run_id)
    async with st.engine.begin() as conn:
        return await command_store.create_command(conn, run_pk=run_pk, dag_id=dag_id, kind=kind, body=body,
                                                  requested_by="ops")


async def outcome(st: Stepper, command_id: int) -> command_store.CommandState:
    async with st.engine.connect() as conn:
        state = await command_store.command_state(conn, command_id)
    assert state is not None
    return state


async def delete(st: Stepper, dag_id: str) -> None:
    async with st.engine.begin() as conn:
        await dag_store.delete_dag(conn, dag_id)


def test_commands_recorded_before_the_delete_change_nothing(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, CHAIN)
            run = await trigger(st.engine, "doomed")
            await st.tick(periodic=True)
            st.report(st.key("doomed", run, "a"), "running")
            await st.tick()
            assert (await st.run(run))[0] == "running"
            launched = len(st.executor.launched)

            clear = await record(st, run, "clear", {"tasks": ["a"], "failed_only": False, "downstream": True})
            mark = await record(st, run, "mark", {"task_id": "a", "state": "success"})
            mark_run = await record(st, run, "mark_run", {"state": "success"})
            await delete(st, "doomed")
            assert await st.run(run) == ("cancelled", "DAG deleted")  # the delete cancels the running run
            before = await st.tasks(run)
            assert before["a"][0] == "cancelled"
            for _ in range(3):
                await st.tick(periodic=True)

            for command_id in (clear, mark, mark_run):
                state = await outcome(st, command_id)
                assert state.applied_at is not None and state.outcome is None
                assert state.error == "DAG 'doomed' was deleted: its runs take no commands"
            assert await st.run(run) == ("cancelled", "DAG deleted")
            assert await st.tasks(run) == before
            assert len(st.executor.launched) == launched  # no task ran again

    asyncio.run(main())


def test_a_command_waits_while_a_delete_holds_the_dag_and_is_then_refused(settings: Settings) -> None:
    """The leader never waits on the DAG's row (it holds the run's, which the delete wants next)."""
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, CHAIN)
            run = await trigger(st.engine, "doomed")
            await st.tick(periodic=True)
            st.finish("doomed", run, "a", "failed")
            await st.tick()
            clear = await record(st, run, "clear", {"tasks": ["a"], "failed_only": False, "downstream": True})
            async with st.engine.connect() as deleting:
                transaction = await deleting.begin()
                await deleting.execute(text("UPDATE dags SET deleted = true WHERE dag_id = 'doomed'"))
                await asyncio.wait_for(st.tick(periodic=True), 30)  # does not block on the delete
                assert (await outcome(st, clear)).applied_at is None  # left pending
                assert (await st.run(run))[0] == "failed"
                await transaction.rollback()
            await delete(st, "doomed")
            await st.tick(periodic=True)
            state = await outcome(st, clear)
            assert state.error == "DAG 'doomed' was deleted: its runs take no commands"
            assert (await st.run(run))[0] == "failed"  # a finished run is left as it ended
            assert (await st.tasks(run))["a"][0] == "failed"

    asyncio.run(main())


def test_a_live_dags_commands_still_apply(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, CHAIN)
            run = await trigger(st.engine, "doomed")
            await st.tick(periodic=True)
            st.finish("doomed", run, "a", "failed")
            await st.tick()
            clear = await record(st, run, "clear", {"tasks": ["a"], "failed_only": False, "downstream": True})
            await st.tick(periodic=True)
            state = await outcome(st, clear)
            assert state.error is None and state.outcome == {"tasks": ["a", "b"]}
            assert (await st.run(run))[0] == "running"

    asyncio.run(main())
