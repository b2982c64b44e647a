"""A task's outputs through the API (ADR 0014, decision 1): in the task-instance document and
from ``GET …/tasks/{task_id}/outputs``, the current ones only (try ``try_number`` while the
instance is ``success``), readable with a read token, 404 for what does not exist.

Tries and their stored outputs are planted as the leader leaves them (``seed_task``, then the
try's ``outputs``/``outputs_bytes``); a clear is the leader's own statement
(:func:`leoflow.db.stores.commands.reset_task_instances`). One test reads what the leader's own
steps stored (success, clear, the next success), so the read side cannot drift from the writes.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb
from sqlalchemy import event

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import commands as command_store
from leoflow.db.stores.task_instances import reads as ti_reads
from leoflow.model.tries import StatusUpdate, TryKey
from leoflow.settings import Settings
from tests.api.conftest import ADMIN, READ, api_settings, seed_task, spec
from tests.scheduler.harness import apply, rows, trigger
from tests.scheduler.stepper import Stepper, container, stepper

TASK = "/api/v2/dags/etl/runs/r1/tasks"
PUBLISHED = {"uri": "s3://bucket/p0", "rows": 12, "parts": ["a", "b"], "meta": {"ok": True, "ratio": 0.5}}


@pytest.fixture
def run_r1(api_client: httpx.Client) -> httpx.Client:
    assert api_client.post("/api/v2/dags", json=spec("etl"), headers=ADMIN).status_code == 201
    assert api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
    return api_client


def publish(database_url: str, task_id: str, try_number: int, outputs: dict[str, Any]) -> None:
    """Store ``outputs`` on a try, as the leader does with the try's success."""
    text = json.dumps(outputs, separators=(",", ":"))
    with psycopg.connect(database_url, autocommit=True) as conn:
        changed = conn.execute(
            "UPDATE task_tries t SET outputs = %s, outputs_bytes = %s FROM task_instances ti "
            "WHERE t.task_instance_id = ti.id AND ti.task_id = %s AND t.try_number = %s",
            (Jsonb(outputs), len(text.encode()), task_id, try_number)).rowcount
    assert changed == 1


def both(client: httpx.Client, task_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task-instance document and the outputs route's answer, read with a read token."""
    document = client.get(f"{TASK}/{task_id}", headers=READ)
    assert document.status_code == 200, document.text
    answer = client.get(f"{TASK}/{task_id}/outputs", headers=READ)
    assert answer.status_code == 200, answer.text
    return document.json(), answer.json()


def test_a_succeeded_tasks_outputs_are_in_its_document_and_its_outputs_route(
        run_r1: httpx.Client, database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success",
              tries=[{"state": "failed", "exit_code": 1}, {"state": "success", "exit_code": 0}])
    publish(database_url, "extract", 2, PUBLISHED)
    document, answer = both(run_r1, "extract")
    assert answer == {"try_number": 2, "state": "success", "outputs": PUBLISHED}
    assert document["outputs"] == PUBLISHED
    # Beside the fields it had, before the tries (and what it waited for); the tries do not repeat them.
    assert list(document)[-3:] == ["outputs", "tries", "waiting_for"]
    assert [t["try_number"] for t in document["tries"]] == [1, 2]
    assert all("outputs" not in t for t in document["tries"])
    # The admin reads the same (nothing is masked for readers: outputs are task data).
    assert run_r1.get(f"{TASK}/extract/outputs", headers=ADMIN).json() == answer


def test_outputs_are_null_until_the_task_succeeds(run_r1: httpx.Client, database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="running", tries=[{"state": "running", "ended": False}])
    seed_task(database_url, "etl", "r1", "load", state="failed", tries=[{"state": "failed", "exit_code": 3}])
    # Rows holding outputs while their instance is not a success (e.g. a mark failed after the
    # try's success): still not the task's outputs.
    publish(database_url, "extract", 1, {"early": 1})
    publish(database_url, "load", 1, {"stale": 1})
    for task_id, state in (("extract", "running"), ("load", "failed")):
        document, answer = both(run_r1, task_id)
        assert document["outputs"] is None
        assert answer == {"try_number": 1, "state": state, "outputs": None}


def test_a_task_not_started_and_a_success_without_outputs_answer_null(run_r1: httpx.Client,
                                                                     database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"state": "success", "exit_code": 0}])
    seed_task(database_url, "etl", "r1", "load")
    assert both(run_r1, "extract")[1] == {"try_number": 1, "state": "success", "outputs": None}
    assert both(run_r1, "load")[1] == {"try_number": 0, "state": "pending", "outputs": None}


def test_a_cleared_task_shows_null_until_its_next_success(run_r1: httpx.Client, database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"state": "success", "exit_code": 0}])
    publish(database_url, "extract", 1, {"n": 1})
    assert both(run_r1, "extract")[1]["outputs"] == {"n": 1}

    async def clear() -> list[str]:
        engine = make_async_engine(api_settings(database_url).database, pool_size=1)
        try:
            async with engine.begin() as conn:
                run_pk = await _run_pk(conn)
                return await command_store.reset_task_instances(conn, run_pk, [("extract", 0)], "cleared",
                                                                datetime.now(UTC), 1)
        finally:
            await engine.dispose()

    assert asyncio.run(clear()) == ["extract"]
    document, answer = both(run_r1, "extract")
    assert answer == {"try_number": 1, "state": "pending", "outputs": None}
    assert document["outputs"] is None

    # The next try succeeds with other values: they replace the old ones; try 1 keeps its own.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO task_tries (task_instance_id, try_number, state, term, ended_at, exit_code, "
                     "outputs, outputs_bytes) SELECT id, 2, 'success', 1, now(), 0, %s, 7 FROM task_instances "
                     "WHERE task_id = 'extract'", (Jsonb({"n": 2}),))
        conn.execute("UPDATE task_instances SET state = 'success', try_number = 2 WHERE task_id = 'extract'")
    document, answer = both(run_r1, "extract")
    assert answer == {"try_number": 2, "state": "success", "outputs": {"n": 2}}
    assert document["outputs"] == {"n": 2}
    with psycopg.connect(database_url) as conn:
        kept = conn.execute("SELECT outputs FROM task_tries WHERE try_number = 1").fetchone()
    assert kept == ({"n": 1},)


async def _run_pk(conn: Any) -> int:
    from sqlalchemy import text

    return int((await conn.execute(text("SELECT id FROM dag_runs WHERE run_id = 'r1'"))).scalar_one())


@pytest.mark.parametrize("path", [
    "/api/v2/dags/etl/runs/r1/tasks/nope/outputs",
    "/api/v2/dags/etl/runs/nope/tasks/extract/outputs",
    "/api/v2/dags/nope/runs/r1/tasks/extract/outputs",
    "/api/v2/dags/etl/runs/r1/tasks/" + "x" * 300 + "/outputs",
    "/api/v2/dags/etl/runs/r1/tasks/%3Cscript%3E/outputs",
])
def test_what_does_not_exist_is_a_404_in_the_error_envelope(run_r1: httpx.Client, database_url: str,
                                                             path: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"state": "success"}])
    answer = run_r1.get(path, headers=READ)
    assert answer.status_code == 404, answer.text
    error = answer.json()["error"]
    assert error["code"] and "not found" in error["message"]
    which = "DAG" if "/dags/nope/" in path else "run" if "/runs/nope/" in path else "task"
    assert error["message"].lower().startswith(which.lower()), error


def test_without_a_token_there_are_no_outputs(run_r1: httpx.Client, database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"state": "success"}])
    publish(database_url, "extract", 1, {"secret": "s"})
    assert run_r1.get(f"{TASK}/extract/outputs").status_code == 401


def test_the_outputs_come_in_the_statements_that_already_read_the_task(run_r1: httpx.Client,
                                                                       database_url: str) -> None:
    """No extra round trip: the document's two statements (the instance, its tries), the route's one."""
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"state": "success"}])
    publish(database_url, "extract", 1, {"n": 1})

    async def count() -> tuple[int, int]:
        engine = make_async_engine(api_settings(database_url).database, pool_size=1)
        statements: list[str] = []
        event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
        try:
            async with engine.connect() as conn:
                run_pk = await _run_pk(conn)
                statements.clear()
                ti = await ti_reads.get_task_instance(conn, run_pk, "extract")
                assert ti is not None and ti["outputs"] == {"n": 1}
                in_document = len(statements)
                statements.clear()
                found = await ti_reads.get_task_outputs(conn, "etl", "r1", "extract")
                assert found == {"try_number": 1, "state": "success", "outputs": {"n": 1}}
                return in_document, len(statements)
        finally:
            await engine.dispose()

    assert asyncio.run(count()) == (2, 1)


def test_what_the_leader_stores_is_what_the_api_answers_through_a_clear(api_client: httpx.Client,
                                                                        settings: Settings) -> None:
    """End to end on the write side's own steps (:mod:`tests.scheduler.stepper` plays the executor):
    a success's outputs are answered; a clear the leader applied answers null at once, though the
    old try keeps them; the next success's replace them."""
    def succeed(st: Stepper, key: TryKey, raw: bytes) -> None:
        st.core.inbox.append(StatusUpdate(key=key, state="running", at=st.clock.now()))
        st.core.inbox.append(StatusUpdate(key=key, state="success", at=st.clock.now() + timedelta(seconds=1),
                                          exit_code=0, outputs=raw))

    def current(run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        document = api_client.get(f"/api/v2/dags/outs/runs/{run_id}/tasks/a", headers=READ).json()
        answer = api_client.get(f"/api/v2/dags/outs/runs/{run_id}/tasks/a/outputs", headers=READ).json()
        assert document["outputs"] == answer["outputs"], (document, answer)
        return document, answer

    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "outs", "tasks": [
                container("a", outputs={"uri": {"type": "string"}, "rows": {"type": "integer"}}), container("b", "a")]})
            run_id = await trigger(st.engine, "outs")
            await st.tick(periodic=True)
            first = st.key("outs", run_id, "a")
            assert current(run_id)[1] == {"try_number": 1, "state": "queued", "outputs": None}
            succeed(st, first, b'{"uri": "s3://b/p0", "rows": 12}')
            await st.tick()
            assert current(run_id)[1] == {"try_number": 1, "state": "success",
                                          "outputs": {"uri": "s3://b/p0", "rows": 12}}

            [(run_pk,)] = await rows(st.engine, "SELECT id FROM dag_runs WHERE run_id = :r", r=run_id)
            async with st.engine.begin() as conn:  # as the API records it
                await command_store.create_command(conn, run_pk=run_pk, dag_id="outs", kind="clear",
                                              body={"tasks": ["a"]}, requested_by="ops")
            await st.tick(periodic=True)
            document, answer = current(run_id)
            assert answer["outputs"] is None and answer["state"] != "success"
            assert document["tries"][0]["state"] == "success"  # the old try is history, not current

            await st.tick(periodic=True)
            second = st.key("outs", run_id, "a")
            assert second.try_number == 2
            succeed(st, second, b'{"uri": "s3://b/p1", "rows": 7}')
            await st.tick()
            assert current(run_id)[1] == {"try_number": 2, "state": "success",
                                          "outputs": {"uri": "s3://b/p1", "rows": 7}}

    asyncio.run(main())
