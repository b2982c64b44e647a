"""Clearing a running task never runs its next try beside the old one (issue 44, item 6).

The real local executor and real processes: the task's first try ignores SIGTERM and appends to a
journal five times a second; it is cleared while it runs. Before: the clear set the task
``pending`` and the same step queued try 2, which started while try 1 kept writing for the whole
kill grace (9 s in the report). Now the task waits in ``cancelling`` (the API shows it) until try
1's process is gone — SIGKILLed after ``kill_grace`` — and only then is try 2 queued.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import commands
from leoflow.executor.local.executor import LocalExecutor
from leoflow.settings import Settings
from tests.scheduler.harness import (
    apply,
    eventually,
    process_alive,
    rows,
    run_state,
    running_scheduler,
    task_states,
    trigger,
)
from tests.scheduler.test_service_local import local, shell

#: Seconds between SIGTERM and SIGKILL here: long enough that try 1 visibly outlives its SIGTERM.
GRACE = 3.0


def stubborn(journal: Path, pidfile: Path) -> dict[str, object]:
    """Try 1 ignores SIGTERM and writes forever; any later try writes one line and succeeds."""
    script = (f'if [ "$LEOFLOW_TRY_NUMBER" = 1 ]; then trap "" TERM; echo $$ > "{pidfile}.tmp"; '
              f'mv "{pidfile}.tmp" "{pidfile}"; '
              f'while true; do echo "try1" >> "{journal}"; sleep 0.2; done; '
              f'else echo "try$LEOFLOW_TRY_NUMBER" >> "{journal}"; fi')
    return {"dag_id": "stubborn", "tasks": [shell("loop", script)]}


def test_a_cleared_task_waits_in_cancelling_until_its_sigterm_ignoring_try_is_killed(settings: Settings,
                                                                                      tmp_path: Path) -> None:
    s = local(settings, tmp_path / "home")
    journal, pidfile = tmp_path / "journal.txt", tmp_path / "pid"

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, stubborn(journal, pidfile))
            async with running_scheduler(s, LocalExecutor(s, kill_grace=GRACE), engine=engine):
                run_id = await trigger(engine, "stubborn")
                await eventually(lambda: asyncio.sleep(0, pidfile.exists()), bool, timeout=60)
                pid = int(pidfile.read_text())
                await eventually(lambda: task_states(engine, run_id), lambda t: t.get("loop") == "running", timeout=30)
                [(run_pk,)] = await rows(engine, "SELECT id FROM dag_runs WHERE run_id = :r", r=run_id)
                async with engine.begin() as conn:  # as the API records it
                    await commands.create_command(conn, run_pk=run_pk, dag_id="stubborn", kind="clear",
                                                       body={"tasks": ["loop"]}, requested_by="ops")
                await eventually(lambda: task_states(engine, run_id), lambda t: t.get("loop") != "running", timeout=30)
                # While try 1's process lives, the task shows `cancelling` and no try 2 exists.
                seen = 0
                while process_alive(pid):
                    states = await task_states(engine, run_id)
                    tries = await rows(engine, "SELECT max(try_number) FROM task_instances")
                    if not process_alive(pid):
                        break
                    assert states["loop"] == "cancelling", states
                    assert tries == [(1,)]
                    seen += 1
                    await asyncio.sleep(0.2)
                assert seen >= 3  # it ignored SIGTERM for the grace (3 s), and was looked at meanwhile
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"),
                                 timeout=60)
            assert await run_state(engine, run_id) == "success"
            lines = journal.read_text().split()
            assert lines.count("try2") == 1
            # Every line of try 1 was written before try 2 started: never side by side.
            assert "try1" not in lines[lines.index("try2"):]
            tries = await rows(engine, "SELECT try_number, state FROM task_tries ORDER BY try_number")
            assert tries == [(1, "cancelled"), (2, "success")]
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_a_new_leader_carries_on_killing_and_releasing_a_cleared_task(settings: Settings, tmp_path: Path) -> None:
    """Leadership changes mid-cancel: term 1 clears the task and stops while try 1 ignores its
    SIGTERM; term 2 (a new scheduler and executor) kills try 1 again, waits for it, and only then
    runs try 2 — from what the database says, not from term 1's memory."""
    s = local(settings, tmp_path / "home")
    journal, pidfile = tmp_path / "journal.txt", tmp_path / "pid"

    async def cancelling_while_alive(engine: Any, run_id: str, pid: int) -> int:
        seen = 0
        while process_alive(pid):
            states = await task_states(engine, run_id)
            tries = await rows(engine, "SELECT max(try_number) FROM task_instances")
            if not process_alive(pid):
                break
            assert states["loop"] == "cancelling", states
            assert tries == [(1,)]
            seen += 1
            await asyncio.sleep(0.2)
        return seen

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, stubborn(journal, pidfile))
            async with running_scheduler(s, LocalExecutor(s, kill_grace=GRACE), engine=engine, term=1):
                run_id = await trigger(engine, "stubborn")
                await eventually(lambda: asyncio.sleep(0, pidfile.exists()), bool, timeout=60)
                pid = int(pidfile.read_text())
                await eventually(lambda: task_states(engine, run_id), lambda t: t.get("loop") == "running",
                                 timeout=30)
                [(run_pk,)] = await rows(engine, "SELECT id FROM dag_runs WHERE run_id = :r", r=run_id)
                async with engine.begin() as conn:
                    await commands.create_command(conn, run_pk=run_pk, dag_id="stubborn", kind="clear",
                                                       body={"tasks": ["loop"]}, requested_by="ops")
                await eventually(lambda: task_states(engine, run_id), lambda t: t.get("loop") == "cancelling",
                                 timeout=30)
                await asyncio.sleep(0.5)  # term 1's kill has sent SIGTERM, which try 1 ignores
            assert process_alive(pid)  # term 1 is gone before its SIGKILL
            assert await task_states(engine, run_id) == {"loop": "cancelling"}
            async with running_scheduler(s, LocalExecutor(s, kill_grace=GRACE), engine=engine, term=2):
                assert await cancelling_while_alive(engine, run_id, pid) >= 3
                await eventually(lambda: run_state(engine, run_id), lambda st: st in ("success", "failed"),
                                 timeout=60)
            assert await run_state(engine, run_id) == "success"
            lines = journal.read_text().split()
            assert lines.count("try2") == 1 and "try1" not in lines[lines.index("try2"):]
            tries = await rows(engine, "SELECT try_number, state, term FROM task_tries ORDER BY try_number")
            assert [(n, st) for n, st, _ in tries] == [(1, "cancelled"), (2, "success")]
            assert tries[1][2] == 2  # try 2 was queued by the new leader
        finally:
            await engine.dispose()

    asyncio.run(main())
