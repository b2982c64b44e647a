"""Finishing runs is a probe per run under the plans PostgreSQL really picks (issue 45).

At a boundary of 10,000 DAGs, the statement that ends runs whose tasks are all final took up to
537 ms per 500 runs, two-thirds of the database's time: statistics taken while the partial index
of active task instances was empty (a new install's first busy minute, every boundary's first
seconds) made its ``NOT EXISTS`` a scan of that whole index per run, and the update found each run
again by id and state on ``ix_dag_runs_active``, an index that leads with ``dag_id``, walking it per
run. The executed plans (auto_explain, as in ``test_plan_work``) must show a probe by run into the
active index and the run's row taken by its address.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from leoflow.settings import Settings
from tests.scheduler.harness import apply, trigger
from tests.scheduler.stepper import container
from tests.scheduler.test_plan_work import explained_stepper, plan_nodes

RUNS = 8


def is_finish(plan: dict[str, Any]) -> bool:
    return any(n.get("CTE Name") == "failing" for n in plan_nodes(plan))


@pytest.mark.parametrize("statistics", ["fresh", "analyzed empty"])
def test_finishing_runs_probes_each_run_whatever_the_statistics(settings: Settings, statistics: str) -> None:
    async def main() -> list[dict[str, Any]]:
        plans: list[dict[str, Any]] = []
        async with explained_stepper(settings, plans, "wide", 50) as st:
            if statistics == "analyzed empty":
                await st.sql("ANALYZE dag_runs")
                await st.sql("ANALYZE task_instances")
            await apply(st.engine, {"dag_id": "single", "tasks": [container("only")]})
            for _ in range(RUNS):  # runs with many active task instances beside the ones that end
                await trigger(st.engine, "wide")
            ending = [await trigger(st.engine, "single") for _ in range(RUNS)]
            await st.tick(periodic=True)
            for run in ending:
                st.finish("single", run, "only")
            plans.clear()
            await st.tick()
            assert {(await st.run(run))[0] for run in ending} == {"success"}
            return [p for p in plans if is_finish(p)]

    finishes = asyncio.run(main())
    assert finishes, "no statement finished the runs"
    for plan in finishes:
        nodes = list(plan_nodes(plan))
        active = [n for n in nodes if n.get("Index Name") == "ix_task_instances_run_active"]
        assert active, "the active task instances were not read through their index"
        for scan in active:
            assert "run_pk" in scan.get("Index Cond", ""), f"a scan of the whole active index per run: {scan}"
        for scan in nodes:  # found again per run by id and state alone, it walked that index each time
            if scan.get("Index Name") == "ix_dag_runs_active" and float(scan.get("Actual Loops", 1)) > 1:
                assert "dag_id" in scan.get("Index Cond", ""), f"ix_dag_runs_active walked per run: {scan}"
