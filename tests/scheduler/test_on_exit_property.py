"""The exit-task rule as a property: whatever the body's and the exit tasks' outcomes, the run ends
``failed`` iff a body leaf or an exit task failed (a failed exit task dooms the ones after it), and
a skipped exit task changes nothing (ADR 0014, decision 7). Played on real PostgreSQL, with the
one-write queueing on and off (the two paths that queue the exit tasks' downstream)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from leoflow.settings import Settings
from tests.scheduler.harness import apply, trigger
from tests.scheduler.stepper import container, stepper
from tests.scheduler.test_one_write import derandomized

#: An outcome a test reports for a try: success, failure (no retry), or an exit code the task skips on.
OUTCOMES = st.sampled_from(["success", "failed", "skipped"])
scenario = st.fixed_dictionaries({
    "body": st.lists(st.sampled_from(["success", "failed"]), min_size=1, max_size=3),
    "exits": st.lists(OUTCOMES, min_size=1, max_size=3),
    "one_write": st.booleans(),
})
_names = itertools.count()


def expected(s: dict[str, Any]) -> str:
    failed = "failed" in s["body"]
    for outcome in s["exits"]:  # a chain: the first that does not succeed decides the rest
        if outcome == "failed":
            return "failed"
        if outcome == "skipped":
            break
    return "failed" if failed else "success"


async def play(settings: Settings, s: dict[str, Any]) -> tuple[str, int]:
    """The run's final state and how many exit task instances exist."""
    dag_id = f"prop-{next(_names)}"
    exits = [container(f"e{i}", *([f"e{i - 1}"] if i else []), skip_on_exit_code=[99])
             for i in range(len(s["exits"]))]
    async with stepper(settings, queue_on_count=s["one_write"]) as sp:
        await apply(sp.engine, {"dag_id": dag_id, "tasks": [container(f"b{i}") for i in range(len(s["body"]))],
                                "on_exit": exits})
        run = await trigger(sp.engine, dag_id)
        await sp.tick(periodic=True)
        for i, outcome in enumerate(s["body"]):
            sp.finish(dag_id, run, f"b{i}", outcome)  # type: ignore[arg-type]
        await sp.tick()
        for i, outcome in enumerate(s["exits"]):
            await sp.tick(periodic=True)
            if (await sp.tasks(run))[f"e{i}"][0] != "queued":
                break
            key = sp.key(dag_id, run, f"e{i}")
            sp.report(key, "running")
            sp.report(key, "success" if outcome == "success" else "failed",
                      exit_code={"success": 0, "failed": 1, "skipped": 99}[outcome])
            await sp.tick()
        state, _ = await sp.run(run)
        return state, len([t for t in await sp.tasks(run) if t.startswith("e")])


@derandomized(25)
@given(scenario)
def test_the_run_fails_iff_the_body_or_an_exit_task_failed(settings: Settings, s: dict[str, Any]) -> None:
    state, exit_rows = asyncio.run(play(settings, s))
    assert (state, exit_rows) == (expected(s), len(s["exits"])), s
