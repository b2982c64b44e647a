"""The executor contract (see leoflow/executor/base.py), checked against every implementation.

One suite, three executors: in-memory, local subprocesses, Kubernetes (official client → fake
API server). Commands are tiny shell scripts that all three understand: ``sh`` runs them for the
local executor, the fake kubelet and the memory executor's outcome function interpret them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.base import Executor
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.executor.local.executor import LocalExecutor
from leoflow.executor.local.process import TryFiles
from leoflow.executor.memory import MemoryExecutor, MemoryWorld, Outcome
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.model.tries import TaskLaunch
from leoflow.settings import Settings
from tests.executor.conftest import k8s_settings
from tests.executor.world import Recorder, Seeded, seed_tries, set_term
from tests.harness.fake_k8s_kubelet import interpret


def _argv(launch: TaskLaunch) -> list[str]:
    return [*launch.command, *launch.args]


def _memory_outcome(launch: TaskLaunch) -> Outcome:
    code = interpret(_argv(launch)).exit_code
    return ("success", 0, None) if code == 0 else ("failed", code, f"exited with code {code}")


@dataclasses.dataclass
class Kind:
    """How to build one kind of executor and count how often a try really started."""

    name: str
    settings: Settings
    make: Callable[[], Executor]
    launches: Callable[[Seeded], int]


@pytest.fixture(params=["memory", "local", "kubernetes"])
def kind(request: pytest.FixtureRequest, settings: Settings, tmp_path: Path) -> Iterator[Kind]:
    if request.param == "memory":
        world = MemoryWorld()
        started: dict[Any, int] = {}

        def make_memory() -> Executor:
            ex = MemoryExecutor(world=world, check_fence=True, outcome=_memory_outcome,
                                delay=lambda launch: interpret(_argv(launch)).duration)
            return ex

        def memory_launches(t: Seeded) -> int:
            started[t.key] = 1 if t.key in world.tries else 0
            return started[t.key]

        yield Kind("memory", settings, make_memory, memory_launches)
    elif request.param == "local":
        s = settings.replace(home=tmp_path, executor=dataclasses.replace(settings.executor, kind="local"))

        def local_launches(t: Seeded) -> int:
            log = TryFiles(tmp_path, try_name("default", t.key)).log
            return log.read_text().count("launched\n") if log.exists() else 0

        yield Kind("local", s, lambda: LocalExecutor(s, kill_grace=2.0), local_launches)
    else:
        fake = request.getfixturevalue("fake_k8s")
        s = k8s_settings(settings)

        def k8s_launches(t: Seeded) -> int:
            return len(fake.creates(code=201)) and len([r for r in fake.creates(code=201)
                                                        if r["name"] == try_name("default", t.key)])

        yield Kind("kubernetes", s, lambda: KubernetesExecutor(s, resync_interval=0.5, delete_grace=0), k8s_launches)


def run(kind: Kind, body: Callable[[AsyncEngine], Awaitable[None]]) -> None:
    async def main() -> None:
        engine = make_async_engine(kind.settings.database, pool_size=6)
        try:
            await set_term(engine, "default", 1)
            await body(engine)
        finally:
            await engine.dispose()

    asyncio.run(main())


async def start(kind: Kind, engine: AsyncEngine, term: int, rec: Recorder) -> Executor:
    ex = kind.make()
    await ex.start(LeaderContext(term, kind.settings, Database(engine)), rec)
    return ex


def script(body: str) -> list[str]:
    return ["sh", "-c", f"echo launched; {body}"]


def test_reports_running_then_success_or_failure_with_exit_code(kind: Kind) -> None:
    async def body(engine: AsyncEngine) -> None:
        good, bad = await seed_tries(engine, 2)
        rec = Recorder(engine)
        ex = await start(kind, engine, 1, rec)
        await ex.submit(good.launch(script("sleep 0.2"), term=1))
        await ex.submit(bad.launch(script("exit 7"), term=1))
        ok = await rec.wait_final(good.key)
        failed = await rec.wait_final(bad.key)
        await ex.stop()
        assert (ok.state, ok.exit_code) == ("success", 0)
        assert (failed.state, failed.exit_code) == ("failed", 7)
        assert rec.states(good.key)[0] == "running"
        assert ok.executor_ref and failed.executor_ref

    run(kind, body)


def test_submitting_a_try_twice_runs_it_once(kind: Kind) -> None:
    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await start(kind, engine, 1, rec)
        launch = t.launch(script("sleep 0.3"), term=1)
        await ex.submit(launch)
        await ex.submit(launch)
        await rec.wait_final(t.key)
        await ex.submit(launch)
        await asyncio.sleep(0.3)
        await ex.stop()
        assert kind.launches(t) == 1

    run(kind, body)


def test_new_leader_adopts_running_try_and_never_relaunches_it(kind: Kind) -> None:
    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec1 = Recorder(engine)
        old = await start(kind, engine, 1, rec1)
        await old.submit(t.launch(script("sleep 1.5"), term=1))
        await rec1.wait_for(lambda: "running" in rec1.states(t.key), what="running")
        await old.stop()  # leader lost mid-run; the try keeps running
        await set_term(engine, "default", 2)
        rec2 = Recorder(engine)
        rec2.track([t])
        new = await start(kind, engine, 2, rec2)
        await new.submit(t.launch(script("sleep 1.5"), term=2))  # the scheduler re-submits
        final = await rec2.wait_final(t.key)
        await new.stop()
        assert final.state == "success"
        assert kind.launches(t) == 1

    run(kind, body)


def test_ex_leader_with_an_old_term_launches_nothing(kind: Kind) -> None:
    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await start(kind, engine, 1, rec)
        await set_term(engine, "default", 2)
        await ex.submit(t.launch(script("true"), term=1))
        await asyncio.sleep(1.0)  # give a wrong launch every chance
        await ex.stop()
        assert kind.launches(t) == 0
        assert all(u.state != "running" for u in rec.updates)

    run(kind, body)


def test_cancel_stops_a_running_try_and_unknown_cancel_is_a_noop(kind: Kind) -> None:
    async def body(engine: AsyncEngine) -> None:
        running, never = await seed_tries(engine, 2)
        rec = Recorder(engine)
        ex = await start(kind, engine, 1, rec)
        await ex.cancel(never.key)
        await ex.submit(running.launch(script("sleep 30"), term=1))
        await rec.wait_for(lambda: "running" in rec.states(running.key), what="running")
        await ex.cancel(running.key)
        final = await rec.wait_final(running.key, timeout=20)
        await ex.stop()
        assert final.state == "failed" and final.reason == "cancelled"
        assert rec.states(never.key) == []

    run(kind, body)
