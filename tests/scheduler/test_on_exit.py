"""Exit tasks (``on_exit``) and the run's outcome, one tick at a time on real PostgreSQL (ADR 0014, decision 7).

The rule under test: when the exit tasks are final, the run is ``failed`` if one of them failed
(or was ``upstream_failed``), else what its body decided — an exit task can turn a success into a
failure, never the reverse, and a skipped one changes nothing. Exit tasks have no rows until the
body is final; the transaction that finds that records the body's verdict and creates them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores.runs import exits as run_exits
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.db.stores.runs import reads as run_reads
from leoflow.errors import FencedOut, ValidationFailed
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.notify import DEADLINE_REASON, event_of_run
from leoflow.settings import Settings
from tests.scheduler.conftest import SweepRepairs
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import Stepper, container, stepper
from tests.scheduler.test_commands import command
from tests.scheduler.test_split_ticks import split_always


def spec(dag_id: str, *, tasks: list[dict[str, Any]] | None = None, on_exit: list[dict[str, Any]] | None = None,
         **extra: Any) -> dict[str, Any]:
    return {"dag_id": dag_id, "tasks": tasks or [container("a")],
            "on_exit": on_exit or [container("notify", skip_on_exit_code=[99])], **extra}


async def started(st: Stepper, doc: dict[str, Any]) -> str:
    await apply(st.engine, doc)
    run_id = await trigger(st.engine, str(doc["dag_id"]))
    await st.tick(periodic=True)
    return run_id


async def body(st: Stepper, run_id: str) -> tuple[str | None, str | None]:
    [(state, reason)] = await rows(st.engine, "SELECT body_state, body_reason FROM dag_runs WHERE run_id = :r",
                                   r=run_id)
    return state, reason


def launches(st: Stepper, run_id: str, task_id: str) -> list[dict[str, str]]:
    """The environments of the task's launches, in order."""
    return [dict(launch.env) for launch in st.executor.launched
            if launch.key.run_id == run_id and launch.key.task_id == task_id]


def test_exit_tasks_wait_for_the_body_and_a_failing_one_fails_a_successful_run(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("fails-late"))
            assert set(await st.tasks(run)) == {"a"}  # no exit row while the body runs
            st.finish("fails-late", run, "a")
            await st.tick()
            assert await st.run(run) == ("running", None)
            assert await body(st, run) == ("success", None)
            [env] = launches(st, run, "notify")
            assert (env["LEOFLOW_RUN_STATE"], env["LEOFLOW_RUN_REASON"]) == ("success", "")
            assert "LEOFLOW_RUN_STATE" not in launches(st, run, "a")[0]
            st.finish("fails-late", run, "notify", "failed", reason="webhook answered 500")
            await st.tick()
            assert await st.run(run) == ("failed", "on_exit task 'notify' failed: webhook answered 500")

    asyncio.run(main())


def test_exit_tasks_run_after_a_failed_body_and_their_success_keeps_it_failed(settings: Settings) -> None:
    """A chain of exit tasks runs after a failure; its success does not make the run a success."""
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("stays-failed", tasks=[container("a"), container("b", "a")],
                                         on_exit=[container("notify"), container("archive", "notify")]))
            st.finish("stays-failed", run, "a", "failed", reason="exit code 3")
            await st.tick()
            assert (await st.tasks(run))["b"][0] == "upstream_failed"
            assert await st.run(run) == ("running", None)
            assert await body(st, run) == ("failed", "task 'a' failed: exit code 3")
            [env] = launches(st, run, "notify")
            assert (env["LEOFLOW_RUN_STATE"], env["LEOFLOW_RUN_REASON"]) == ("failed", "task 'a' failed: exit code 3")
            assert (await st.tasks(run))["archive"][0] == "pending"  # exit tasks keep their own order
            st.finish("stays-failed", run, "notify")
            await st.tick()
            assert await st.run(run) == ("running", None)
            st.finish("stays-failed", run, "archive")
            await st.tick()
            assert await st.run(run) == ("failed", "task 'a' failed: exit code 3")

    asyncio.run(main())


@pytest.mark.parametrize("body_fails", [False, True])
def test_a_skipped_exit_task_keeps_the_body_state(settings: Settings, body_fails: bool) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("skips"))
            st.finish("skips", run, "a", "failed" if body_fails else "success")
            await st.tick()
            key = st.key("skips", run, "notify")
            st.report(key, "running")
            st.report(key, "failed", exit_code=99)  # skip_on_exit_code: skipped
            await st.tick()
            assert (await st.tasks(run))["notify"][0] == "skipped"
            assert (await st.run(run))[0] == ("failed" if body_fails else "success")

    asyncio.run(main())


def test_an_upstream_failed_exit_task_fails_the_run(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("exit-chain", on_exit=[container("notify", retries=0),
                                                                container("archive", "notify")]))
            st.finish("exit-chain", run, "a")
            await st.tick()
            st.finish("exit-chain", run, "notify", "failed", reason="exit code 7")
            await st.tick()
            assert (await st.tasks(run))["archive"][0] == "upstream_failed"
            assert await st.run(run) == ("failed", "on_exit task 'notify' failed: exit code 7")

    asyncio.run(main())


def test_empty_exit_tasks_end_the_run_in_the_step_that_ends_the_body(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("empty-exit", on_exit=[{"id": "mark", "kind": "empty"}]))
            st.finish("empty-exit", run, "a")
            await st.tick()
            assert await st.run(run) == ("success", None)
            assert (await st.tasks(run))["mark"][0] == "success"

    asyncio.run(main())


def test_a_leader_killed_before_the_exit_rows_commit_leaves_nothing_half(settings: Settings,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The body's verdict and the exit rows commit together: a leader killed in between commits
    neither, and the next leader creates them once, however many times it looks."""
    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4, application_name="leoflow-test-failover")
        try:
            await failover(engine)
        finally:
            await engine.dispose()

    async def failover(engine: AsyncEngine) -> None:
        async with stepper(settings, term=1, engine=engine) as old:
            run = await started(old, spec("failover"))
            key = old.key("failover", run, "a")
            real = run_exits.create_exit_tasks

            async def killed(*args: Any, **kwargs: Any) -> Any:
                await real(*args, **kwargs)  # the rows are written in the transaction...
                raise FencedOut("a newer term took over")  # ...and the leader is deposed before it commits

            monkeypatch.setattr(run_exits, "create_exit_tasks", killed)
            old.report(key, "running")
            old.report(key, "success", exit_code=0)
            with pytest.raises(FencedOut):
                await old.tick()
            monkeypatch.setattr(run_exits, "create_exit_tasks", real)
            assert await body(old, run) == (None, None)
            assert set(await old.tasks(run)) == {"a"}
        async with stepper(settings, term=2, engine=engine) as new:
            new.report(key, "running")  # the executor's reconcile reports the try again
            new.report(key, "success", exit_code=0)
            await new.tick()
            for _ in range(3):
                await new.core.sweep_runs(force=True)
                await new.tick(periodic=True)
            assert await body(new, run) == ("success", None)
            assert [e["LEOFLOW_TRY_NUMBER"] for e in launches(new, run, "notify")] == ["1"]
            [(count,)] = await rows(new.engine, "SELECT count(*) FROM task_instances ti JOIN dag_runs r "
                                    "ON r.id = ti.run_pk WHERE r.run_id = :r AND ti.task_id = 'notify'", r=run)
            assert count == 1
            new.finish("failover", run, "notify")
            await new.tick()
            assert await new.run(run) == ("success", None)

    asyncio.run(main())


def test_the_sweep_starts_the_exit_tasks_of_a_body_left_ended(settings: Settings,
                                                               sweep_repairs: SweepRepairs) -> None:
    """A body whose last task ended without the run being looked at (an older leader, a bug): the
    completion sweep records its verdict and creates the exit tasks once."""
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("swept"))
            await st.sql("UPDATE task_instances SET state = 'failed', reason = 'lost', ended_at = now() "
                         "WHERE task_id = 'a' AND run_pk = (SELECT id FROM dag_runs WHERE run_id = :r)", r=run)
            await st.core.sweep_runs(force=True)
            await st.core.sweep_runs(force=True)
            assert await body(st, run) == ("failed", "task 'a' failed: lost")
            await st.tick(periodic=True)
            assert len(launches(st, run, "notify")) == 1
            st.finish("swept", run, "notify")
            await st.tick()
            assert await st.run(run) == ("failed", "task 'a' failed: lost")

    asyncio.run(main())


def test_runs_cancel_cancels_the_exit_tasks(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("cancelled"))
            st.finish("cancelled", run, "a")
            await st.tick()
            st.report(st.key("cancelled", run, "notify"), "running")
            await st.tick()
            async with st.engine.begin() as conn:
                await run_store.cancel_run(conn, "cancelled", run)
            await st.tick(periodic=True)
            assert (await st.run(run))[0] == "cancelled"
            assert (await st.tasks(run))["notify"] == ("cancelled", "run cancelled")
            key = st.key("cancelled", run, "notify")
            for _ in range(50):  # the kill runs beside the loop
                if key in st.executor.cancelled:
                    break
                await asyncio.sleep(0.1)
            assert key in st.executor.cancelled

    asyncio.run(main())


def test_a_run_deadline_fails_the_body_and_the_exit_tasks_still_run(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("deadline", tasks=[container("a"), container("b", "a")],
                                         run_timeout_seconds=600))
            st.report(st.key("deadline", run, "a"), "running")
            await st.tick()
            await st.sql("UPDATE dag_runs SET deadline_at = now() - interval '1 second' WHERE run_id = :r", r=run)
            await st.tick(periodic=True)
            assert await st.run(run) == ("running", None)
            assert await body(st, run) == ("failed", DEADLINE_REASON)
            tasks = await st.tasks(run)
            assert tasks["a"] == ("cancelled", f"run failed: {DEADLINE_REASON}")
            [env] = launches(st, run, "notify")
            assert (env["LEOFLOW_RUN_STATE"], env["LEOFLOW_RUN_REASON"]) == ("failed", DEADLINE_REASON)
            [(deadline,)] = await rows(st.engine, "SELECT deadline_at FROM dag_runs WHERE run_id = :r", r=run)
            assert deadline is None  # exit tasks run under their own timeouts
            st.finish("deadline", run, "notify")
            await st.tick()
            assert await st.run(run) == ("failed", DEADLINE_REASON)

    asyncio.run(main())


def test_clearing_a_body_task_cancels_the_exit_tasks_and_runs_them_again_after_it(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("cleared"))
            st.finish("cleared", run, "a", "failed")
            await st.tick()
            old_notify = st.key("cleared", run, "notify")
            st.report(old_notify, "running")
            await st.tick()
            answer = await command(st, run, "clear", {"tasks": ["a"]})
            assert answer["error"] is None
            assert await body(st, run) == (None, None)
            assert (await st.tasks(run))["notify"][0] == "cancelled"
            st.report(old_notify, "failed", exit_code=137, reason="killed")  # the old exit try is gone
            await st.tick(periodic=True)
            st.finish("cleared", run, "a")
            await st.tick()
            await st.tick(periodic=True)
            assert await body(st, run) == ("success", None)
            envs = launches(st, run, "notify")
            assert [(e["LEOFLOW_TRY_NUMBER"], e["LEOFLOW_RUN_STATE"]) for e in envs] == [("1", "failed"),
                                                                                        ("2", "success")]
            st.finish("cleared", run, "notify")
            await st.tick()
            assert await st.run(run) == ("success", None)

    asyncio.run(main())


def test_clearing_an_exit_task_keeps_the_body_verdict(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("reexit"))
            st.finish("reexit", run, "a")
            await st.tick()
            st.finish("reexit", run, "notify", "failed")
            await st.tick()
            assert (await st.run(run))[0] == "failed"
            await command(st, run, "clear", {"tasks": ["notify"]})
            assert await body(st, run) == ("success", None)
            assert (await st.run(run))[0] == "running"
            st.finish("reexit", run, "notify")
            await st.tick()
            assert await st.run(run) == ("success", None)

    asyncio.run(main())


def test_the_run_document_shows_the_exit_tasks_and_the_body_state(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("document"))
            st.finish("document", run, "a", "failed")
            await st.tick()
            async with st.engine.connect() as conn:
                doc = await run_reads.get_run(conn, "document", run)
            assert doc is not None
            assert doc["body_state"] == "failed" and doc["state"] == "running"
            assert {t["task_id"]: t["state"] for t in doc["tasks"]} == {"a": "failed", "notify": "queued"}

    asyncio.run(main())


def test_bodies_ending_in_the_parts_of_a_split_tick_start_their_exit_tasks_once(settings: Settings) -> None:
    """Reports of four runs split into concurrent steps (ADR 0012): each part ends its runs' bodies and
    creates their exit tasks; none is created twice and every run ends by its exit task."""
    async def main() -> None:
        async with stepper(settings) as st:
            seen = split_always(st)
            await apply(st.engine, spec("split", on_exit=[container("notify"), container("archive", "notify")]))
            runs = [await trigger(st.engine, "split") for _ in range(4)]
            await st.tick(periodic=True)
            for run in runs:
                st.finish("split", run, "a", "failed" if run == runs[0] else "success")
            await st.tick()
            assert seen["ticks"] == 1 and seen["parts"] > 1
            await st.tick(periodic=True)
            for run in runs:
                assert len(launches(st, run, "notify")) == 1
                st.finish("split", run, "notify")
            await st.tick()
            await st.tick(periodic=True)
            for run in runs:
                assert len(launches(st, run, "archive")) == 1
                st.finish("split", run, "archive")
            await st.tick()
            [(count,)] = await rows(st.engine, "SELECT count(*) FROM task_instances "
                                    "WHERE task_id IN ('notify', 'archive')")
            assert count == 8
            assert [(await st.run(run))[0] for run in runs] == ["failed", "success", "success", "success"]

    asyncio.run(main())


def test_a_deadline_stays_a_deadline_for_notifications_when_an_exit_task_fails_after_it() -> None:
    assert event_of_run("failed", f"{DEADLINE_REASON}; on_exit task 'notify' failed: exit code 1") == "deadline"
    assert event_of_run("failed", "task 'a' failed: exit code 1; on_exit task 'notify' failed: x") == "failure"
    assert event_of_run("failed", "on_exit task 'notify' failed: x") == "failure"


def test_an_exit_task_whose_when_is_false_is_skipped_and_changes_nothing(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, spec("exit-when", on_exit=[container("never", when='run.id == ""'),
                                                               container("always", when='run.id != ""')]))
            st.finish("exit-when", run, "a", "failed")
            await st.tick()
            tasks = await st.tasks(run)
            assert tasks["never"] == ("skipped", "when was false")
            assert tasks["always"][0] == "queued"
            st.finish("exit-when", run, "always")
            await st.tick()
            assert await st.run(run) == ("failed", "task 'a' failed: exit code 1")

    asyncio.run(main())


def test_an_exit_task_reads_the_runs_state_and_reason_in_its_templates(settings: Settings) -> None:
    """``{{ run.state }}`` / ``{{ run.reason }}`` / ``{{ run.failed_tasks }}``: what the other tasks
    decided, rendered into the exit task's argv (the same facts as LEOFLOW_RUN_STATE/REASON, and the
    tasks that failed); anywhere else they are a 422 at apply."""
    async def main() -> None:
        async with stepper(settings) as st:
            notify = container("notify", args=["--state", "{{ run.state }}", "--why", "{{ run.reason }}",
                                               "--failed", "{{ run.failed_tasks }}"])
            run = await started(st, spec("says-state", tasks=[container("a"), container("b"), container("c", "a")],
                                         on_exit=[notify]))
            st.finish("says-state", run, "a", "failed", reason="exit code 3")
            st.finish("says-state", run, "b", "failed", reason="exit code 4")
            await st.tick()
            [launch] = [la for la in st.executor.launched if la.key.run_id == run and la.key.task_id == "notify"]
            assert launch.args[:2] == ("--state", "failed") and launch.args[3].startswith("task '")
            assert launch.args[4:] == ("--failed", '["a","b"]')  # not c: it never ran (upstream_failed)
            with pytest.raises(ValidationFailed, match="only available in exit tasks"):
                parse_dag_spec(spec("body-state", tasks=[container("a", args=["{{ run.state }}"])]))

    asyncio.run(main())
