"""Issue 21: the hot path "try reported → downstream queued → handed to the executor" costs a
fixed, small number of round trips, whatever the batch's width, and an idle tick costs none.

The scheduler is driven one tick at a time (:mod:`tests.scheduler.stepper`) and every statement
its engine sends is counted (SQLAlchemy's ``before_cursor_execute``), with every transaction
(``commit``). The budgets are today's counts: a change that adds a round trip to the hot path
fails here and has to say why, and a statement that stopped being batched (one per task) shows
as a count that grows with the fan-out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.settings import Settings
from tests.scheduler.harness import apply, trigger
from tests.scheduler.stepper import Stepper, container, stepper

#: Statements of the tick that applies an upstream's success and queues its downstream: the
#: fencing check, the reports' compare-and-set, the downstream's counters with their queueing
#: (one write: with their try rows and launch data, when the pool has room), and picking ready
#: tasks for the slots the ended upstream freed. Five before the one write (a counter update,
#: a pick, and a second update of the same rows).
HOT_STATEMENTS = 4
#: Statements of the tick that applies a run's last task and finishes the run: the fencing
#: check, the compare-and-set, picking ready tasks for the slot it freed, the completion
#: check-and-finish (the run's end in the same step), and starting the queued runs it made room for
#: (two: the read of startable runs is planned with index paths only, set by one statement before
#: it, whatever the statistics say — leoflow.db.connection.plans).
LAST_TASK_STATEMENTS = 6


@dataclass
class Trips:
    """What the scheduler's engine sent: statements (first words) and commits."""

    statements: list[str] = field(default_factory=list)
    commits: int = 0

    def reset(self) -> None:
        self.statements.clear()
        self.commits = 0


@contextlib.contextmanager
def counted(engine: AsyncEngine) -> Iterator[Trips]:
    trips = Trips()

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        trips.statements.append(" ".join(statement.split())[:90])

    def on_commit(conn: Any) -> None:
        trips.commits += 1

    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    event.listen(engine.sync_engine, "commit", on_commit)
    try:
        yield trips
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", on_execute)
        event.remove(engine.sync_engine, "commit", on_commit)


def fan(dag_id: str, width: int) -> dict[str, Any]:
    """root → ``width`` tasks in parallel → join."""
    middle = [f"m{i}" for i in range(width)]
    return {"dag_id": dag_id, "tasks": [container("root"), *(container(m, "root") for m in middle),
                                        container("join", *middle)]}


async def started(st: Stepper, spec: dict[str, Any]) -> str:
    await apply(st.engine, spec)
    run_id = await trigger(st.engine, str(spec["dag_id"]))
    await st.tick(periodic=True)  # the periodic part starts the run and queues its root
    return run_id


async def hot_tick(st: Stepper, trips: Trips, dag_id: str, run_id: str, task_id: str) -> list[str]:
    """Report ``task_id`` ended and tick once; the statements that tick sent."""
    st.finish(dag_id, run_id, task_id)
    trips.reset()
    await st.tick()
    assert trips.commits == 1, f"one transaction per hot tick, saw {trips.commits}: {trips.statements}"
    return list(trips.statements)


def test_a_success_queues_and_hands_over_its_downstream_in_one_transaction_of_four_statements(
        settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, fan("chain", 1))
            with counted(st.engine) as trips:
                sent = await hot_tick(st, trips, "chain", run, "root")
            assert [launch.key.task_id for launch in st.executor.launched] == ["root", "m0"]
            assert len(sent) <= HOT_STATEMENTS, "\n".join(sent)

    asyncio.run(main())


def test_the_hot_path_costs_the_same_statements_for_one_downstream_task_or_three_hundred(
        settings: Settings) -> None:
    """Batched: the statement count does not grow with the number of tasks a report releases."""
    async def main() -> None:
        counts = {}
        for width in (1, 300):
            async with stepper(settings, parallelism=1024) as st:
                run = await started(st, fan(f"fan{width}", width))
                with counted(st.engine) as trips:
                    sent = await hot_tick(st, trips, f"fan{width}", run, "root")
                assert len(st.executor.launched) == 1 + width
                counts[width] = sent
        assert len(counts[300]) == len(counts[1]), counts

    asyncio.run(main())


def test_the_last_task_ends_its_run_in_the_same_transaction(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, fan("last", 1))
            st.finish("last", run, "root")
            await st.tick()
            st.finish("last", run, "m0")
            await st.tick()
            with counted(st.engine) as trips:
                sent = await hot_tick(st, trips, "last", run, "join")
            assert await st.run(run) == ("success", None)
            assert len(sent) <= LAST_TASK_STATEMENTS, "\n".join(sent)

    asyncio.run(main())


def test_an_idle_tick_sends_nothing(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, fan("idle", 1))
            st.finish("idle", run, "root")
            await st.settle()
            with counted(st.engine) as trips:
                for _ in range(5):
                    assert not await st.tick()
            assert trips.statements == [] and trips.commits == 0

    asyncio.run(main())
