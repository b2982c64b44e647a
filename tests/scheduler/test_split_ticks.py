"""Issue 21 / ADR 0012: a tick whose reports fan out widely applies them in concurrent steps split by run.

Each part is a whole step on its own connection; what must see the whole tick (the round over
every pool, run starts, the tries to kill) runs after the parts in one ordinary step. The
property test plays random scenarios twice, split and not split, each in a fresh database, and
compares every task's state and try count; the cases by hand hold what a split could break:
a pool admitted twice by two parts that cannot see each other, a failing part taking the other
down with it, and a newer term.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from leoflow.db.stores.task_instances import queueing as queue_store
from leoflow.errors import FencedOut
from leoflow.scheduler import shards
from leoflow.scheduler.fanout import Fanout, report_queues
from leoflow.settings import Settings
from tests.harness.postgres import PostgresServer
from tests.scheduler.harness import apply, rows, set_term, trigger
from tests.scheduler.stepper import Stepper, container, stepper
from tests.scheduler.test_one_write import assert_same_outcome, child_spec, derandomized, fan_out


def split_always(st: Stepper) -> Counter[str]:
    """Split every tick with reports of two runs or more; returns a counter of the split ticks."""
    st.core.shard_min = 1
    seen: Counter[str] = Counter()
    split = st.core._split_tick

    async def counted(parts: Any, periodic: bool) -> bool:
        seen["ticks"] += 1
        seen["parts"] += len(parts)
        return await split(parts, periodic)

    st.core._split_tick = counted  # type: ignore[method-assign]
    return seen


async def queued_in(st: Stepper, pool: str) -> list[tuple[str, str]]:
    found = await rows(st.engine, "SELECT r.run_id, ti.task_id FROM task_instances ti JOIN dag_runs r "
                       "ON r.id = ti.run_pk WHERE ti.state = 'queued' AND ti.pool = :p ORDER BY 1, 2", p=pool)
    return [(r, t) for r, t in found]


def test_two_parts_cannot_admit_a_pool_twice(settings: Settings) -> None:
    """Two runs' roots end in one tick; each run has 3 children in a 3-slot pool. Each part sees
    the pool free (the other's queueing is not in its snapshot): without the reservation each
    would queue its 3. The pool gets 3, the 3 of highest priority, as unsplit."""
    async def main() -> None:
        async with stepper(settings) as st:
            seen = split_always(st)
            await st.sql("INSERT INTO pools (name, slots) VALUES ('gpu', 3)")
            children = [{**container(f"c{i}"), "pool": "gpu", "priority": p} for i, p in enumerate((1, 5, 3))]
            await apply(st.engine, fan_out("fan", children))
            first, second = await trigger(st.engine, "fan"), await trigger(st.engine, "fan")
            await st.tick(periodic=True)
            st.finish("fan", first, "root")
            st.finish("fan", second, "root")
            await st.tick()
            assert seen == {"ticks": 1, "parts": 2}
            assert await queued_in(st, "gpu") == sorted([(first, "c1"), (second, "c1"), (first, "c2")])

    asyncio.run(main())


def fan_in(slots: int) -> dict[str, Any]:
    """``root`` → 4 middles → ``join``, the join alone in a pool of ``slots``."""
    middles = [container(f"m{i}", "root") for i in range(4)]
    return {"dag_id": "fanin", "tasks": [container("root"), *middles,
                                         container("join", *(m["id"] for m in middles), pool="joins")]}


async def middles_end_in_one_tick(st: Stepper, slots: int) -> tuple[list[str], list[int]]:
    """Two fan_in runs whose middles all succeed in one split tick; returns the runs and the
    launches each step of that tick handed over (its parts', then the follow-up's)."""
    await st.sql("INSERT INTO pools (name, slots) VALUES ('joins', :n)", n=slots)
    await apply(st.engine, fan_in(slots))
    runs = [await trigger(st.engine, "fanin") for _ in range(2)]
    await st.tick(periodic=True)
    for run in runs:
        st.finish("fanin", run, "root")
    await st.tick()
    for run in runs:
        for i in range(4):
            st.finish("fanin", run, f"m{i}")
    launches: list[int] = []
    committed = st.core._committed

    async def counted(step: Any) -> None:
        launches.append(len(step.launches))
        await committed(step)

    st.core._committed = counted  # type: ignore[method-assign]
    await st.tick()
    return runs, launches


def test_a_part_queues_the_join_its_successes_release(settings: Settings) -> None:
    """Each part holds one run's 4 middle successes: 8 rows of fan-out, but one join to queue.
    So each part reserves 1 slot of the 3-slot pool for the other, and queues its own join in the
    write that counts it, not in the follow-up step after both parts (reserving the other part's
    rows, 8, left no room: every join waited for the round). Three slots, not two: a part that
    commits first is counted twice by the other, in use and reserved (safe, and rare to matter)."""
    async def main() -> None:
        async with stepper(settings) as st:
            seen = split_always(st)
            runs, launches = await middles_end_in_one_tick(st, slots=3)
            assert seen == {"ticks": 2, "parts": 4}
            assert launches == [1, 1, 0], "each part hands over its own join; the follow-up none"
            assert await queued_in(st, "joins") == sorted((run, "join") for run in runs)

    asyncio.run(main())


def test_the_joins_of_two_parts_cannot_overfill_their_pool(settings: Settings) -> None:
    """As above with a 1-slot pool: each part keeps the slot for the other's join, so neither
    queues; the follow-up's round queues one join, the older run's, as one step would."""
    async def main() -> None:
        async with stepper(settings) as st:
            split_always(st)
            runs, launches = await middles_end_in_one_tick(st, slots=1)
            assert launches == [0, 0, 1]
            assert await queued_in(st, "joins") == [(runs[0], "join")]

    asyncio.run(main())


def test_a_failing_part_is_isolated_and_the_other_part_commits(settings: Settings) -> None:
    """One run's task cannot be queued (a hand edit overflows its try counter): its part fails,
    the other part's run goes on, and only that task fails, after bisection."""
    async def main() -> None:
        async with stepper(settings) as st:
            seen = split_always(st)
            await apply(st.engine, fan_out("wide", [container(f"t{i:02d}") for i in range(10)]))
            healthy, damaged = await trigger(st.engine, "wide"), await trigger(st.engine, "wide")
            await st.tick(periodic=True)
            await st.sql("UPDATE task_instances ti SET try_number = 2147483647 FROM dag_runs r "
                         "WHERE r.id = ti.run_pk AND r.run_id = :r AND ti.task_id = 't07'", r=damaged)
            st.finish("wide", healthy, "root")
            st.finish("wide", damaged, "root")
            await st.tick()
            assert seen == {"ticks": 1, "parts": 2}
            launched = Counter((launch.key.run_id, launch.key.task_id) for launch in st.executor.launched)
            assert all(n == 1 for n in launched.values()), launched
            assert {t for r, t in launched if r == healthy} == {"root", *(f"t{i:02d}" for i in range(10))}
            assert {t for r, t in launched if r == damaged} == {"root", *(f"t{i:02d}" for i in range(10) if i != 7)}
            state, reason = (await st.tasks(damaged))["t07"]
            assert state == "failed" and reason is not None and "ValueRejected" in reason

    asyncio.run(main())


def test_a_newer_term_fails_every_part_and_keeps_every_report(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            seen = split_always(st)
            await apply(st.engine, fan_out("fan", [container(f"c{i}") for i in range(4)]))
            runs = [await trigger(st.engine, "fan") for _ in range(3)]
            await st.tick(periodic=True)
            for run in runs:
                st.finish("fan", run, "root")
            reports = list(st.core.inbox)
            await set_term(st.engine, settings.cluster.name, 2)
            with pytest.raises(FencedOut):
                await st.tick()
            assert seen["ticks"] == 1 and seen["parts"] == 2
            kept = list(st.core.inbox)
            assert sorted(kept, key=reports.index) == reports  # every report back, none twice
            for run in runs:  # each try's reports still in their order
                assert [u.state for u in kept if u.key.run_id == run] == ["running", "success"]
            assert await rows(st.engine, "SELECT count(*) FROM task_instances WHERE state <> 'pending' "
                              "AND task_id <> 'root'") == [(0,)]

    asyncio.run(main())


def test_a_run_is_terminal_in_the_split_tick_that_ends_it(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            seen = split_always(st)
            await apply(st.engine, {"dag_id": "pair", "tasks": [container("a"), container("b", "a")]})
            runs = [await trigger(st.engine, "pair") for _ in range(4)]
            await st.tick(periodic=True)
            for run in runs:
                st.finish("pair", run, "a")
            await st.tick()
            for i, run in enumerate(runs):
                st.finish("pair", run, "b", "success" if i % 2 else "failed")
            await st.tick()
            assert seen["ticks"] == 2
            assert [(await st.run(run))[0] for run in runs] == ["failed", "success", "failed", "success"]

    asyncio.run(main())


# --------------------------------------------------------------------------- same decisions as one step

child = st.fixed_dictionaries({
    "pool": st.sampled_from([None, "gpu"]), "priority": st.integers(0, 3),
    "rule": st.sampled_from(["all_success", "all_done", "one_failed", "none_failed"]), "empty": st.booleans()})
scenario = st.fixed_dictionaries({
    "parallelism": st.integers(1, 8), "gpu_slots": st.integers(0, 4),
    "children": st.lists(child, min_size=1, max_size=5),
    "runs": st.lists(st.sampled_from(["success", "failed"]), min_size=2, max_size=4),
    "max_active_tasks": st.none() | st.integers(1, 6),
    "blockers": st.lists(st.tuples(st.sampled_from([None, "gpu"]), st.integers(0, 3)), max_size=3)})


async def outcomes(st: Stepper) -> dict[tuple[str, str], tuple[str, int]]:
    """Every task instance: (run, task) -> (state, tries), what a split and an unsplit play compare."""
    found = await rows(st.engine, """
        SELECT r.run_id, ti.task_id, ti.state, (SELECT count(*) FROM task_tries tt WHERE tt.task_instance_id = ti.id)
        FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk""")
    return {(r, t): (state, n) for r, t, state, n in found}


async def play(settings: Settings, s: dict[str, Any], *, split: bool) -> dict[tuple[str, str], tuple[str, int]]:
    """The task instances after the tick that ends every run's root: (run, task) -> (state, tries)."""
    async with stepper(settings, parallelism=s["parallelism"]) as st:
        seen = split_always(st) if split else None
        if not split:
            st.core.step_shards = 1
        await st.sql("INSERT INTO pools (name, slots) VALUES ('gpu', :n)", n=s["gpu_slots"])
        blockers = [container(f"b{i}", priority=priority, **({"pool": pool} if pool else {}))
                    for i, (pool, priority) in enumerate(s["blockers"])]
        if blockers:
            await apply(st.engine, {"dag_id": "blockers", "tasks": blockers})
            await trigger(st.engine, "blockers", run_id="blocking")
        limit = {"max_active_tasks": s["max_active_tasks"]} if s["max_active_tasks"] else {}
        await apply(st.engine, fan_out("fan", [child_spec(i, c) for i, c in enumerate(s["children"])], **limit))
        runs = [await trigger(st.engine, "fan", run_id=f"run-{i}") for i in range(len(s["runs"]))]
        await st.tick(periodic=True)
        for run, end in zip(runs, s["runs"], strict=True):
            if ("fan", run, "root") in {(k.key.dag_id, k.key.run_id, k.key.task_id) for k in st.executor.launched}:
                st.finish("fan", run, "root", end)
        await st.tick()
        if seen is not None and len(st.executor.launched) > 0:
            assert seen["ticks"] <= 1
        return await outcomes(st)


# Derandomized: the same 30 scenarios every run (each costs two databases, ~1 s).
@derandomized(30)
@given(scenario)
def test_a_split_tick_decides_what_one_step_would_have(pg_server: PostgresServer, settings: Settings,
                                                      s: dict[str, Any]) -> None:
    assert_same_outcome(pg_server, settings, lambda on: play(on, s, split=True),
                        lambda off: play(off, s, split=False))


@contextlib.contextmanager
def counting_together(parties: int = 2, patience: float = 2.0) -> Iterator[None]:
    """Hold each one-write statement until ``parties`` are waiting (or ``patience`` passes), so
    the parts of a split tick run theirs side by side, neither seeing what the other queues:
    the race the reservation is for, made to happen rather than left to the event loop."""
    original = queue_store.count_and_queue
    waiting: list[asyncio.Event] = []

    async def together(*args: Any, **kwargs: Any) -> Any:
        arrived = asyncio.Event()
        waiting.append(arrived)
        if len(waiting) >= parties:
            for event in waiting:
                event.set()
            waiting.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(arrived.wait(), patience)
        if arrived in waiting:
            waiting.remove(arrived)
        return await original(*args, **kwargs)

    queue_store.count_and_queue = together
    try:
        yield
    finally:
        queue_store.count_and_queue = original


fan_in_scenario = st.fixed_dictionaries({
    "middles": st.integers(1, 3), "join_slots": st.integers(1, 3), "blockers": st.integers(0, 1),
    "priorities": st.tuples(st.integers(0, 3), st.integers(0, 3)),
    # per run: does one of its middles fail (a failure dooms the join: mostly not)
    "runs": st.lists(st.sampled_from([False, False, True]), min_size=2, max_size=4)})


async def play_fan_in(settings: Settings, s: dict[str, Any], *, split: bool) -> dict[tuple[str, str], tuple[str, int]]:
    """Runs of two fan-in DAGs (their joins of different priorities) whose middles all end in one
    tick, the joins sharing a small pool with blockers: the task instances after that tick."""
    with counting_together() if split else contextlib.nullcontext():
        return await _play_fan_in(settings, s, split=split)


async def _play_fan_in(settings: Settings, s: dict[str, Any], *, split: bool) -> dict[tuple[str, str], tuple[str, int]]:
    async with stepper(settings, parallelism=16) as st:
        seen = split_always(st) if split else None
        if not split:
            st.core.step_shards = 1
        await st.sql("INSERT INTO pools (name, slots) VALUES ('joins', :n)", n=s["join_slots"])
        if s["blockers"]:
            await apply(st.engine, {"dag_id": "blockers", "tasks": [container(f"b{i}", pool="joins")
                                                                   for i in range(s["blockers"])]})
            await trigger(st.engine, "blockers", run_id="blocking")
        middles = [f"m{i}" for i in range(s["middles"])]
        for d, priority in enumerate(s["priorities"]):
            await apply(st.engine, {"dag_id": f"in{d}", "tasks": [
                container("root"), *(container(m, "root") for m in middles),
                container("join", *middles, pool="joins", priority=priority)]})
        runs = [(f"in{i % 2}", await trigger(st.engine, f"in{i % 2}", run_id=f"run-{i}"))
                for i in range(len(s["runs"]))]
        await st.tick(periodic=True)
        for dag, run in runs:
            st.finish(dag, run, "root")
        await st.tick()
        for (dag, run), fails in zip(runs, s["runs"], strict=True):
            for i, m in enumerate(middles):
                st.finish(dag, run, m, "failed" if fails and i == 0 else "success")
        await st.tick()
        if seen is not None:
            assert seen["ticks"] == 2
        return await outcomes(st)


# The example is the case the reservation is for (three joins ready at once for one free slot).
# With a part reserving nothing for the others' joins, it fails, and so do the drawn scenarios
# (the pool has at least one slot and at most one blocker: with 0..3 slots and 0..2 blockers the
# 20 draws hit no such case and the mutant passed).
@derandomized(20)
@given(fan_in_scenario)
@example({"middles": 2, "join_slots": 1, "blockers": 0, "priorities": (0, 0), "runs": [False, False, False]})
def test_a_split_tick_that_ends_middles_queues_the_joins_one_step_would(pg_server: PostgresServer,
                                                                       settings: Settings, s: dict[str, Any]) -> None:
    assert_same_outcome(pg_server, settings, lambda on: play_fan_in(on, s, split=True),
                        lambda off: play_fan_in(off, s, split=False))


def test_the_split_is_by_run_balanced_by_rows_and_counts_each_task_it_may_queue_once() -> None:
    from leoflow.model.tries import StatusUpdate, TryKey

    def report(run: str, task: str) -> StatusUpdate:
        return StatusUpdate(key=TryKey("d", run, task, 1), state="success", at=None)  # type: ignore[arg-type]

    def fan(rows: int, *queues: str) -> Fanout:
        return Fanout(rows, frozenset(queues))

    batch = [report("a", "x"), report("b", "x"), report("a", "y"), report("c", "x"), report("b", "y")]
    fanouts = [fan(100, "j", "k"), fan(1, "j"), fan(5, "j", "l"), fan(50), fan(1, "j")]
    parts = shards.split_by_run(batch, fanouts, 2)
    assert sorted((p.rows, p.queues) for p in parts) == [(52, 1), (105, 3)]  # a: {j, k, l}; b: {j}; c: none
    for p in parts:  # order kept within a part, no run in two parts
        assert p.reports == [u for u in batch if u in p.reports]
    assert sorted(sorted({u.key.run_id for u in p.reports}) for p in parts) == [["a"], ["b", "c"]]
    assert shards.split_by_run(batch[:1], [fan(7, "j")], 2) == [([batch[0]], 7, 1)]


def test_only_a_success_may_queue_and_only_its_direct_downstream_that_waits_for_success() -> None:
    from leoflow.model.spec.dag import parse_dag_spec
    from leoflow.model.spec.graph import DagGraph
    from leoflow.model.tries import StatusUpdate, TryKey

    graph = DagGraph(1, parse_dag_spec({"dag_id": "g", "tasks": [
        container("a"), container("b", "a"), container("c", "a", trigger_rule="one_failed"),
        {"id": "e", "kind": "empty", "depends_on": ["a"]}, container("f", "b")]}))

    def queues(task: str, state: str) -> frozenset[str]:
        return report_queues(StatusUpdate(key=TryKey("g", "r", task, 1), state=state, at=None),  # type: ignore[arg-type]
                             graph)

    assert queues("a", "success") == {"b"}, "not c (one_failed: all successes skip it), not e (empty)"
    assert queues("a", "failed") == queues("a", "running") == frozenset()
    assert queues("f", "success") == frozenset()
    assert report_queues(StatusUpdate(key=TryKey("g", "r", "a", 1), state="success", at=None),  # type: ignore[arg-type]
                         None) == frozenset()
