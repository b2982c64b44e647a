"""Mapped tasks and conditions as a property: a random list → map (maybe with a ``when``) → combine
pipeline, with random instance outcomes, ends the same way — every task instance in the same state,
the run in the same state — whether the reports arrive in one scheduler step, or one per step with
a leader change in the middle (ADR 0014, decisions 3 and 4). Played on real PostgreSQL.

The leader change drops the first leader's in-flight map, so the second folds the remaining
reports through the slow path that finds each instance by its key (map index included).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from leoflow.model.tries import StatusUpdate
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import Stepper, container, stepper
from tests.scheduler.test_one_write import derandomized

scenario = st.fixed_dictionaries({
    "outcomes": st.lists(st.sampled_from(["success", "failed"]), min_size=0, max_size=5),
    "threshold": st.one_of(st.none(), st.integers(min_value=0, max_value=4)),
    "rule": st.sampled_from(["all_success", "all_done", "one_failed", "none_failed"]),
    "max_parallel": st.one_of(st.none(), st.integers(min_value=1, max_value=3)),
})
_names = itertools.count()


def spec(dag_id: str, s: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if s["threshold"] is not None:
        extra["when"] = f"tasks.list.outputs.n > {s['threshold']}"
    if s["max_parallel"] is not None:
        extra["max_parallel"] = s["max_parallel"]
    return {"dag_id": dag_id, "tasks": [
        container("list", outputs={"parts": {"type": "array"}, "n": {"type": "integer"}}),
        container("process", "list", map_over="{{ tasks.list.outputs.parts }}", args=["{{ item }}"],
                  outputs={"v": {"type": "integer"}}, **extra),
        container("combine", "process", trigger_rule=s["rule"], args=["{{ tasks.process.outputs.v }}"])]}


def report(sp: Stepper, key: Any, state: str, outputs: dict[str, Any] | None = None) -> None:
    sp.core.inbox.append(StatusUpdate(key=key, state="running", at=sp.clock.now()))
    sp.core.inbox.append(StatusUpdate(key=key, state=state, at=sp.clock.now() + timedelta(seconds=1),  # type: ignore[arg-type]
                                      exit_code=0 if state == "success" else 1,
                                      outputs=None if outputs is None else json.dumps(outputs).encode()))


async def play(settings: Settings, s: dict[str, Any], *, split: bool) -> tuple[str, list[tuple[str, int, str]]]:
    dag_id = f"mprop-{next(_names)}"
    outcomes: list[str] = s["outcomes"]
    sp_cm = stepper(settings, term=1)
    sp = await sp_cm.__aenter__()
    try:
        await apply(sp.engine, spec(dag_id, s))
        run = await trigger(sp.engine, dag_id)
        await sp.tick(periodic=True)
        report(sp, sp.key(dag_id, run, "list"), "success", {"parts": list(range(len(outcomes))), "n": len(outcomes)})
        await sp.settle()
        done: set[int] = set()
        term = 1
        while len(done) < len(outcomes):
            queued = {la.key.map_index: la.key for la in sp.executor.launched
                      if la.key.run_id == run and la.key.task_id == "process" and la.key.map_index not in done}
            if not queued:
                break  # the condition skipped it, or nothing more will run
            batch = sorted(queued)[:1] if split else sorted(queued)
            for i in batch:
                outputs = {"v": i} if outcomes[i] == "success" else None
                report(sp, queued[i], outcomes[i], outputs)
                done.add(i)
            if split and len(done) == len(outcomes) // 2 and term == 1:  # a leader change mid-way
                await sp_cm.__aexit__(None, None, None)
                term = 2
                launched = sp.executor.launched
                sp_cm = stepper(settings, term=term)
                sp = await sp_cm.__aenter__()
                sp.executor.launched.extend(launched)
                for i in batch:  # the new leader receives them again (executors re-report on adoption)
                    outputs = {"v": i} if outcomes[i] == "success" else None
                    report(sp, queued[i], outcomes[i], outputs)
                await sp.tick(periodic=True)
            await sp.settle()
        await sp.settle()
        combine = [la.key for la in sp.executor.launched if la.key.run_id == run and la.key.task_id == "combine"]
        if combine and (await sp.tasks(run))["combine"][0] == "queued":
            report(sp, combine[-1], "success")
            await sp.settle()
        [(state,)] = await rows(sp.engine, "SELECT state FROM dag_runs WHERE run_id = :r", r=run)
        found = await rows(sp.engine, "SELECT ti.task_id, ti.map_index, ti.state FROM task_instances ti "
                           "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r ORDER BY 1, 2", r=run)
        return str(state), [(str(t), int(i), str(st_)) for t, i, st_ in found]
    finally:
        await sp_cm.__aexit__(None, None, None)


@derandomized(12)
@given(s=scenario)
def test_a_mapped_pipeline_ends_the_same_in_one_step_or_split_across_a_failover(
        settings: Settings, s: dict[str, Any]) -> None:
    together = asyncio.run(play(settings, s, split=False))
    apart = asyncio.run(play(settings, s, split=True))
    assert together == apart, s
    state, instances = together
    assert state in ("success", "failed"), (s, together)
    mapped = [st_ for t, i, st_ in instances if t == "process"]
    skipped_by_condition = s["threshold"] is not None and not len(s["outcomes"]) > s["threshold"]
    if skipped_by_condition or not s["outcomes"]:
        assert mapped == ["skipped"], (s, together)
    else:
        assert mapped == s["outcomes"], (s, together)
