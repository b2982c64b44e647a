"""A clear with ``downstream`` on a 10,000-task chain, applied by the leader (issue 44, item 9).

The descendants of every chosen task were computed one task at a time and cached: 7.9 s of the
leader's CPU. And the recount of the run's upstream counters after the clear joined a per-task
tally to the run's rows with a plan that re-read the tally for every row (108 s, past the
statement timeout: the leader's step failed on every tick). The leader's whole step for the clear
is measured here (~0.3 s, mostly reading and deciding the 10,000 pending rows; the descendants take
milliseconds); the bound is generous.
"""

from __future__ import annotations

import asyncio
import time

from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import container, stepper
from tests.scheduler.test_deleted_dag_commands import outcome, record

LENGTH = 10_000


def test_clear_downstream_of_a_failed_10000_task_chain(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            tasks = [container(f"t{i:05d}", *([f"t{i - 1:05d}"] if i else [])) for i in range(LENGTH)]
            await apply(st.engine, {"dag_id": "long", "tasks": tasks})
            run = await trigger(st.engine, "long")
            await st.tick(periodic=True)
            st.finish("long", run, "t00000", "failed")
            await st.settle()
            assert (await st.run(run))[0] == "failed"
            clear = await record(st, run, "clear", {"tasks": None, "failed_only": True, "downstream": True})
            started = time.process_time()
            await st.tick(periodic=True)
            spent = time.process_time() - started
            state = await outcome(st, clear)
            assert state.error is None and state.outcome is not None
            assert state.outcome["tasks"] == [f"t{i:05d}" for i in range(LENGTH)]
            assert spent < 2.0, f"{spent:.3f} s of the leader's CPU for one clear (it was 7.9 s)"
            assert (await st.run(run))[0] == "running"
            [(queued,)] = await rows(st.engine, "SELECT count(*) FROM task_instances WHERE state = 'queued'")
            assert queued == 1  # t00000 again; the rest wait for it

    asyncio.run(main())
