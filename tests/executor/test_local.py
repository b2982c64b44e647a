"""The local executor against a real PostgreSQL and real subprocesses."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.local.executor import LocalExecutor
from leoflow.executor.local.process import TryFiles, process_start_time
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.executor.world import Recorder, log_row, run_with_term, seed_tries, set_term, try_row

PY = sys.executable


def local_settings(settings: Settings, home: Path, **executor: object) -> Settings:
    return settings.replace(home=home, executor=dataclasses.replace(settings.executor, kind="local", **executor))


def run(settings: Settings, body: Callable[[AsyncEngine], Awaitable[None]]) -> None:
    run_with_term(settings, body, pool_size=4)


def test_runs_command_with_env_workdir_and_stores_logs(settings: Settings, tmp_path: Path) -> None:
    s = local_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        rec.track([t])
        ex = LocalExecutor(s)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        script = "import os; print('hello', os.environ['GREETING'], os.getcwd()); open('out.txt','w').write('x')"
        await ex.submit(t.launch([PY, "-c"], args=[script], term=1, env={"GREETING": "world"}))
        final = await rec.wait_final(t.key)
        await ex.stop()
        assert final.state == "success" and final.exit_code == 0
        assert rec.states(t.key)[0] == "running"
        files = TryFiles(tmp_path, try_name("default", t.key))
        assert (files.workdir / "out.txt").read_text() == "x"
        logs = await log_row(engine, t.task_try_id)
        assert logs is not None and f"hello world {files.workdir}" in str(logs["content"])
        row = await try_row(engine, t.task_try_id)
        assert row["claimed_by"] == "default/test-node" and row["executor_ref"] == files.root.name
        assert row["logs_shipped_at"] is not None

    run(s, body)


def test_failure_reports_exit_code_and_leoflow_settings_do_not_leak(settings: Settings, tmp_path: Path) -> None:
    s = local_settings(settings, tmp_path)
    os.environ["LEOFLOW_SECRET_PROBE"] = "hunter2"
    try:
        async def body(engine: AsyncEngine) -> None:
            [t, missing] = await seed_tries(engine, 2)
            rec = Recorder(engine)
            ex = LocalExecutor(s)
            await ex.start(LeaderContext(1, s, Database(engine)), rec)
            script = "import os, sys; print(sorted(k for k in os.environ if k.startswith('LEOFLOW'))); sys.exit(3)"
            await ex.submit(t.launch([PY, "-c", script], term=1))
            await ex.submit(missing.launch(["/nonexistent/binary"], term=1))
            final = await rec.wait_final(t.key)
            assert (final.state, final.exit_code, final.reason) == ("failed", 3, "exited with code 3")
            bad = await rec.wait_final(missing.key)
            assert bad.state == "failed" and bad.exit_code == 127 and "cannot start" in str(bad.reason)
            await ex.stop()
            logs = await log_row(engine, t.task_try_id)
            assert logs is not None and "[]" in str(logs["content"])
    finally:
        del os.environ["LEOFLOW_SECRET_PROBE"]
    run(s, body)


def test_timeout_sends_sigterm_then_sigkill(settings: Settings, tmp_path: Path) -> None:
    s = local_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        polite, stubborn = await seed_tries(engine, 2)
        rec = Recorder(engine)
        ex = LocalExecutor(s, kill_grace=1.0)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        await ex.submit(polite.launch(["sleep", "60"], term=1, timeout_seconds=0.5))
        await ex.submit(stubborn.launch(["sh", "-c", "trap '' TERM; sleep 60 & wait; sleep 60"], term=1,
                                        timeout_seconds=0.5))
        first = await rec.wait_final(polite.key)
        second = await rec.wait_final(stubborn.key)
        await ex.stop()
        assert first.state == "failed" and first.reason == "timed out after 0.5s"
        assert first.exit_code == 128 + signal.SIGTERM
        assert second.state == "failed" and second.exit_code == 128 + signal.SIGKILL

    run(s, body)


def test_submit_twice_and_restart_never_run_a_try_twice(settings: Settings, tmp_path: Path) -> None:
    s = local_settings(settings, tmp_path)
    script = "open('runs.txt', 'a').write('run\\n')"

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = LocalExecutor(s)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        launch = t.launch([PY, "-c", script], term=1)
        await ex.submit(launch)
        await ex.submit(launch)
        await rec.wait_final(t.key)
        await ex.submit(launch)  # after it finished: reported again, not rerun
        await rec.wait_for(lambda: len([u for u in rec.updates if u.state == "success"]) >= 2, what="re-report")
        await ex.stop()
        # A restarted executor (new term) is handed the same try again.
        await set_term(engine, "default", 2)
        rec2 = Recorder(engine)
        ex2 = LocalExecutor(s)
        await ex2.start(LeaderContext(2, s, Database(engine)), rec2)
        await ex2.submit(launch._replace(term=2))
        final = await rec2.wait_final(t.key)
        await ex2.stop()
        assert final.state == "success"
        workdir = TryFiles(tmp_path, try_name("default", t.key)).workdir
        assert (workdir / "runs.txt").read_text() == "run\n"

    run(s, body)


def test_crash_vanished_process_is_reported_failed_not_rerun(settings: Settings, tmp_path: Path) -> None:
    s = local_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        vanished, orphan, finished = await seed_tries(engine, 3)
        rec = Recorder(engine)
        # A crashed executor left three claimed tries behind: one whose process is gone, one whose
        # process still runs (an orphan of the crash), one that finished with its outcome on disk.
        from leoflow.db.stores import tries as try_store
        for seeded in (vanished, orphan, finished):
            async with engine.begin() as conn:
                assert await try_store.claim_try(conn, cluster="default", term=1,
                                                      task_try_id=seeded.task_try_id, key=seeded.key,
                                                      executor_ref=try_name("default", seeded.key), node_id="old")
        orphan_files = TryFiles(tmp_path, try_name("default", orphan.key))
        orphan_files.prepare()
        proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
        orphan_files.write_process(proc.pid)
        done_files = TryFiles(tmp_path, try_name("default", finished.key))
        done_files.prepare()
        done_files.log.write_text("all good\n")
        from leoflow.executor.local.process import Outcome
        done_files.write_outcome(Outcome("success", 0, None))

        await set_term(engine, "default", 2)
        ex = LocalExecutor(s, kill_grace=2.0)
        await ex.start(LeaderContext(2, s, Database(engine)), rec)
        # No files here and its claimant ('old') is no member of the cluster: failed at once.
        assert (await rec.wait_final(vanished.key, timeout=10)).state == "failed"
        assert "vanished with replica 'old'" in str(rec.final(vanished.key).reason)  # type: ignore[union-attr]
        assert rec.final(orphan.key).state == "failed"  # type: ignore[union-attr]
        assert proc.wait(timeout=10) == -signal.SIGTERM
        assert rec.final(finished.key).state == "success"  # type: ignore[union-attr]
        logs = await log_row(engine, finished.task_try_id)
        assert logs is not None and logs["content"] == "all good\n"
        # Submitting the vanished try again does not rerun it either.
        await ex.submit(vanished.launch(["sh", "-c", "touch ran"], term=2))
        await rec.wait_for(lambda: len(rec.states(vanished.key)) >= 2, what="second report")
        await ex.stop()
        assert not (TryFiles(tmp_path, try_name("default", vanished.key)).workdir / "ran").exists()
        assert process_start_time(proc.pid) is None

    run(s, body)


def test_parallelism_is_bounded_and_logs_are_capped(settings: Settings, tmp_path: Path) -> None:
    s = local_settings(settings, tmp_path, local_parallelism=2, task_log_max_bytes=1000)
    marks = tmp_path / "marks"
    marks.mkdir()
    script = ("import os, sys, time, uuid; d = sys.argv[1]; n = len(os.listdir(d)) + 1; "
              "p = os.path.join(d, uuid.uuid4().hex); open(p, 'w').close(); print('concurrent', n); "
              "time.sleep(0.6); os.remove(p); sys.stdout.write('x' * 5000 + 'THE-END')")

    async def body(engine: AsyncEngine) -> None:
        tries = await seed_tries(engine, 5)
        rec = Recorder(engine)
        ex = LocalExecutor(s)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        for t in tries:
            await ex.submit(t.launch([PY, "-c", script, str(marks)], term=1))
        for t in tries:
            assert (await rec.wait_final(t.key)).state == "success"
        await ex.stop()
        seen = []
        for t in tries:
            full = (TryFiles(tmp_path, try_name("default", t.key)).log).read_text()
            seen.append(int(full.split()[1]))
            logs = await log_row(engine, t.task_try_id)
            assert logs is not None and logs["truncated"] is True
            assert str(logs["content"]).endswith("THE-END") and len(str(logs["content"])) == 1000
            assert int(logs["size_bytes"]) > 5000  # type: ignore[call-overload]
        assert max(seen) <= 2

    run(s, body)


def test_ex_leader_with_old_term_starts_nothing(settings: Settings, tmp_path: Path) -> None:
    s = local_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = LocalExecutor(s)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        await set_term(engine, "default", 2)  # someone else became leader
        await ex.submit(t.launch(["sh", "-c", "touch ran"], term=1))
        await asyncio.sleep(1.0)  # give a (wrong) launch every chance to happen
        await ex.stop()
        assert rec.updates == []
        assert not TryFiles(tmp_path, try_name("default", t.key)).root.exists()
        assert (await try_row(engine, t.task_try_id))["claimed_at"] is None

    run(s, body)


@pytest.mark.parametrize("key_count", [1])
def test_cancel_stops_the_process(settings: Settings, tmp_path: Path, key_count: int) -> None:
    s = local_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, key_count)
        rec = Recorder(engine)
        ex = LocalExecutor(s, kill_grace=2.0)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        await ex.submit(t.launch(["sleep", "60"], term=1))
        await rec.wait_for(lambda: "running" in rec.states(t.key), what="running")
        await ex.cancel(t.key)
        final = await rec.wait_final(t.key)
        await ex.cancel(t.key)  # finished: a no-op
        await ex.stop()
        assert (final.state, final.reason) == ("failed", "cancelled")

    run(s, body)


def test_database_outage_while_claiming_fails_the_try_instead_of_hanging(settings: Settings, tmp_path: Path) -> None:
    s = local_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        from leoflow.standalone.embedded import free_port
        [t] = await seed_tries(engine, 1)
        rec = Recorder()
        ex = LocalExecutor(s, claim_attempts=2)
        ctx = LeaderContext(1, s, Database(engine))
        await ex.start(ctx, rec)
        dead = dataclasses.replace(s.database, url=f"postgresql://nobody@127.0.0.1:{free_port()}/gone")
        ctx.db = Database(make_async_engine(dead, pool_size=1))  # the database goes away
        try:
            await ex.submit(t.launch(["sh", "-c", "touch ran"], term=1))
            final = await rec.wait_final(t.key)
        finally:
            await ex.stop()
            await ctx.db.dispose()
        assert final.state == "failed" and "could not claim" in str(final.reason)
        assert not TryFiles(tmp_path, try_name("default", t.key)).root.exists()

    run(s, body)
