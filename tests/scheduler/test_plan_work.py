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
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.engine import make_async_engine
from leoflow.model.tries import TryState
from leoflow.settings import Settings
from tests.scheduler.harness import apply, trigger
from tests.scheduler.stepper import Stepper, container, stepper
from tests.scheduler.test_round_trips import fan

#: Rows a hot tick may touch per released task, over all its statements' plan nodes: about 48
#: today (each task's row is counted, read, updated, its try inserted, its run looked up), 16 per
#: doomed task. The quadratic plan made it 1,662 per task for 8 runs x 100 tasks.
WORK_PER_TASK = 100
WIDE = 100
#: Runs whose roots end in the same tick (as the benchmark's 16 runs started together do).
RUNS = 8


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``node`` and every node under it."""
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def plan_work(plan: dict[str, Any]) -> float:
    """Rows produced plus rows filtered out, times loops, over a plan tree."""
    return sum(float(n.get("Actual Loops", 1) or 1)
               * sum(float(n.get(k, 0) or 0) for k in ("Actual Rows", "Rows Removed by Filter",
                                                        "Rows Removed by Join Filter", "Rows Removed by Index Recheck"))
               for n in plan_nodes(plan))


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


@contextlib.asynccontextmanager
async def explained_stepper(settings: Settings, plans: list[dict[str, Any]], dag_id: str,
                            width: int) -> AsyncIterator[Stepper]:
    """A stepper whose statements' executed plans go into ``plans``, with the ``width``-wide fan
    ``dag_id`` applied (at most :data:`RUNS` runs at once)."""
    engine = make_async_engine(settings.database, pool_size=4, application_name="leoflow-test-plans")
    explained(engine, plans)
    try:
        async with stepper(settings, engine=engine, parallelism=4096, batch_size=4000) as st:
            await apply(st.engine, {**fan(dag_id, width), "max_active_runs": RUNS})
            yield st
    finally:
        await engine.dispose()


def finish_all(st: Stepper, dag_id: str, runs: list[str], tasks: list[str]) -> None:
    """Report ``tasks`` succeeded in each of ``runs``."""
    for run in runs:
        for task in tasks:
            st.finish(dag_id, run, task)


async def hot_tick_work(settings: Settings, width: int, root_ends: TryState) -> float:
    """Plan work of the tick that ends the roots of :data:`RUNS` runs of a ``width``-wide fan."""
    plans: list[dict[str, Any]] = []
    dag_id = f"work{width}"
    async with explained_stepper(settings, plans, dag_id, width) as st:
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


@pytest.mark.parametrize("statistics", ["fresh", "analyzed"])
def test_the_one_write_counts_a_pools_slots_in_its_index_range(settings: Settings, statistics: str) -> None:
    """A queued or running row version stays in the slot index after its task moved on, until a
    vacuum. A bitmap scan, or a scan of the whole index filtered by pool, returns every such entry
    again at every count: by the end of ``bench/scheduler.py`` the burst's count read 164,000 of
    them for 8 live ones. An index scan of the pool's range visits a dead entry once and marks it
    dead. Under a new table's statistics and after ANALYZE (a history of finished runs), the one
    write's slot count, and the round's for a full pool with a task waiting, must be such a scan."""
    async def main() -> list[dict[str, Any]]:
        plans: list[dict[str, Any]] = []
        async with explained_stepper(settings, plans, "slots", WIDE) as st:
            # A round of history: its runs finish.
            runs = [await trigger(st.engine, "slots") for _ in range(RUNS)]
            await st.tick(periodic=True)
            for tasks in ["root"], [f"m{i}" for i in range(WIDE)], ["join"]:
                finish_all(st, "slots", runs, tasks)
                await st.settle()
            if statistics == "analyzed":
                await st.sql("ANALYZE task_instances")
            # A full pool with a task waiting: the round counts its slots too.
            await st.sql("INSERT INTO pools (name, slots) VALUES ('narrow', 1)")
            await apply(st.engine, {"dag_id": "narrow", "tasks": [{**container("a"), "pool": "narrow"}]})
            for _ in range(2):
                await trigger(st.engine, "narrow")
            runs = [await trigger(st.engine, "slots") for _ in range(RUNS)]
            await st.tick(periodic=True)
            finish_all(st, "slots", runs, ["root"])
            plans.clear()
            await st.tick()
            assert len(st.executor.launched) == 2 * RUNS * (1 + WIDE) + RUNS + 1
            # Nodes that ran: the DAG limits' count, for instance, runs only when a DAG has one.
            return [n for p in plans for n in plan_nodes(p)
                    if n.get("Index Name") == "ix_task_instances_pool_slots" and n.get("Actual Loops")]

    scans = asyncio.run(main())
    assert scans, "no statement of the tick counted slots"
    assert any("waiting.name" in scan.get("Index Cond", "") for scan in scans), "the round counted no slots"
    for scan in scans:
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan") and "Index Cond" in scan, scan


def is_try_update(node: dict[str, Any]) -> bool:
    return (node.get("Node Type") == "ModifyTable" and node.get("Operation") == "Update"
            and node.get("Relation Name") == "task_tries")


@pytest.mark.parametrize("statistics", ["fresh", "analyzed"])
def test_reports_do_not_find_their_tries_through_the_live_tries_index(settings: Settings, statistics: str) -> None:
    """A step applies its reports' facts to their tries by (task instance, try number): on a table
    of any size, the unique index, one probe each. The partial index of live tries answers
    the state check too, but read through a bitmap it returns every try that was live since the
    last vacuum, dead ones included, at every step: 40,000 entries for the 8 roots of a burst part
    under ``bench/scheduler.py``."""
    async def main() -> list[str]:
        plans: list[dict[str, Any]] = []
        async with explained_stepper(settings, plans, "tries", WIDE) as st:
            runs = [await trigger(st.engine, "tries") for _ in range(RUNS)]
            await st.tick(periodic=True)
            for tasks in ["root"], [f"m{i}" for i in range(WIDE)]:
                if statistics == "analyzed":
                    await st.sql("ANALYZE task_tries")
                finish_all(st, "tries", runs, tasks)
                plans.clear()
                await st.tick()
            return [n["Index Name"] for p in plans for update in plan_nodes(p) if is_try_update(update)
                    for n in plan_nodes(update) if "Index Name" in n]

    # Which index the probes use is the planner's (on a table this small, none: a hash of it all);
    # the live tries' index must not be one.
    used = asyncio.run(main())
    assert "ix_task_tries_live" not in used, used
