"""Notifications end to end: endings → outbox → a real HTTP receiver, at least once, with backoff."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.local.executor import LocalExecutor
from leoflow.executor.memory import MemoryExecutor, Outcome
from leoflow.model.tries import TaskLaunch
from leoflow.settings import NotifySettings, Settings
from tests.day2.harness import LOOPBACK, WebhookReceiver, leader, wait_for
from tests.scheduler.harness import apply, fast, rows, run_state, trigger

SECRET_URL = "http://127.0.0.1:9/very-secret-webhook-path"


def notifying(settings: Settings, **notify: Any) -> Settings:
    values = {"retry_delay": 0.05, "allowed_hosts": LOOPBACK, **notify}
    return fast(settings).replace(notify=NotifySettings(**values))


def task(task_id: str, *deps: str, **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], "depends_on": list(deps), **extra}


def failing_on(task_id: str, run_id: str | None = None) -> Any:
    def outcome(launch: TaskLaunch) -> Outcome:
        if launch.key.task_id == task_id and run_id in (None, launch.key.run_id):
            return ("failed", 1, "exit code 1")
        return ("success", 0, None)
    return outcome


async def outbox(engine: Any) -> list[Any]:
    return await rows(engine, "SELECT event, target, state, attempts, last_status, task_id, try_number "
                      "FROM notifications ORDER BY id")


def test_failure_retry_and_success_reach_the_receiver_which_fails_three_times(settings: Settings) -> None:
    s = notifying(settings, dashboard_url="https://leoflow.example")
    with WebhookReceiver(fail_first=3).serving() as receiver:
        spec = {"dag_id": "etl", "notify": [
            {"on": ["failure", "retry"], "webhook": {"url": receiver.url}},
            {"on": ["success"], "webhook": {"url": receiver.url + "/ok"}}],
            "tasks": [task("extract", retries=1, retry_delay_seconds=0), task("load", "extract")]}

        async def main() -> None:
            engine = make_async_engine(s.database, pool_size=4)
            try:
                await apply(engine, spec)
                async with leader(s, MemoryExecutor(outcome=failing_on("extract", "r-fail")), engine=engine):
                    failed = await trigger(engine, "etl", "r-fail")
                    await wait_for(lambda: len(receiver.accepted()) >= 2, timeout=30)
                    # A run that succeeds goes to the success rule only.
                    await apply(engine, {**spec, "tasks": [task("extract"), task("load", "extract")]})
                    await trigger(engine, "etl", "r-ok")
                    await wait_for(lambda: len(receiver.accepted()) >= 3, timeout=30)
                    await wait_for(lambda: _states_all(engine, "delivered"), timeout=30)
                assert await run_state(engine, failed) == "failed"
                got = receiver.accepted()
                assert receiver.attempts == 6  # three refused, then three accepted
                retry, failure, success = sorted(got, key=lambda d: ["retry", "failure", "success"].index(
                    d.json["event"]))
                assert (retry.json["task_id"], retry.json["try_number"], retry.json["state"]) == ("extract", 1,
                                                                                                  "up_for_retry")
                assert failure.json["event"] == "failure" and failure.json["task_id"] == "extract"
                assert failure.json["try_number"] == 2 and failure.json["reason"] == "exit code 1"
                assert failure.json["url"] == "https://leoflow.example/#/dags/etl/runs/r-fail"
                assert failure.json["text"].startswith("[default] DAG *etl* run `r-fail` failed - task `extract`")
                assert "<https://leoflow.example/#/dags/etl/runs/r-fail|open in Leoflow>" in failure.json["text"]
                assert success.path == "/hook/ok" and success.json["state"] == "success"
                assert set(failure.json) >= {"text", "event", "dag_id", "run_id", "task_id", "state", "reason", "url"}
                assert failure.headers["Content-Type"] == "application/json"
                assert failure.headers["X-Leoflow-Event"] == "failure"
                box = await outbox(engine)
                assert sorted((e, st) for e, _t, st, *_ in box) == [
                    ("failure", "delivered"), ("retry", "delivered"), ("success", "delivered")]
                attempts = sorted(r[3] for r in box)
                assert sum(attempts) == 6 and max(attempts) >= 2  # the refusals were retried
            finally:
                await engine.dispose()

        asyncio.run(main())


def test_default_webhook_signatures_headers_and_opting_out(settings: Settings, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    secrets = tmp_path / "notify-secrets"
    (secrets / "hooks").mkdir(parents=True)
    (secrets / "hooks" / "signing").write_text("s3cret-signing-key\n")
    with WebhookReceiver().serving() as receiver:
        s = notifying(settings, webhook=receiver.url + "/default", events=("failure",), secrets_dir=secrets,
                      header_values=(("LEOFLOW_NOTIFY_HEADER_TOKEN", "Bearer header-secret"),))
        outcome = failing_on("t")

        async def main() -> None:
            engine = make_async_engine(s.database, pool_size=4)
            try:
                await apply(engine, {"dag_id": "plain", "tasks": [task("t")]})  # -> the default webhook
                await apply(engine, {"dag_id": "quiet", "notify": [], "tasks": [task("t")]})  # -> nothing
                await apply(engine, {"dag_id": "signed", "tasks": [task("t")], "notify": [{
                    "on": ["failure"], "webhook": {"url": receiver.url + "/signed",
                                                   "secret": {"name": "hooks", "key": "signing"},
                                                   "header_from_env": {"header": "Authorization",
                                                                       "env": "LEOFLOW_NOTIFY_HEADER_TOKEN"}}}]})
                async with leader(s, MemoryExecutor(outcome=outcome), engine=engine):
                    for dag in ("plain", "quiet", "signed"):
                        await trigger(engine, dag, f"{dag}-1")
                    await wait_for(lambda: len(receiver.accepted()) >= 2, timeout=30)
                    await wait_for(lambda: _all_observed(engine), timeout=30)
                by_path = {d.path: d for d in receiver.accepted()}
                assert sorted(by_path) == ["/hook/default", "/hook/signed"]
                signed = by_path["/hook/signed"]
                expected = hmac.new(b"s3cret-signing-key", signed.body, hashlib.sha256).hexdigest()
                assert signed.headers["X-Leoflow-Signature-256"] == f"sha256={expected}"
                assert signed.headers["Authorization"] == "Bearer header-secret"
                assert "X-Leoflow-Signature-256" not in by_path["/hook/default"].headers
                assert by_path["/hook/default"].json["dag_id"] == "plain"
                box = await rows(engine, "SELECT dag_id, target, webhook::text FROM notifications ORDER BY dag_id")
                assert [(d, t) for d, t, _ in box] == [("plain", "default"), ("signed", "dag")]
                stored = " ".join(w for *_, w in box)
                assert receiver.url + "/default" not in stored and "s3cret" not in stored and "header-secret" \
                    not in stored
            finally:
                await engine.dispose()

        with caplog.at_level(logging.DEBUG):
            asyncio.run(main())
        logged = "\n".join(r.getMessage() + repr(vars(r)) for r in caplog.records if r.name.startswith("leoflow"))
        assert "/hook/default" not in logged and "s3cret" not in logged and "header-secret" not in logged


async def _all_observed(engine: Any) -> bool:
    left = await rows(engine, "SELECT count(*) FROM dag_runs WHERE ended_at IS NULL OR observed_at IS NULL")
    return bool(left[0][0] == 0)


def test_deadline_is_its_own_event_and_reaches_failure_rules(settings: Settings) -> None:
    """The run deadline belongs to the scheduler; its reason is the agreed text."""
    s = notifying(settings)
    with WebhookReceiver().serving() as receiver:
        async def main() -> None:
            engine = make_async_engine(s.database, pool_size=4)
            try:
                await apply(engine, {"dag_id": "slow", "tasks": [task("t")], "notify": [
                    {"on": ["failure"], "webhook": {"url": receiver.url + "/f"}},
                    {"on": ["deadline", "failure"], "webhook": {"url": receiver.url + "/both"}},
                    {"on": ["success"], "webhook": {"url": receiver.url + "/s"}}]})
                run_id = await trigger(engine, "slow", "late")
                await _end_run(engine, run_id, "failed", "run deadline exceeded")
                async with leader(s, MemoryExecutor(), engine=engine, services=("observer", "deliverer")):
                    await wait_for(lambda: len(receiver.accepted()) >= 2, timeout=30)
                    await asyncio.sleep(0.3)  # nothing else comes
                got = sorted((d.path, d.json["event"], d.json["reason"]) for d in receiver.accepted())
                assert got == [("/hook/both", "deadline", "run deadline exceeded"),
                               ("/hook/f", "deadline", "run deadline exceeded")]
            finally:
                await engine.dispose()

        asyncio.run(main())


async def _end_run(engine: Any, run_id: str, state: str, reason: str | None) -> None:
    from sqlalchemy import text

    async with engine.begin() as conn:
        await conn.execute(text("UPDATE dag_runs SET state = :s, reason = :r, started_at = now() - interval '90 s', "
                                "ended_at = now() WHERE run_id = :id"), {"s": state, "r": reason, "id": run_id})


def test_undeliverable_notifications_give_up_and_never_block_scheduling(settings: Settings) -> None:
    """A dead webhook: runs keep being scheduled, the row ends failed with the reason, no URL leaks."""
    s = notifying(settings, webhook=SECRET_URL)

    async def main() -> None:
        engine = make_async_engine(s.database, pool_size=4)
        try:
            await apply(engine, {"dag_id": "d", "tasks": [task("t")]})
            async with leader(s, MemoryExecutor(outcome=failing_on("t")), engine=engine):
                first = await trigger(engine, "d", "first")
                await wait_for(lambda: outbox(engine), timeout=30)
                from sqlalchemy import text
                async with engine.begin() as conn:  # make it give up at its next failure
                    await conn.execute(text("UPDATE notifications SET give_up_at = now()"))
                await wait_for(lambda: _states(engine, "failed"), timeout=30)
                second = await trigger(engine, "d", "second")
                await wait_for(lambda: _run_done(engine, second), timeout=30)
            assert await run_state(engine, first) == "failed"
            row = (await rows(engine, "SELECT state, last_error, attempts FROM notifications "
                              "WHERE run_id = 'first'"))[0]
            assert row[0] == "failed" and row[1] == "could not connect" and row[2] >= 1
            assert "very-secret" not in json.dumps([list(r) for r in await rows(engine, "SELECT * FROM notifications")],
                                                   default=str)
        finally:
            await engine.dispose()

    asyncio.run(main())


async def _states(engine: Any, state: str) -> bool:
    return bool(await rows(engine, "SELECT 1 FROM notifications WHERE state = :s", s=state))


async def _states_all(engine: Any, state: str) -> bool:
    # bool_and is NULL without rows: only a table of rows all in `state` counts.
    return (await rows(engine, "SELECT bool_and(state = :s) FROM notifications", s=state))[0][0] is True


async def _run_done(engine: Any, run_id: str) -> bool:
    return await run_state(engine, run_id) in ("success", "failed")


def test_with_the_local_executor_a_failing_process_is_notified(settings: Settings, tmp_path: Path) -> None:
    base = notifying(settings)
    s = base.replace(home=tmp_path / "home", executor=dataclasses.replace(base.executor, kind="local",
                                                                          local_parallelism=2))
    with WebhookReceiver().serving() as receiver:
        async def main() -> None:
            engine = make_async_engine(s.database, pool_size=4)
            try:
                await apply(engine, {"dag_id": "local", "notify": [
                    {"on": ["failure"], "webhook": {"url": receiver.url}}], "tasks": [
                    {"id": "boom", "image": "busybox", "command": ["sh", "-c", "echo bye; exit 7"]}]})
                async with leader(s, LocalExecutor(s, kill_grace=2.0), engine=engine):
                    await trigger(engine, "local", "r1")
                    await wait_for(lambda: receiver.accepted(), timeout=60)
                body = receiver.accepted()[0].json
                assert (body["event"], body["task_id"], body["run_id"]) == ("failure", "boom", "r1")
                assert "7" in (body["reason"] or "")
            finally:
                await engine.dispose()

        asyncio.run(main())
