"""Pods of mapped task instances on the fake Kubernetes API server (ADR 0014, decision 3).

Each instance of a mapped task is a full task instance: its try's pod is named after the DAG, the
task and the index (``<dag>-<task>-<index>-<hash>``, the hash covering the index and the instance's
row id), carries the index as a label and annotation, and is as idempotent as any other: a second
create is a 409 that adopts the pod, a new executor recognises it from its annotations.
"""

from __future__ import annotations

import re

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.executor.kubernetes.pods import pod_try_key
from leoflow.executor.naming import try_name
from leoflow.model.tries import try_key
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import run, started
from tests.executor.world import Recorder, Seeded, seed_tries
from tests.harness.fake_k8s import FakeKubernetes


async def mapped(engine: AsyncEngine, n: int) -> list[Seeded]:
    """``n`` instances (0..n-1) of task ``process``, one queued try each."""
    seeded = await seed_tries(engine, n, task_prefix="process")
    out: list[Seeded] = []
    async with engine.begin() as conn:
        for i, s in enumerate(seeded):
            ti = (await conn.execute(text(
                "UPDATE task_instances ti SET task_id = 'process', map_index = :i, map_count = :n "
                "FROM task_tries tt WHERE tt.id = :tt AND ti.id = tt.task_instance_id RETURNING ti.id"),
                {"i": i, "n": n, "tt": s.task_try_id})).scalar_one()
            out.append(Seeded(try_key(s.key.dag_id, s.key.run_id, "process", s.key.try_number, i, ti), s.task_try_id))
    return out


def test_each_instance_gets_its_own_idempotent_pod(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        instances = await mapped(engine, 3)
        rec = Recorder(engine)
        rec.track(instances)
        ex = await started(s, engine, 1, rec)
        for inst in instances:
            launch = inst.launch(["sh", "-c", "echo $LEOFLOW_MAP_INDEX"], term=1,
                                 env={"LEOFLOW_MAP_INDEX": str(inst.key.map_index)})
            await ex.submit(launch)
            await ex.submit(launch)  # twice: 409, adopted
        for inst in instances:
            assert (await rec.wait_final(inst.key)).state == "success"
            assert await ex.logs(inst.key) == f"{inst.key.map_index}\n"
        await ex.stop()
        ex2 = await started(s, engine, 1, Recorder(engine))  # a new executor recognises them, creates none
        for inst in instances:
            await ex2.submit(inst.launch(["true"], term=1))
        await ex2.stop()
        pods = {p["metadata"]["name"]: p for p in fake_k8s.pods(NAMESPACE)}
        assert sorted(pods) == sorted(try_name("default", i.key) for i in instances)
        assert len(fake_k8s.creates(code=201)) == 3
        for inst in instances:
            pod = pods[try_name("default", inst.key)]
            assert re.fullmatch(rf"etl-process-{inst.key.map_index}-[0-9a-f]{{16}}", pod["metadata"]["name"])
            assert pod["metadata"]["labels"]["leoflow.io/map-index"] == str(inst.key.map_index)
            assert pod["metadata"]["annotations"]["leoflow.io/task-instance-id"] == str(inst.key.instance)
            assert pod_try_key(pod) == inst.key

    run(s, body)


def test_an_unmapped_try_keeps_its_name_and_a_recreated_instance_gets_a_new_one() -> None:
    unmapped = try_key("etl", "r1", "process", 1)
    assert unmapped == ("etl", "r1", "process", 1, -1, 0)
    assert try_name("c", unmapped) == "etl-process-" + try_name("c", unmapped).rsplit("-", 1)[1]
    first, recreated = try_key("etl", "r1", "process", 1, 7, 100), try_key("etl", "r1", "process", 1, 7, 250)
    assert try_name("c", first) != try_name("c", recreated)  # same index and try, a new row: a new pod
    long = try_key("d" * 50, "r", "t" * 50, 1, 9_999, 1)
    assert len(try_name("c", long)) <= 63 and try_name("c", long).split("-")[-2] == "9999"
