"""``retry_policy`` (ADR 0014, decision 5): each rule on its own, in the pure state machine, and the
time budget (``max_duration_seconds``) on the database's clock with a real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from leoflow.db.stores.task_instances.transitions import LiveTaskInstance
from leoflow.executor.kubernetes import pods
from leoflow.model.spec.dag import TaskSpec, parse_dag_spec
from leoflow.model.spec.retry_policy import TryOutcome
from leoflow.model.tries import StatusUpdate, TryKey
from leoflow.scheduler.transitions import fold_reports, timeout_transition
from leoflow.settings import Settings
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import Stepper, container, stepper
from tests.scheduler.test_commands import command

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def task(**policy: Any) -> TaskSpec:
    spec = parse_dag_spec({"dag_id": "d", "tasks": [{"id": "t", "image": "x", "command": ["true"], "retries": 3,
                                                      "retry_delay_seconds": 10, "timeout_seconds": 60,
                                                      "retry_policy": policy}]})
    return spec.tasks[0]


def row(state: str = "running", try_number: int = 1) -> LiveTaskInstance:
    return LiveTaskInstance(id=7, run_pk=1, task_id="t", state=state, try_number=try_number, max_tries=4,
                            started_at=T0, dag_id="d", run_id="r", version_id=1)


def failed(spec: TaskSpec, try_number: int = 1, **kw: Any) -> tuple[str, float | None, str | None]:
    update = StatusUpdate(key=TryKey("d", "r", "t", try_number), state="failed", at=T0 + timedelta(seconds=30), **kw)
    t = fold_reports(row(try_number=try_number), [update], spec, max_retry_delay=3600)
    assert t is not None
    return t.new_state, t.retry_after, t.reason


@pytest.mark.parametrize(("factor", "delays"), [(None, [10, 20, 40]), (1, [10, 10, 10]), (3, [10, 30, 90]),
                                                 (2.5, [10, 25, 62.5])])
def test_the_factor_multiplies_the_delay_per_retry(factor: float | None, delays: list[float]) -> None:
    spec = task() if factor is None else task(factor=factor)
    assert [failed(spec, n, exit_code=1)[1] for n in (1, 2, 3)] == delays
    assert failed(task(factor=10), 3, exit_code=1)[1] == 1000  # 10 x 10^2
    capped = fold_reports(row(try_number=3), [StatusUpdate(TryKey("d", "r", "t", 3), "failed", T0)], task(factor=10),
                          max_retry_delay=300)
    assert capped is not None and capped.retry_after == 300  # the global cap still applies


def test_on_exit_codes_retries_only_those_codes() -> None:
    spec = task(on_exit_codes=[75, 137])
    assert failed(spec, exit_code=75)[:2] == ("up_for_retry", 10)
    assert failed(spec, exit_code=1) == ("failed", None, "exit code 1 (not retried: exit code 1 is not in "
                                                          "retry_policy.on_exit_codes)")
    timed_out = timeout_transition(row(), spec, now=T0, max_retry_delay=3600)
    assert timed_out is not None and timed_out.new_state == "failed"
    assert "no exit code is not in retry_policy.on_exit_codes" in (timed_out.reason or "")


def test_when_decides_over_the_try() -> None:
    spec = task(when='try.oom_killed || (try.exit_code == 75 && try.number < 3) || try.reason.startsWith("Evicted")')
    assert failed(spec, exit_code=137, reason="OOMKilled (exit code 137)")[0] == "up_for_retry"
    assert failed(spec, 1, exit_code=75)[0] == "up_for_retry"
    assert failed(spec, 3, exit_code=75) == ("failed", None, "exit code 75 (not retried: retry_policy.when was false)")
    assert failed(spec, exit_code=None, reason="Evicted: the node was low on memory")[0] == "up_for_retry"
    assert failed(spec, exit_code=1)[0] == "failed"
    timeouts = task(when="try.timed_out && try.duration_seconds >= 0.0")
    retried = timeout_transition(row(), timeouts, now=T0, max_retry_delay=3600)
    assert retried is not None and retried.new_state == "up_for_retry"
    assert failed(timeouts, exit_code=1)[0] == "failed"


def test_a_when_that_fails_to_evaluate_means_no_retry_and_says_why() -> None:
    spec = task(when="try.number / (try.number - try.number) == 1")  # a division by zero at run time
    state, _, reason = failed(spec, exit_code=1)
    assert state == "failed" and "not retried: retry_policy.when failed" in (reason or "")


def test_every_rule_must_allow_the_retry() -> None:
    spec = task(on_exit_codes=[75], when="try.number < 2")
    assert failed(spec, 1, exit_code=75)[0] == "up_for_retry"
    assert failed(spec, 2, exit_code=75)[0] == "failed"
    assert failed(spec, 1, exit_code=1)[0] == "failed"
    assert failed(task(), 1, exit_code=1)[0] == "up_for_retry"  # no policy: every failure while tries remain


async def started(st: Stepper, spec: dict[str, Any]) -> str:
    await apply(st.engine, spec)
    run_id = await trigger(st.engine, str(spec["dag_id"]))
    await st.tick(periodic=True)
    return run_id


async def deadline_in(st: Stepper, run_id: str) -> float | None:
    [(seconds,)] = await rows(st.engine, "SELECT extract(epoch FROM ti.retry_deadline_at - now()) FROM task_instances"
                              " ti JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r AND ti.task_id = 'a'",
                              r=run_id)
    return None if seconds is None else float(seconds)


def test_no_retry_starts_after_max_duration_on_the_database_clock(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "budget", "tasks": [container(
                "a", retries=5, retry_delay_seconds=0, retry_policy={"max_duration_seconds": 600})]})
            assert await deadline_in(st, run) is None  # not before the first try starts
            st.report(st.key("budget", run, "a"), "running")
            await st.tick()
            left = await deadline_in(st, run)
            assert left is not None and 590 < left <= 600
            st.report(st.key("budget", run, "a"), "failed", exit_code=1)
            await st.tick()
            assert st.key("budget", run, "a").try_number == 2  # retried at once: within the budget
            await st.sql("UPDATE task_instances SET retry_deadline_at = now() + interval '5 seconds' "
                         "WHERE task_id = 'a'")
            st.finish("budget", run, "a", "failed", reason="exit code 1")
            await st.tick()
            assert st.key("budget", run, "a").try_number == 3  # retry_after 0 < 5 s left: retried
            await st.sql("UPDATE task_instances SET retry_deadline_at = now() - interval '1 second' "
                         "WHERE task_id = 'a'")
            st.finish("budget", run, "a", "failed", reason="exit code 1")
            await st.tick()
            tasks = await st.tasks(run)
            assert tasks["a"] == ("failed", "exit code 1 (not retried: retry_policy.max_duration_seconds has passed)")
            assert await st.run(run) == ("failed", "task 'a' failed: exit code 1 (not retried: "
                                                   "retry_policy.max_duration_seconds has passed)")
            answer = await command(st, run, "clear", {"tasks": ["a"]})  # a clear gives a fresh budget
            assert answer["error"] is None
            assert await deadline_in(st, run) is None

    asyncio.run(main())


def test_a_delayed_retry_past_the_deadline_is_refused(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, {"dag_id": "late", "tasks": [container(
                "a", retries=5, retry_delay_seconds=120, retry_policy={"max_duration_seconds": 60})]})
            st.finish("late", run, "a", "failed", reason="exit code 1")
            await st.tick()
            tasks = await st.tasks(run)
            assert tasks["a"][0] == "failed" and "max_duration_seconds has passed" in (tasks["a"][1] or "")

    asyncio.run(main())


def test_the_kubernetes_reasons_set_oom_killed_evicted_and_timed_out() -> None:
    """The facts ``when`` reads come from the reasons the Kubernetes executor reports."""
    def pod(state: dict[str, object], **status: object) -> dict[str, object]:
        return {"spec": {"activeDeadlineSeconds": 5},
                "status": {"phase": "Failed", "containerStatuses": [{"name": "task", "state": state}], **status}}

    def facts(outcome: pods.PodOutcome) -> dict[str, Any]:
        return TryOutcome(1, outcome.exit_code, outcome.reason).variables()["try"]

    oom = facts(pods.pod_outcome(pod({"terminated": {"exitCode": 137, "reason": "OOMKilled"}})))
    evicted = facts(pods.pod_outcome(pod({}, reason="Evicted", message="low on memory")))
    deadline = facts(pods.pod_outcome(pod({"terminated": {"exitCode": 137}}, reason="DeadlineExceeded")))
    error = facts(pods.pod_outcome(pod({"terminated": {"exitCode": 3, "reason": "Error"}})))
    assert (oom["oom_killed"], oom["evicted"], oom["timed_out"], oom["exit_code"]) == (True, False, False, 137)
    assert (evicted["oom_killed"], evicted["evicted"], evicted["exit_code"]) == (False, True, -1)
    assert (deadline["timed_out"], deadline["oom_killed"]) == (True, False)
    assert (error["oom_killed"], error["evicted"], error["timed_out"]) == (False, False, False)
    spec = task(when="try.oom_killed || try.evicted")
    assert failed(spec, exit_code=137, reason="OOMKilled (exit code 137)")[0] == "up_for_retry"
    assert failed(spec, reason="Evicted: low on memory")[0] == "up_for_retry"
    assert failed(spec, exit_code=3, reason="Error (exit code 3)")[0] == "failed"
