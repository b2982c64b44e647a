"""The run's reason names the failure that decided its state (ADR 0014, decision 7).

A failed leaf; for an ``upstream_failed`` leaf, its earliest-ended failed ancestor; never a
failure that a leaf which succeeded (an ``all_done`` cleanup) already handled — even when that
failure ended first, which is what the reason named before.
"""

from __future__ import annotations

import asyncio
from typing import Any

from leoflow.settings import Settings
from tests.scheduler.harness import apply, trigger
from tests.scheduler.stepper import Stepper, container, stepper


async def started(st: Stepper, spec: dict[str, Any]) -> str:
    await apply(st.engine, spec)
    run_id = await trigger(st.engine, str(spec["dag_id"]))
    await st.tick(periodic=True)
    return run_id


def test_a_failure_a_cleanup_handled_is_not_the_reason(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "handled", "tasks": [
                container("w"), container("cleanup", "w", trigger_rule="all_done"), container("c")]})
            st.finish("handled", run, "w", "failed", reason="disk full")
            await st.tick()
            st.finish("handled", run, "cleanup")
            await st.tick()
            st.finish("handled", run, "c", "failed", reason="exit code 4", seconds=10)
            await st.tick()
            assert await st.run(run) == ("failed", "task 'c' failed: exit code 4")

    asyncio.run(main())


def test_an_upstream_failed_leaf_names_its_earliest_failed_ancestor(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "ancestor", "tasks": [
                container("w"), container("cleanup", "w", trigger_rule="all_done"),
                container("x"), container("mid", "x"), container("y", "mid"),
                container("z"), container("y2", "z")]})
            st.finish("ancestor", run, "w", "failed", reason="handled early")
            await st.tick()
            st.finish("ancestor", run, "cleanup")
            await st.tick()
            st.finish("ancestor", run, "x", "failed", reason="the one", seconds=10)
            await st.tick()
            st.finish("ancestor", run, "z", "failed", reason="a later one", seconds=20)
            await st.tick()
            tasks = await st.tasks(run)
            assert tasks["y"][0] == "upstream_failed" and tasks["y2"][0] == "upstream_failed"
            assert await st.run(run) == ("failed", "task 'x' failed: the one")

    asyncio.run(main())


def test_a_failed_leaf_is_named_when_it_ended_before_any_ancestor_failure(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "leaf-first", "tasks": [
                container("leaf"), container("x"), container("y", "x")]})
            st.finish("leaf-first", run, "leaf", "failed", reason="first")
            await st.tick()
            st.finish("leaf-first", run, "x", "failed", reason="second", seconds=10)
            await st.tick()
            assert await st.run(run) == ("failed", "task 'leaf' failed: first")

    asyncio.run(main())
