"""A step takes reports only up to a row budget of fan-out (:mod:`leoflow.scheduler.fanout`).

``batch_size`` bounds the reports a step applies, not the rows they set off: before the budget,
the roots of many runs of a wide DAG ending together made one step count every child of every
run in one statement (196,000 outcomes, 308 MB of leader memory in the 1,000 x 100 benchmark).
Here the roots of :data:`RUNS` runs of a root → :data:`CHILDREN` DAG end in one tick, and every
row a step counts or marks is added up per tick: no tick may exceed the budget, every child
must be counted exactly once, and every run must finish. The same holds after a failover,
when the reports are of tries this term did not queue (their versions are read before the step).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leoflow.db.stores.runs import endings as run_endings
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.db.stores.task_instances import downstream as ti_downstream
from leoflow.db.stores.task_instances import queueing as queue_store
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.graph import DagGraph
from leoflow.model.tries import StatusUpdate, TryKey
from leoflow.scheduler.fanout import report_rows, within_budget
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import T0, Stepper, container, stepper

CHILDREN, RUNS, BATCH = 200, 10, 50


def wide(dag_id: str = "wide") -> dict[str, Any]:
    return {"dag_id": dag_id, "max_active_runs": RUNS,
            "tasks": [container("root"), *(container(f"c{i}", "root") for i in range(CHILDREN))]}


class RowsPerTick:
    """Adds up, per tick, the rows the step's counting and dooming statements were given
    (``ticks``), and the runs its run starts were given (``started``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ticks: list[int] = []
        self.started: list[int] = []
        for module, name, arg in ((ti_downstream, "count_outcomes", 1), (queue_store, "count_and_queue", 1),
                                  (ti_downstream, "mark_upstream_failed", 1),
                                  (ti_downstream, "succeed_empty_tasks", 2)):  # (conn, ids, edges, ...)
            monkeypatch.setattr(module, name, self._counting(getattr(module, name), self.ticks, arg))
        monkeypatch.setattr(run_store, "start_runs",
                            self._counting(run_store.start_runs, self.started, 1))
        #: Runs each call of fail_runs was given (a run deadline cancels each run's tasks).
        self.failed_runs: list[int] = []

        async def fail_runs(conn: Any, failures: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
            if failures:
                self.failed_runs.append(len(failures))
            return await real_fail_runs(conn, failures, *args, **kwargs)

        real_fail_runs = run_endings.fail_runs
        monkeypatch.setattr(run_endings, "fail_runs", fail_runs)

    @staticmethod
    def _counting(real: Callable[..., Awaitable[Any]], into: list[int], arg: int) -> Callable[..., Awaitable[Any]]:
        async def counting(*args: Any, **kwargs: Any) -> Any:
            if into:
                into[-1] += len(args[arg])
            return await real(*args, **kwargs)

        return counting

    async def tick_until_quiet(self, st: Stepper, limit: int = 200) -> None:
        for _ in range(limit):
            self.ticks.append(0)
            self.started.append(0)
            if not await st.tick():
                return
        raise AssertionError(f"still busy after {limit} ticks")


@pytest.mark.parametrize("inflight", [True, False], ids=["in-flight", "after-failover"])
@pytest.mark.parametrize("ending", ["success", "failed"])
def test_roots_of_many_wide_runs_ending_at_once_are_taken_within_the_budget(
        settings: Settings, monkeypatch: pytest.MonkeyPatch, ending: str, inflight: bool) -> None:
    counter = RowsPerTick(monkeypatch)

    async def main() -> None:
        async with stepper(settings, batch_size=BATCH, parallelism=RUNS * CHILDREN + RUNS) as st:
            await apply(st.engine, wide())
            runs = [await trigger(st.engine, "wide", run_id=f"r{i}") for i in range(RUNS)]
            await counter.tick_until_quiet(st)  # each run's start creates 201 task instances: one per step
            assert max(counter.started) == 1 and len(st.executor.launched) == RUNS
            counter.ticks.clear()
            if not inflight:
                st.core.inflight.clear()  # what a new leader knows of the tries it inherits
            for run in runs:
                st.finish("wide", run, "root", ending)  # type: ignore[arg-type]
            await counter.tick_until_quiet(st)
            budget = st.core.fanout_budget
            assert CHILDREN < budget < 2 * CHILDREN, "the test needs one root's fan-out to fill the budget"
            assert max(counter.ticks) <= budget, counter.ticks
            assert sum(counter.ticks) == RUNS * CHILDREN, counter.ticks
            if ending == "success":
                children = [k for k in (launch.key for launch in st.executor.launched) if k.task_id != "root"]
                assert len(children) == RUNS * CHILDREN
                for key in children:
                    st.report(key, "success")
                await counter.tick_until_quiet(st)
            states = await rows(st.engine, "SELECT state, count(*) FROM dag_runs GROUP BY state")
            assert dict(states) == {ending: RUNS}

    asyncio.run(main())


def test_empty_tasks_ready_in_many_wide_runs_at_once_release_within_the_budget(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gate`` (container) → ``fan`` (empty) → the children: the gates' successes fit one step,
    and the empty ``fan`` of every run becomes ready in it; each releases 200 children."""
    counter = RowsPerTick(monkeypatch)
    spec = {"dag_id": "gated", "max_active_runs": RUNS,
            "tasks": [container("gate"), {"id": "fan", "kind": "empty", "depends_on": ["gate"]},
                      *(container(f"c{i}", "fan") for i in range(CHILDREN))]}

    async def main() -> None:
        async with stepper(settings, batch_size=BATCH, parallelism=RUNS * CHILDREN + RUNS) as st:
            await apply(st.engine, spec)
            runs = [await trigger(st.engine, "gated", run_id=f"r{i}") for i in range(RUNS)]
            await counter.tick_until_quiet(st)
            assert len(st.executor.launched) == RUNS
            counter.ticks.clear()
            for run in runs:
                st.finish("gated", run, "gate")
            await counter.tick_until_quiet(st)
            assert max(counter.ticks) <= st.core.fanout_budget, counter.ticks
            assert sum(counter.ticks) == RUNS * (1 + CHILDREN), counter.ticks  # gate → fan, fan → children
            [(released,)] = await rows(st.engine, "SELECT count(*) FROM task_instances WHERE state = 'queued'")
            assert released == RUNS * CHILDREN

    asyncio.run(main())


@pytest.mark.parametrize("what", ["task timeouts", "run deadlines"])
def test_roots_timing_out_or_runs_expiring_together_are_handled_within_the_budget(
        settings: Settings, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    """Each root's timeout dooms 200 children; each expired run cancels its 201 tasks. Both
    parts take only what fits the budget per step, and go on at once with the rest."""
    counter = RowsPerTick(monkeypatch)

    async def main() -> None:
        async with stepper(settings, batch_size=BATCH, parallelism=RUNS * CHILDREN + RUNS) as st:
            await apply(st.engine, wide())
            runs = [await trigger(st.engine, "wide", run_id=f"r{i}") for i in range(RUNS)]
            await counter.tick_until_quiet(st)
            for run in runs:
                st.report(st.key("wide", run, "root"), "running")
            await counter.tick_until_quiet(st)
            if what == "task timeouts":
                await st.sql("UPDATE task_instances SET timeout_at = now() - interval '1 second'"
                             " WHERE task_id = 'root'")
            else:
                await st.sql("UPDATE dag_runs SET deadline_at = now() - interval '1 second'")
            counter.ticks.clear()
            counter.failed_runs.clear()
            st.core.poke()
            await counter.tick_until_quiet(st)
            budget = st.core.fanout_budget
            assert max(counter.ticks) <= budget, counter.ticks
            if what == "task timeouts":
                assert sum(counter.ticks) == RUNS * CHILDREN, counter.ticks  # every child doomed once
            else:
                assert counter.failed_runs == [1] * RUNS, counter.failed_runs  # 202 rows each: one per step
            states = await rows(st.engine, "SELECT state, count(*) FROM dag_runs GROUP BY state")
            assert dict(states) == {"failed": RUNS}

    asyncio.run(main())


GRAPH = DagGraph(1, parse_dag_spec({"dag_id": "g", "tasks": [
    container("a"), container("b", "a"), container("c", "a"), container("d", "b", "c"),
    {**container("e", "a"), "trigger_rule": "all_done"}, container("f", "e")]}))


def update(task_id: str, state: str, try_number: int = 1) -> StatusUpdate:
    return StatusUpdate(key=TryKey("g", "r", task_id, try_number), state=state, at=T0)  # type: ignore[arg-type]


def test_a_report_costs_its_own_row_plus_what_its_end_counts() -> None:
    assert report_rows(update("a", "running"), GRAPH, 1) == 1
    assert report_rows(update("a", "success"), GRAPH, 1) == 1 + 3
    assert report_rows(update("d", "success"), GRAPH, 1) == 1
    assert report_rows(update("a", "failed", 1), GRAPH, 2) == 1, "a try left: up_for_retry counts nothing"
    # a's failure dooms b, c, d (all_success) but not e (all_done): 3 marked, and at most
    # a's 3 edges plus b's, c's and d's 2 counted.
    assert report_rows(update("a", "failed", 2), GRAPH, 2) == 1 + 3 + 3 + 2
    assert report_rows(update("a", "success"), None, 1) == 1, "no graph: only the report's own row is known"


@given(st.lists(st.integers(min_value=1, max_value=1000), max_size=30), st.integers(min_value=1, max_value=3000))
def test_the_budget_takes_the_longest_prefix_that_fits_and_never_nothing(costs: Sequence[int], budget: int) -> None:
    taken = within_budget(costs, budget)
    if not costs:
        assert taken == 0
        return
    assert taken >= 1
    assert taken == 1 or sum(costs[:taken]) <= budget
    assert taken == len(costs) or sum(costs[:taken + 1]) > budget
