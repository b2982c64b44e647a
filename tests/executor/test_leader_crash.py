"""The leader *process* is SIGKILLed mid-run; a new leader takes over (real OS processes)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.executor.local.executor import LocalExecutor
from leoflow.executor.local.process import TryFiles, process_start_time
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import run, started
from tests.executor.test_local import local_settings
from tests.executor.world import Recorder, Seeded, seed_tries, set_term
from tests.harness.fake_k8s import FakeKubernetes

ROOT = Path(__file__).resolve().parents[2]


async def crash_leader(kind: str, s: Settings, home: Path, tries: list[Seeded], script: str) -> None:
    """Start a leader process, wait until its tries run, SIGKILL it."""
    specs = [f"{t.task_try_id}:{t.key.dag_id}:{t.key.run_id}:{t.key.task_id}:{t.key.try_number}" for t in tries]
    assert s.database.url
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.executor.leader_child", kind, s.database.url, str(home), "1", script, *specs,
        cwd=ROOT, stdout=subprocess.PIPE, env={**os.environ})
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
        assert line.strip() == b"RUNNING", line
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()


def test_kubernetes_leader_killed_mid_run_new_leader_adopts_no_second_pod(
        settings: Settings, fake_k8s: FakeKubernetes, tmp_path: Path) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        tries = await seed_tries(engine, 3)
        await crash_leader("kubernetes", s, tmp_path, tries, "echo working; sleep 2")
        await set_term(engine, "default", 2)
        rec = Recorder(engine)
        rec.track(tries)
        new = await started(s, engine, 2, rec)
        for t in tries:
            await new.submit(t.launch(["sh", "-c", "echo working; sleep 2"], term=2))
        for t in tries:
            assert (await rec.wait_final(t.key)).state == "success"
        await new.stop()
        creates = fake_k8s.creates()
        assert sorted(r["name"] for r in creates) == sorted(try_name("default", t.key) for t in tries)
        assert {r["code"] for r in creates} == {201} and {r["term"] for r in creates} == {"1"}
        assert len(fake_k8s.pods(NAMESPACE)) == 3

    run(s, body)


def test_local_leader_killed_mid_run_orphans_are_stopped_and_tries_fail_not_rerun(
        settings: Settings, tmp_path: Path) -> None:
    s = local_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        tries = await seed_tries(engine, 2)
        await crash_leader("local", s, tmp_path, tries, "echo launched; sleep 60")
        pids = [TryFiles(tmp_path, try_name("default", t.key)).live_pid() for t in tries]
        assert all(pids)  # the children outlived their SIGKILLed parent
        await set_term(engine, "default", 2)
        rec = Recorder(engine)
        ex = LocalExecutor(s, kill_grace=2.0)
        await ex.start(LeaderContext(2, s, Database(engine)), rec)
        for t in tries:
            final = rec.final(t.key)
            assert final is not None and final.state == "failed" and "orphaned" in str(final.reason)
            await ex.submit(t.launch(["sh", "-c", "echo launched; sleep 60"], term=2))
        await asyncio.sleep(0.5)
        await ex.stop()
        for t, pid in zip(tries, pids, strict=True):
            assert pid is not None and process_start_time(pid) is None
            log = TryFiles(tmp_path, try_name("default", t.key)).log.read_text()
            assert log.count("launched") == 1

    run(s, body)
