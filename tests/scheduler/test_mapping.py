"""``map_over`` in the scheduler, one tick at a time on real PostgreSQL (ADR 0014, decision 3).

A mapped task expands into N task-instance rows in the fenced step that finds it ready; each is a
full task instance (its own tries, keys, pod names), downstream waits for all of them and reads
their outputs as a list in index order; an empty source skips, a bad one fails, naming why.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from leoflow.db.stores import commands
from leoflow.executor.naming import try_name
from leoflow.model.tries import StatusUpdate, TryKey
from leoflow.settings import Settings
from tests.scheduler.stepper import Stepper, container, rows, stepper
from tests.scheduler.test_conditions import started


def pipeline(dag_id: str, source: object = "{{ tasks.list.outputs.parts }}", **extra: Any) -> dict[str, Any]:
    """list → process (mapped over ``source``) → combine (reads every instance's ``uri``)."""
    return {"dag_id": dag_id, "params": {"type": "object", "properties": {"days": {"type": "array"}}}, "tasks": [
        container("list", outputs={"parts": {"type": "array"}}),
        container("process", "list", map_over=source, args=["--part", "{{ item }}", "--i", "{{ map_index }}"],
                  outputs={"uri": {"type": "string"}}, **extra),
        container("combine", "process", args=["{{ tasks.process.outputs.uri }}"]),
        container("always", "process", trigger_rule="all_done")]}


def succeed(st: Stepper, key: TryKey, outputs: dict[str, Any] | None = None) -> None:
    st.core.inbox.append(StatusUpdate(key=key, state="running", at=st.clock.now()))
    st.core.inbox.append(StatusUpdate(key=key, state="success", at=st.clock.now() + timedelta(seconds=1), exit_code=0,
                                      outputs=None if outputs is None else json.dumps(outputs).encode()))


def fail(st: Stepper, key: TryKey) -> None:
    st.core.inbox.append(StatusUpdate(key=key, state="running", at=st.clock.now()))
    st.core.inbox.append(StatusUpdate(key=key, state="failed", at=st.clock.now() + timedelta(seconds=1), exit_code=1))


def mapped_launches(st: Stepper, run_id: str, task_id: str = "process") -> dict[int, Any]:
    return {la.key.map_index: la for la in st.executor.launched
            if la.key.run_id == run_id and la.key.task_id == task_id}


async def instances(st: Stepper, run_id: str, task_id: str = "process") -> list[tuple[int, str, int | None]]:
    return [(int(i), s, c) for i, s, c in await rows(
        st.engine, "SELECT ti.map_index, ti.state, ti.map_count FROM task_instances ti JOIN dag_runs r "
        "ON r.id = ti.run_pk WHERE r.run_id = :r AND ti.task_id = :t ORDER BY ti.map_index", r=run_id, t=task_id)]


def test_a_mapped_task_expands_over_an_upstream_output_and_downstream_reads_the_list(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, pipeline("map-a"))
            succeed(st, st.key("map-a", run, "list"), {"parts": ["p0", {"k": 1}, "p2"]})
            await st.settle()
            assert await instances(st, run) == [(0, "queued", 3), (1, "queued", 3), (2, "queued", 3)]
            launched = mapped_launches(st, run)
            assert [launched[i].args for i in range(3)] == [
                ("--part", "p0", "--i", "0"), ("--part", '{"k":1}', "--i", "1"), ("--part", "p2", "--i", "2")]
            assert launched[1].env["LEOFLOW_MAP_INDEX"] == "1"
            # Deterministic, distinct names; the index is in the pod name, the key carries the row id.
            names = {try_name("c", launched[i].key) for i in range(3)}
            assert len(names) == 3 and all(f"-{i}-" in try_name("c", launched[i].key) for i in range(3))
            assert (await st.tasks(run))["combine"][0] == "pending"
            for i in (2, 0):
                succeed(st, launched[i].key, {"uri": f"s3://b/{i}"})
            await st.settle()
            assert (await st.tasks(run))["combine"][0] == "pending"  # waits for every instance
            succeed(st, launched[1].key, {"uri": "s3://b/1"})
            await st.settle()
            [combine] = mapped_launches(st, run, "combine").values()
            assert combine.args == ('["s3://b/0","s3://b/1","s3://b/2"]',)
            assert combine.key.map_index == -1

    asyncio.run(main())


def test_a_failed_instance_fails_all_success_downstream_and_all_done_still_runs(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, pipeline("map-f", ["a", "b"]))
            succeed(st, st.key("map-f", run, "list"), {"parts": []})
            await st.settle()
            launched = mapped_launches(st, run)
            fail(st, launched[0].key)
            await st.settle()
            assert (await st.tasks(run))["combine"][0] == "upstream_failed"
            assert (await st.tasks(run))["always"][0] == "pending"  # all_done waits for instance 1
            succeed(st, launched[1].key, {"uri": "x"})
            await st.settle()
            [always] = mapped_launches(st, run, "always").values()
            succeed(st, always.key)
            await st.settle()
            assert (await st.run(run))[0] == "failed"

    asyncio.run(main())


def test_an_empty_list_skips_and_a_bad_source_fails_naming_why(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            empty = await started(st, pipeline("map-e"))
            succeed(st, st.key("map-e", empty, "list"), {"parts": []})
            await st.settle()
            assert await instances(st, empty) == [(-1, "skipped", 0)]
            assert (await st.tasks(empty))["process"] == ("skipped", "map_over is empty")
            assert (await st.tasks(empty))["combine"][0] == "skipped"
            [always] = mapped_launches(st, empty, "always").values()  # all_done runs after a skip

            bad = await started(st, pipeline("map-b", "{{ params.days }}"), {"days": {"not": "a list"}})
            await st.settle()
            succeed(st, st.key("map-b", bad, "list"), {"parts": []})
            await st.settle()
            assert (await st.tasks(bad))["process"] == (
                "failed", "map_over: {{ params.days }} must be a list, got object")
            assert always.key.map_index == -1

            big = await started(st, pipeline("map-big", {"count": "{{ params.days }}"}), {"days": 10_001})
            succeed(st, st.key("map-big", big, "list"), {"parts": []})
            await st.settle()
            assert (await st.tasks(big))["process"] == ("failed", "map_over.count is 10,001; at most 10,000")
            assert await instances(st, big) == [(-1, "failed", None)]

    asyncio.run(main())


def test_max_parallel_bounds_the_instances_queued_at_once(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, pipeline("map-p", {"count": 7}, max_parallel=3))
            succeed(st, st.key("map-p", run, "list"), {"parts": []})
            await st.settle()
            states = [s for _, s, _ in await instances(st, run)]
            assert states.count("queued") == 3 and states.count("pending") == 4, await st.tasks(run)
            done = 0
            while done < 7:
                launched = [la for la in mapped_launches(st, run).values()]
                live = [la for la in launched if la.key.map_index not in range(done)]
                assert 1 <= len([la for la in launched]) - done <= 3
                succeed(st, min(live, key=lambda la: la.key.map_index).key, {"uri": "u"})
                done += 1
                await st.settle()
                states = [s for _, s, _ in await instances(st, run)]
                assert states.count("queued") <= 3
            assert [s for _, s, _ in await instances(st, run)] == ["success"] * 7

    asyncio.run(main())


def test_chained_maps_are_element_wise(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            spec = pipeline("map-c", ["a", "b", "c"])
            spec["tasks"].append(container("again", "process", map_over="{{ tasks.process.outputs.uri }}",
                                           args=["{{ item }}"], trigger_rule="all_done"))
            run = await started(st, spec)
            succeed(st, st.key("map-c", run, "list"), {"parts": []})
            await st.settle()
            launched = mapped_launches(st, run)
            succeed(st, launched[0].key, {"uri": "u0"})
            fail(st, launched[1].key)
            succeed(st, launched[2].key, {"uri": "u2"})
            await st.settle()
            assert await instances(st, run, "again") == [(0, "queued", 3), (1, "upstream_failed", 3),
                                                         (2, "queued", 3)]
            again = mapped_launches(st, run, "again")
            assert sorted(again) == [0, 2] and again[2].args == ("u2",)

    asyncio.run(main())


def test_expansion_is_once_even_when_the_step_is_replayed(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, pipeline("map-r", {"count": 4}))
            succeed(st, st.key("map-r", run, "list"), {"parts": []})
            await st.settle()
        async with stepper(settings, term=2) as st2:  # a new leader scans everything ready again
            await st2.tick(periodic=True)
            await st2.settle()
            assert [(i, c) for i, _, c in await instances(st2, run)] == [(0, 4), (1, 4), (2, 4), (3, 4)]

    asyncio.run(main())


def test_a_cleared_mapped_task_expands_again_from_the_current_source(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, pipeline("map-x"))
            succeed(st, st.key("map-x", run, "list"), {"parts": ["a", "b", "c"]})
            await st.settle()
            first = mapped_launches(st, run)
            for la in first.values():
                succeed(st, la.key, {"uri": la.args[1]})
            await st.settle()
            [combine] = mapped_launches(st, run, "combine").values()
            succeed(st, combine.key)
            await st.settle()
            # Clear list and everything downstream: list now says two parts, then four.
            for parts in (["x", "y"], ["p", "q", "r", "s"]):
                async with st.engine.begin() as conn:
                    found = await conn.execute(text("SELECT id FROM dag_runs WHERE run_id = :r"), {"r": run})
                    run_pk = found.scalar()
                    await commands.create_command(conn, run_pk=run_pk, dag_id="map-x", kind="clear",
                                                  body={"tasks": ["list"], "downstream": True}, requested_by="t")
                await st.tick(periodic=True)
                await st.settle()
                assert [s for _, s, c in await instances(st, run)] == ["pending"] * len(await instances(st, run))
                succeed(st, st.key("map-x", run, "list"), {"parts": parts})
                await st.settle()
                now = await instances(st, run)
                assert [(i, c) for i, _, c in now] == [(i, len(parts)) for i in range(len(parts))]
                for i, p in enumerate(parts):
                    latest = max((la for la in st.executor.launched if la.key.run_id == run
                                  and la.key.task_id == "process" and la.key.map_index == i),
                                 key=lambda la: (la.key.instance, la.key.try_number))
                    assert latest.args[1] == p
                    succeed(st, latest.key, {"uri": p})
                await st.settle()
                combines = [la for la in st.executor.launched if la.key.run_id == run and la.key.task_id == "combine"]
                assert combines[-1].args == (json.dumps(parts, separators=(",", ":")),)
                succeed(st, st.key("map-x", run, "combine"))
                await st.settle()

    asyncio.run(main())
