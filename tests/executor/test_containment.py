"""Issue 16 in the executors: one try the executor cannot handle fails alone, never the term.

Each executor is given one poisoned try next to a healthy one. The poisoned try must be reported
``failed`` with ``executor error: …`` and counted; the healthy one runs; the term is never given
up (``LeaderContext.fail`` is not called) and ``start`` does not raise — a leader that ended its
term here would end the next one the same way (the new executor resubmits the same try).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores import tries as try_store
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.executor.local.executor import LocalExecutor
from leoflow.executor.local.process import TryFiles
from leoflow.executor.memory import MemoryExecutor, Outcome
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.metrics import scheduler as metrics
from leoflow.model.tries import TaskLaunch
from leoflow.settings import Settings
from tests.executor.conftest import k8s_settings
from tests.executor.world import Recorder, run_with_term, seed_tries
from tests.harness.fake_k8s import FakeKubernetes


def try_errors() -> float:
    return metrics.ENTITY_ERRORS.labels(kind="try")._value.get()


def context(settings: Settings, engine: AsyncEngine, failed: list[str]) -> LeaderContext:
    return LeaderContext(1, settings, Database(engine), fail=failed.append)


def test_kubernetes_a_pod_that_cannot_be_built_fails_its_try_not_the_term(settings: Settings,
                                                                          fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        healthy, poisoned = await seed_tries(engine, 2)
        rec = Recorder(engine)
        failed: list[str] = []
        before = try_errors()
        ex = KubernetesExecutor(s, resync_interval=0.5, create_deadline=20.0, delete_grace=0)
        await ex.start(context(s, engine, failed), rec)
        # Resources no validator would let through today (an older spec, a hand edit): the pod
        # builder raises on them. On 4122883 this killed the launcher task and gave up the term.
        await ex.submit(poisoned.launch(["true"], term=1, resources={"requests": "lots"}))
        await ex.submit(healthy.launch(["sh", "-c", "sleep 0.2"], term=1))
        final = await rec.wait_final(poisoned.key)
        assert final.state == "failed" and str(final.reason).startswith("executor error: ValueError")
        assert (await rec.wait_final(healthy.key)).state == "success"
        await ex.stop()
        assert failed == []
        assert try_errors() == before + 1

    run_with_term(s, body, pool_size=6)


def test_local_a_claimed_try_whose_files_cannot_be_read_fails_alone_at_start(settings: Settings,
                                                                            tmp_path: Path) -> None:
    s = settings.replace(home=tmp_path, executor=dataclasses.replace(settings.executor, kind="local"))

    async def body(engine: AsyncEngine) -> None:
        unreadable, healthy = await seed_tries(engine, 2)
        for seeded in (unreadable, healthy):
            async with engine.begin() as conn:
                assert await try_store.claim_try(conn, cluster="default", term=1, task_try_id=seeded.task_try_id,
                                                      key=seeded.key,
                                                      executor_ref=try_name("default", seeded.key), node_id="old")
        broken = TryFiles(tmp_path, try_name("default", unreadable.key))
        broken.prepare()
        broken.exit.mkdir()  # e.g. a damaged disk: reading the outcome raises IsADirectoryError
        done = TryFiles(tmp_path, try_name("default", healthy.key))
        done.prepare()
        from leoflow.executor.local.process import Outcome as ProcessOutcome
        done.write_outcome(ProcessOutcome("success", 0, None))
        rec = Recorder(engine)
        failed: list[str] = []
        before = try_errors()
        ex = LocalExecutor(s)
        await ex.start(context(s, engine, failed), rec)  # 4122883: IsADirectoryError out of start()
        final = rec.final(unreadable.key)
        assert final is not None and final.state == "failed"
        assert str(final.reason).startswith("executor error: IsADirectoryError")
        assert (rec.final(healthy.key) or final).state == "success"
        await ex.stop()
        assert failed == [] and try_errors() == before + 1

    run_with_term(s, body, pool_size=4)


def test_memory_an_outcome_that_raises_fails_its_try(settings: Settings) -> None:
    def outcome(launch: TaskLaunch) -> Outcome:
        if launch.key.task_id == "task0":
            raise RuntimeError("the test's outcome function broke")
        return ("success", 0, None)

    async def body(engine: AsyncEngine) -> None:
        poisoned, healthy = await seed_tries(engine, 2)
        rec = Recorder(engine)
        ex = MemoryExecutor(outcome=outcome)
        await ex.start(context(settings, engine, []), rec)
        await ex.submit(poisoned.launch(["true"], term=1))
        await ex.submit(healthy.launch(["true"], term=1))
        final = await rec.wait_final(poisoned.key)  # 4122883: the try stayed running forever
        assert (final.state, final.reason) == ("failed", "executor error: RuntimeError: the test's outcome "
                                                         "function broke")
        assert (await rec.wait_final(healthy.key)).state == "success"
        await ex.stop()

    run_with_term(settings, body, pool_size=2)
