"""Issue 21: the hot path's statements do work linear in the batch, under the plans PostgreSQL
really picks (a fresh table's statistics, as in a new install's first minute and in the benchmark).

A statement whose plan joins two of its own CTEs was run as a nested loop (the planner assumes a
CTE yields one row): ``queue_picked`` compared 1,568 new tries with 1,568 queued task instances
one by one, 2.4 million comparisons and 500 ms per scheduler step under ``bench/scheduler.py``.
A round-trip count cannot see that, and a wall-clock assertion would be noise; the executed plan
can. Each connection of the scheduler's engine loads ``auto_explain`` (``log_analyze``, JSON,
sent to the client as a NOTICE), and the test sums, over every node of every statement of one
hot tick, the rows the node produced and the rows its filters removed (times its loops): the
work. Releasing 1 and then 100 downstream tasks in each of 8 runs must cost at most a constant per
task more.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.engine import make_async_engine
from leoflow.model.tries import TryState
from leoflow.settings import Settings
from tests.scheduler.harness import apply, trigger
from tests.scheduler.stepper import stepper
from tests.scheduler.test_round_trips import fan

#: Rows a hot tick may touch per released task, over all its statements' plan nodes: about 48
#: today (each task's row is counted, read, updated, its try inserted, its run looked up), 16 per
#: doomed task. The quadratic plan made it 1,662 per task for 8 runs x 100 tasks.
WORK_PER_TASK = 100
WIDE = 100
#: Runs whose roots end in the same tick (as the benchmark's 16 runs started together do).
RUNS = 8


def plan_work(node: dict[str, Any]) -> float:
    """Rows produced plus rows filtered out, times loops, over a plan tree."""
    loops = float(node.get("Actual Loops", 1) or 1)
    own = sum(float(node.get(k, 0) or 0) for k in ("Actual Rows", "Rows Removed by Filter",
                                                   "Rows Removed by Join Filter", "Rows Removed by Index Recheck"))
    return own * loops + sum(plan_work(child) for child in node.get("Plans", []))


def explained(engine: AsyncEngine, plans: list[dict[str, Any]]) -> None:
    """Every new connection of ``engine`` sends each statement's executed plan as a NOTICE into ``plans``."""

    def on_notice(diag: Any) -> None:
        message = diag.message_primary or ""
        if "plan:" in message:
            plans.append(json.loads(message.split("plan:", 1)[1])["Plan"])

    def on_connect(dbapi_conn: Any, record: Any) -> None:
        cursor = dbapi_conn.cursor()
        for statement in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                          "SET auto_explain.log_analyze = on", "SET auto_explain.log_format = 'json'",
                          "SET auto_explain.log_nested_statements = on", "SET auto_explain.log_level = 'notice'"):
            cursor.execute(statement)
        cursor.close()
        dbapi_conn.driver_connection.add_notice_handler(on_notice)

    event.listen(engine.sync_engine, "connect", on_connect)


async def hot_tick_work(settings: Settings, width: int, root_ends: TryState) -> float:
    """Plan work of the tick that ends the roots of :data:`RUNS` runs of a ``width``-wide fan."""
    plans: list[dict[str, Any]] = []
    engine = make_async_engine(settings.database, pool_size=4, application_name="leoflow-test-plans")
    explained(engine, plans)
    dag_id = f"work{width}"
    try:
        async with stepper(settings, engine=engine, parallelism=4096, batch_size=4000) as st:
            await apply(st.engine, {**fan(dag_id, width), "max_active_runs": RUNS})
            runs = [await trigger(st.engine, dag_id) for _ in range(RUNS)]
            await st.tick(periodic=True)
            for run in runs:
                st.finish(dag_id, run, "root", root_ends)
            plans.clear()
            await st.tick()
            if root_ends == "success":
                assert len(st.executor.launched) == RUNS * (1 + width)
            else:
                assert {(await st.run(run))[0] for run in runs} == {"failed"}
            assert plans, "auto_explain sent no plan"
            return sum(plan_work(p) for p in plans)
    finally:
        await engine.dispose()


@pytest.mark.parametrize("root_ends", ["success", "failed"])
def test_a_hot_tick_does_work_linear_in_the_tasks_it_releases_or_dooms(settings: Settings, root_ends: TryState) -> None:
    """Success: the downstream counted, picked, queued and handed over; failure: every descendant
    ``upstream_failed`` and the run failed, in the same step."""
    async def main() -> None:
        narrow = await hot_tick_work(settings, 1, root_ends)
        wide = await hot_tick_work(settings, WIDE, root_ends)
        per_task = (wide - narrow) / (RUNS * (WIDE - 1))
        assert per_task <= WORK_PER_TASK, f"{per_task:.0f} rows of plan work per released task (1: {narrow:.0f}, " \
                                          f"{WIDE}: {wide:.0f})"

    asyncio.run(main())
