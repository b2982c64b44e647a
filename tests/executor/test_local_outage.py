"""A leader change during a database outage never runs a local try twice (issue 17 §5).

Replicas with their own homes, as on separate hosts. Replica ``a`` leads and starts a process;
it loses leadership before it can report the end (an outage), the process finishes on ``a``'s
host. Replica ``b`` leads next: the try was claimed by ``a``, whose files ``b`` cannot see — it
is not "vanished": ``b`` waits while ``a`` heartbeats, ``a`` reports the outcome through the
database, ``b`` delivers it. Only when the claimant is gone (no heartbeat past the window) does
``b`` decide, and says so. Driven step by step against a real PostgreSQL and real processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores import cluster_nodes
from leoflow.executor.local.executor import LocalExecutor
from leoflow.executor.local.outcomes import report_once
from leoflow.executor.local.process import TryFiles
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.executor.world import Recorder, log_row, run_with_term, seed_tries, set_term

#: The window a claimant gets: short for the test (the default is LEOFLOW_NODE_DOWN_AFTER, 15 s).
DOWN_AFTER = 1.5


def replica(settings: Settings, node: str, home: Path) -> Settings:
    return settings.replace(
        home=home, cluster=dataclasses.replace(settings.cluster, node_id=node),
        executor=dataclasses.replace(settings.executor, kind="local"),
        election=dataclasses.replace(settings.election, node_down_after=DOWN_AFTER))


async def heartbeat(engine: AsyncEngine, node: str, *, seconds_ago: float = 0) -> None:
    async with engine.begin() as conn:
        await cluster_nodes.heartbeat(conn, "default", node, api_url="", version="t", is_leader=False)
        await conn.execute(text("UPDATE cluster_nodes SET last_seen = now() - make_interval(secs => :s)"
                                " WHERE node_id = :n"), {"s": seconds_ago, "n": node})


def test_a_try_of_another_live_replica_is_waited_for_never_run_again(settings: Settings, tmp_path: Path) -> None:
    a = replica(settings, "a", tmp_path / "host-a")
    b = replica(settings, "b", tmp_path / "host-b")

    async def body(engine: AsyncEngine) -> None:
        (seeded,) = await seed_tries(engine, 1)
        await heartbeat(engine, "a")
        # Term 1: 'a' leads, starts the process, and loses leadership while it runs.
        rec_a = Recorder(engine)
        ex_a = LocalExecutor(a, kill_grace=2.0)
        await ex_a.start(LeaderContext(1, a, Database(engine)), rec_a)
        await ex_a.submit(seeded.launch(["sh", "-c", "echo ran >> ../count; sleep 1; echo done"], term=1))
        await rec_a.wait_for(lambda: "running" in rec_a.states(seeded.key), what="a's process running")
        await ex_a.stop()
        files = TryFiles(a.home, try_name("default", seeded.key))
        await rec_a.wait_for(lambda: files.read_outcome() is not None, what="the process ended on a's host")
        assert rec_a.final(seeded.key) is None  # 'a' could not report: it no longer led

        # Term 2: 'b' leads. The try is a's, on a's host: not vanished — b waits while a is alive.
        await set_term(engine, "default", 2, "b")
        rec_b = Recorder(engine)
        rec_b.track([seeded])
        ex_b = LocalExecutor(b, kill_grace=2.0)
        await ex_b.start(LeaderContext(2, b, Database(engine)), rec_b)
        for _ in range(3):  # past the window, a keeps heartbeating: b keeps waiting
            await heartbeat(engine, "a")
            await asyncio.sleep(DOWN_AFTER / 2)
        assert rec_b.final(seeded.key) is None
        # 'a' reports what its process did (the replica service, one round of it).
        assert await report_once(a, Database(engine)) == [files.root.name]
        final = await rec_b.wait_final(seeded.key, timeout=15)
        assert (final.state, final.exit_code) == ("success", 0)
        await ex_b.stop()
        assert (files.root / "count").read_text() == "ran\n"  # ran exactly once
        assert not (b.home / "tasks").exists()  # and never on b's host
        logs = await log_row(engine, seeded.task_try_id)
        assert logs is not None and logs["content"] == "done\n"

    run_with_term(a, body, pool_size=4)


def test_a_try_whose_replica_is_gone_is_failed_saying_why(settings: Settings, tmp_path: Path) -> None:
    b = replica(settings, "b", tmp_path / "host-b")

    async def body(engine: AsyncEngine) -> None:
        gone, never = await seed_tries(engine, 2)
        from leoflow.db.stores import tries as try_store
        async with engine.begin() as conn:
            for seeded, node in ((gone, "a"), (never, "ghost")):
                await try_store.claim_try(conn, cluster="default", term=1, task_try_id=seeded.task_try_id,
                                               key=seeded.key, executor_ref=try_name("default", seeded.key),
                                               node_id=node)
        await heartbeat(engine, "a", seconds_ago=3600)  # 'a' stopped heartbeating an hour ago
        await set_term(engine, "default", 2, "b")
        rec = Recorder(engine)
        ex = LocalExecutor(b, kill_grace=2.0)
        started = asyncio.get_running_loop().time()
        await ex.start(LeaderContext(2, b, Database(engine)), rec)
        # A claimant that is no member of the cluster at all: decided at once.
        assert "vanished with replica 'ghost'" in str((await rec.wait_final(never.key, timeout=10)).reason)
        # A member that went silent: decided only after a full window of waiting (database time).
        final = await rec.wait_final(gone.key, timeout=15)
        assert asyncio.get_running_loop().time() - started >= DOWN_AFTER - 0.5  # db vs loop clock: generous
        assert final.state == "failed" and "vanished with replica 'a'" in str(final.reason)
        assert "no heartbeat" in str(final.reason) and "last seen" in str(final.reason)
        await ex.stop()

    run_with_term(b, body, pool_size=4)
