"""A mapped task through the API (ADR 0014, decision 3): one row per task with its instances' count
and states, every task-instance route takes ``?map_index=``, and the outputs route lists every
instance's values as its downstream reads them. The run is driven by the leader's own steps
(:mod:`tests.scheduler.stepper`), so the read side cannot drift from what the scheduler writes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from leoflow.settings import Settings
from tests.api.conftest import ADMIN, READ
from tests.scheduler.stepper import container, stepper
from tests.scheduler.test_conditions import started
from tests.scheduler.test_mapping import fail, instances, mapped_launches, succeed

SPEC: dict[str, Any] = {"dag_id": "fan", "tasks": [
    container("list", outputs={"parts": {"type": "array"}}),
    container("process", "list", map_over="{{ tasks.list.outputs.parts }}", args=["{{ item }}"],
              outputs={"uri": {"type": "string"}}),
    container("combine", "process", trigger_rule="all_done")]}


def test_a_mapped_task_is_one_row_with_counts_and_each_instance_is_addressable(
        api_client: httpx.Client, settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, SPEC)
            base = f"/api/v2/dags/fan/runs/{run}"
            succeed(st, st.key("fan", run, "list"), {"parts": ["a", "b", "c"]})
            await st.settle()
            launched = mapped_launches(st, run)
            succeed(st, launched[0].key, {"uri": "u0"})
            fail(st, launched[2].key)
            await st.settle()

            listed = {t["task_id"]: t for t in api_client.get(f"{base}/tasks", headers=READ).json()["items"]}
            assert list(listed) == ["combine", "list", "process"]
            assert listed["process"]["map_count"] == 3
            assert listed["process"]["map_states"] == {"failed": 1, "queued": 1, "success": 1}
            assert listed["process"]["state"] == "queued"  # the most active of its instances
            assert listed["list"]["map_count"] is None and listed["list"]["map_states"] is None
            detail = api_client.get(base, headers=READ).json()
            assert [t["task_id"] for t in detail["tasks"]] == ["combine", "list", "process"]
            assert detail["tasks"][2]["map_states"] == listed["process"]["map_states"]

            summary = api_client.get(f"{base}/tasks/process", headers=READ).json()
            assert (summary["map_index"], summary["map_count"], summary["tries"]) == (-1, 3, [])
            one = api_client.get(f"{base}/tasks/process", params={"map_index": 2}, headers=READ).json()
            assert (one["map_index"], one["state"], one["map_states"]) == (2, "failed", None)
            assert [t["state"] for t in one["tries"]] == ["failed"]
            outputs = api_client.get(f"{base}/tasks/process/outputs", headers=READ).json()
            assert outputs["outputs"] == {"uri": ["u0", None, None]}
            first = api_client.get(f"{base}/tasks/process/outputs", params={"map_index": 0}, headers=READ).json()
            assert first == {"try_number": 1, "state": "success", "outputs": {"uri": "u0"}}

            missing = api_client.get(f"{base}/tasks/process", params={"map_index": 3}, headers=READ)
            assert missing.status_code == 404 and "no instance 3" in missing.text
            for bad in ("-1", "x", "10000", "1e3"):
                answer = api_client.get(f"{base}/tasks/process", params={"map_index": bad}, headers=READ)
                assert answer.status_code == 400 and "map_index" in answer.text, (bad, answer.text)
            logs = api_client.get(f"{base}/tasks/process/logs", headers=ADMIN)
            assert logs.status_code == 400 and "?map_index=" in logs.text

            succeed(st, launched[1].key, {"uri": "u1"})
            await st.settle()
            listed = {t["task_id"]: t for t in api_client.get(f"{base}/tasks", headers=READ).json()["items"]}
            assert listed["process"]["state"] == "failed"
            assert api_client.get(f"{base}/tasks/process/outputs", headers=READ).json() == {
                "try_number": 0, "state": "failed", "outputs": {"uri": ["u0", "u1", None]}}

    asyncio.run(main())


def test_one_instance_is_marked_and_its_downstream_decided_again(api_client: httpx.Client,
                                                                  settings: Settings) -> None:
    """``POST …/tasks/{t}/mark?map_index=i`` marks that instance only; the leader applies it (the
    command waits for it) and redecides what its failure had ended downstream."""
    async def main() -> None:
        async with stepper(settings) as st:
            spec = {**SPEC, "dag_id": "fan-mark", "tasks": [*SPEC["tasks"][:2], container("after", "process")]}
            run = await started(st, spec)
            base = f"/api/v2/dags/fan-mark/runs/{run}"
            succeed(st, st.key("fan-mark", run, "list"), {"parts": ["a", "b"]})
            await st.settle()
            launched = mapped_launches(st, run)
            succeed(st, launched[0].key, {"uri": "u0"})
            fail(st, launched[1].key)
            await st.settle()
            assert (await st.tasks(run))["after"][0] == "upstream_failed"

            loop = asyncio.get_running_loop()
            missing = await loop.run_in_executor(None, lambda: api_client.post(
                f"{base}/tasks/process/mark", params={"map_index": 5}, json={"state": "success"}, headers=ADMIN))
            assert missing.status_code == 404 and "no instance 5" in missing.text
            marking = loop.run_in_executor(None, lambda: api_client.post(
                f"{base}/tasks/process/mark", params={"map_index": 1}, json={"state": "success"}, headers=ADMIN))
            for _ in range(50):  # the leader applies the command in its next steps
                await st.tick(periodic=True)
                if marking.done():
                    break
                await asyncio.sleep(0.1)
            answer = await marking
            assert answer.status_code == 200, answer.text
            assert answer.json()["command"]["map_index"] == 1
            await st.settle()
            states = {t["map_index"]: t["state"] for t in (
                api_client.get(f"{base}/tasks/process", params={"map_index": i}, headers=READ).json()
                for i in (0, 1))}
            assert states == {0: "success", 1: "success"}
            assert (await st.tasks(run))["after"][0] == "queued"  # decided again: both instances succeeded

    asyncio.run(main())


def test_one_instance_is_cleared_and_runs_again_without_a_new_expansion(api_client: httpx.Client,
                                                                        settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            spec = {**SPEC, "dag_id": "fan-clear"}
            run = await started(st, spec)
            base = f"/api/v2/dags/fan-clear/runs/{run}"
            succeed(st, st.key("fan-clear", run, "list"), {"parts": ["a", "b", "c"]})
            await st.settle()
            launched = mapped_launches(st, run)
            for i in range(3):
                (succeed(st, launched[i].key, {"uri": f"u{i}"}) if i != 1 else fail(st, launched[i].key))
            await st.settle()
            for bad, words in (({"tasks": ["process", "list"], "map_index": 1}, "exactly one task"),
                               ({"tasks": ["process"], "map_index": -1}, "instance index"),
                               ({"tasks": ["process"], "map_index": True}, "instance index")):
                answer = api_client.post(f"{base}/clear", json=bad, headers=ADMIN)
                assert answer.status_code == 422 and words in answer.text, answer.text
            loop = asyncio.get_running_loop()
            clearing = loop.run_in_executor(None, lambda: api_client.post(
                f"{base}/clear", json={"tasks": ["process"], "map_index": 1, "downstream": True}, headers=ADMIN))
            for _ in range(50):
                await st.tick(periodic=True)
                if clearing.done():
                    break
                await asyncio.sleep(0.1)
            answer = await clearing
            assert answer.status_code == 200, answer.text
            assert answer.json()["command"]["tasks"] == ["combine", "process"]
            await st.settle()
            # That instance runs again; the task does not expand again.
            assert await instances(st, run) == [(0, "success", 3), (1, "queued", 3), (2, "success", 3)]
            again = [la for la in st.executor.launched if la.key.run_id == run and la.key.map_index == 1]
            assert [la.key.try_number for la in again] == [1, 2] and again[1].args == ("b",)
            succeed(st, again[1].key, {"uri": "u1"})
            await st.settle()
            listed = {t["task_id"]: t for t in api_client.get(f"{base}/tasks", headers=READ).json()["items"]}
            assert (listed["process"]["state"], listed["process"]["map_states"]) == ("success", {"success": 3})
            assert api_client.get(f"{base}/tasks/process/outputs", headers=READ).json()["outputs"] == {
                "uri": ["u0", "u1", "u2"]}

    asyncio.run(main())
