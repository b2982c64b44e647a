"""Outputs stored by the leader with a try's success (ADR 0014 decision 1), one tick at a time.

The test plays the executor (:mod:`tests.scheduler.stepper`): a success report carries the raw
bytes a try wrote, and the step that records the success checks and stores them — or fails the
try with the rejection, retries applying. A deposed leader commits neither; the next leader's
re-report stores them once; a cleared task's next success replaces the current outputs.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from leoflow.db.stores import commands
from leoflow.model.tries import StatusUpdate, TryKey
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import Stepper, container, stepper

DECLARED = {"n": {"type": "integer"}, "files": {"type": "array"}, "note": {"type": "string", "optional": True}}


def succeed(st: Stepper, key: TryKey, outputs: bytes | None) -> None:
    st.core.inbox.append(StatusUpdate(key=key, state="running", at=st.clock.now()))
    st.core.inbox.append(StatusUpdate(key=key, state="success", at=st.clock.now() + timedelta(seconds=1),
                                      exit_code=0, outputs=outputs))


async def tries(st: Stepper, task_id: str = "a") -> list[tuple[Any, ...]]:
    return await rows(st.engine, "SELECT tt.try_number, tt.state, tt.reason, tt.outputs, tt.outputs_bytes "
                      "FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id "
                      "WHERE ti.task_id = :t ORDER BY tt.try_number", t=task_id)


async def launched(st: Stepper, dag_id: str, **task: Any) -> tuple[str, TryKey]:
    await apply(st.engine, {"dag_id": dag_id, "tasks": [container("a", **task), container("b", "a")]})
    run_id = await trigger(st.engine, dag_id)
    await st.tick(periodic=True)
    return run_id, st.key(dag_id, run_id, "a")


def test_a_success_stores_its_checked_outputs_in_the_same_step(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run_id, key = await launched(st, "outs", outputs=DECLARED)
            [launch] = [la for la in st.executor.launched if la.key == key]
            assert launch.outputs_declared
            raw = b'{"n": 3, "files": ["a","b"]}'
            succeed(st, key, raw)
            await st.tick()
            assert await tries(st) == [(1, "success", None, {"n": 3, "files": ["a", "b"]}, len(raw))]
            assert (await st.tasks(run_id))["a"][0] == "success"
            [b_launch] = [la for la in st.executor.launched if la.key.task_id == "b"]
            assert not b_launch.outputs_declared  # the downstream task, in the same step, declares none

    asyncio.run(main())


def test_a_task_without_declarations_stores_nothing_whatever_it_reports(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            _, key = await launched(st, "plain")
            succeed(st, key, b"not even json")  # ignored: the task declares no outputs
            await st.tick()
            assert await tries(st) == [(1, "success", None, None, None)]

    asyncio.run(main())


def test_rejected_outputs_fail_the_try_with_the_reason_and_retries_apply(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run_id, key = await launched(st, "bad", outputs=DECLARED, retries=2, retry_delay_seconds=0)
            succeed(st, key, b'{"n": 3, "files": ["a","b"]' + b" " * 4_096 + b"}")
            await st.tick()
            await st.tick()
            second = st.key("bad", run_id, "a")
            assert second.try_number == 2
            succeed(st, second, b'["n", 3]')
            await st.tick()
            await st.tick()
            third = st.key("bad", run_id, "a")
            succeed(st, third, b'{"files": []}')
            await st.tick()
            assert await tries(st) == [
                (1, "failed", "outputs are more than 4,096 bytes; at most 4,095 are allowed (pass a URI to larger "
                              "data)", None, None),
                (2, "failed", "outputs must be a JSON object, got an array", None, None),
                (3, "failed", "required output 'n' is missing", None, None)]
            assert (await st.tasks(run_id)) == {"a": ("failed", "required output 'n' is missing"),
                                                "b": ("upstream_failed", "an upstream task failed")}

    asyncio.run(main())


def test_nothing_written_is_the_empty_object(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            _, key = await launched(st, "empty", outputs={"note": {"type": "any", "optional": True}})
            succeed(st, key, None)  # no file, or an untouched termination log
            await st.tick()
            assert await tries(st) == [(1, "success", None, {}, 0)]

    asyncio.run(main())


def test_a_leader_change_between_the_success_and_its_storage_neither_loses_nor_duplicates(settings: Settings) -> None:
    raw = b'{"n": 3, "files": ["a","b"]}'

    async def main() -> None:
        async with stepper(settings, term=1) as old:
            run_id, key = await launched(old, "failover", outputs=DECLARED)
            succeed(old, key, raw)
            async with stepper(settings, term=2, engine=old.engine) as new:
                try:  # deposed before its step: it commits neither the success nor the outputs
                    await old.tick()
                except Exception as exc:
                    assert type(exc).__name__ == "FencedOut"
                assert await tries(old) == []  # the queued try is still implicit (ADR 0013)
                succeed(new, key, raw)  # the new leader's executor reports the try again (pod status, outcome row)
                await new.tick(periodic=True)
                stored = [(1, "success", None, {"n": 3, "files": ["a", "b"]}, len(raw))]
                assert await tries(new) == stored
                succeed(new, key, b'{"n": 4, "files": []}')  # a later duplicate cannot rewrite a finished try
                await new.tick()
                assert await tries(new) == stored
                assert (await new.tasks(run_id))["a"][0] == "success"

    asyncio.run(main())


def test_a_cleared_tasks_next_success_replaces_the_current_outputs(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run_id, key = await launched(st, "cleared", outputs=DECLARED)
            succeed(st, key, b'{"n": 1, "files": []}')
            await st.tick()
            await st.tick()
            [(run_pk,)] = await rows(st.engine, "SELECT id FROM dag_runs WHERE run_id = :r", r=run_id)
            async with st.engine.begin() as conn:  # as the API records it
                await commands.create_command(conn, run_pk=run_pk, dag_id="cleared", kind="clear",
                                              body={"tasks": ["a"]}, requested_by="ops")
            await st.tick(periodic=True)
            await st.tick(periodic=True)
            second = st.key("cleared", run_id, "a")
            assert second.try_number == 2
            succeed(st, second, b'{"n": 2, "files": ["x"]}')
            await st.tick()
            current = await rows(st.engine, "SELECT tt.outputs FROM task_instances ti JOIN task_tries tt "
                                 "ON tt.task_instance_id = ti.id AND tt.try_number = ti.try_number "
                                 "WHERE ti.task_id = 'a' AND ti.state = 'success'")
            assert current == [({"n": 2, "files": ["x"]},)]
            assert [t[3] for t in await tries(st)] == [{"n": 1, "files": []}, {"n": 2, "files": ["x"]}]

    asyncio.run(main())
