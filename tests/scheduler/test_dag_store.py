"""The API-side DAG/run writes (leoflow.db.stores.dags and .runs) against a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.clock import FakeClock
from leoflow.db.connection import wakeup
from leoflow.db.connection.engine import libpq_url, make_async_engine
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.errors import Conflict, NotFound, ValidationFailed
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.settings import Settings

T = TypeVar("T")


def spec_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "dag_id": "etl", "schedule": "0 3 * * *", "start_date": "2026-01-01T00:00:00Z",
        "tasks": [{"id": "a", "image": "busybox", "command": ["true"]},
                  {"id": "b", "image": "busybox", "command": ["true"], "depends_on": ["a"]}],
    }
    doc.update(changes)
    return doc


def in_tx(settings: Settings, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    async def main() -> T:
        engine = make_async_engine(settings.database, pool_size=2)
        try:
            async with engine.begin() as conn:
                return await fn(conn)
        finally:
            await engine.dispose()
    return asyncio.run(main())


def query(settings: Settings, sql: str, **params: Any) -> list[Any]:
    async def run(conn: AsyncConnection) -> list[Any]:
        return list((await conn.execute(text(sql), params)).all())
    return in_tx(settings, run)


def test_apply_creates_then_identical_is_noop_then_change_makes_new_version(settings: Settings) -> None:
    clock = FakeClock(datetime(2026, 2, 1, tzinfo=UTC))
    first = in_tx(settings, lambda c: dag_store.apply_dag(c, parse_dag_spec(spec_doc()), clock=clock))
    assert (first.dag_id, first.version, first.changed) == ("etl", 1, True)
    same = in_tx(settings, lambda c: dag_store.apply_dag(c, parse_dag_spec(spec_doc(paused=True)), clock=clock))
    assert (same.version, same.changed) == (1, False)
    changed = in_tx(settings, lambda c: dag_store.apply_dag(c, parse_dag_spec(spec_doc(max_active_runs=2)),
                                                             clock=clock))
    assert (changed.version, changed.changed) == (2, True)
    rows = query(settings, "SELECT d.paused, v.version, d.next_run_at FROM dags d "
                 "JOIN dag_versions v ON v.id = d.current_version_id")
    assert rows == [(False, 2, datetime(2026, 1, 1, 3, tzinfo=UTC))]
    assert query(settings, "SELECT count(*) FROM dag_versions")[0][0] == 2


def test_paused_in_spec_is_honoured_on_creation_only(settings: Settings) -> None:
    clock = FakeClock()
    in_tx(settings, lambda c: dag_store.apply_dag(c, parse_dag_spec(spec_doc(paused=True)), clock=clock))
    assert query(settings, "SELECT paused FROM dags")[0][0] is True
    in_tx(settings, lambda c: dag_store.set_paused(c, "etl", False))
    in_tx(settings, lambda c: dag_store.apply_dag(c, parse_dag_spec(spec_doc(paused=True, catchup=True)),
                                                  clock=clock))
    assert query(settings, "SELECT paused FROM dags")[0][0] is False


def test_trigger_run_queues_a_manual_run_notifies_and_rejects_duplicates(settings: Settings) -> None:
    clock = FakeClock(datetime(2026, 2, 1, 12, tzinfo=UTC))
    in_tx(settings, lambda c: dag_store.apply_dag(c, parse_dag_spec(spec_doc()), clock=clock))
    listener = psycopg.connect(libpq_url(settings.require_database_url()), autocommit=True)
    try:
        listener.execute(f"LISTEN {wakeup.WAKEUP_CHANNEL}")
        run_id = in_tx(settings, lambda c: run_store.trigger_run(c, "etl", run_id=None, conf={"x": 1}, clock=clock))
        assert run_id == "manual__2026-02-01T12:00:00+00:00"
        payloads = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
        assert payloads == ["etl"]
    finally:
        listener.close()
    # A second generated id in the same instant still gets a unique id.
    second = in_tx(settings, lambda c: run_store.trigger_run(c, "etl", run_id=None, conf={}, clock=clock))
    assert second.startswith(run_id + "_")
    in_tx(settings, lambda c: run_store.trigger_run(c, "etl", run_id="mine", conf={}, clock=clock))
    with pytest.raises(Conflict):
        in_tx(settings, lambda c: run_store.trigger_run(c, "etl", run_id="mine", conf={}, clock=clock))
    with pytest.raises(NotFound):
        in_tx(settings, lambda c: run_store.trigger_run(c, "nope", run_id=None, conf={}, clock=clock))
    with pytest.raises(ValidationFailed) as info:
        in_tx(settings, lambda c: run_store.trigger_run(c, "etl", run_id="bad id/", conf={}, clock=clock))
    assert info.value.path == "run_id"
    with pytest.raises(ValidationFailed) as info:
        in_tx(settings, lambda c: run_store.trigger_run(c, "etl", run_id=None, conf=[1], clock=clock))  # type: ignore[arg-type]
    assert info.value.path == "conf"
    rows = query(settings, "SELECT run_id, state, run_type, conf FROM dag_runs WHERE run_id = :r", r=run_id)
    assert rows == [("manual__2026-02-01T12:00:00+00:00", "queued", "manual", {"x": 1})]


def test_cancel_run_cancels_unfinished_tasks_and_flags_live_tries(settings: Settings) -> None:
    clock = FakeClock()
    in_tx(settings, lambda c: dag_store.apply_dag(c, parse_dag_spec(spec_doc()), clock=clock))
    in_tx(settings, lambda c: run_store.trigger_run(c, "etl", run_id="r1", conf={}, clock=clock))
    # Simulate a started run: task a running with a live try, b pending, plus a finished task.
    query(settings, """
        WITH r AS (UPDATE dag_runs SET state = 'running' WHERE run_id = 'r1' RETURNING id),
             ti AS (INSERT INTO task_instances (run_pk, task_id, state, try_number)
                    SELECT id, t.task_id, t.state, t.try FROM r,
                      (VALUES ('a', 'running', 1), ('b', 'pending', 0), ('c', 'success', 1)) AS t(task_id, state, try)
                    RETURNING id, task_id, try_number)
        INSERT INTO task_tries (task_instance_id, try_number, state, term)
        SELECT id, try_number, CASE WHEN task_id = 'a' THEN 'running' ELSE 'success' END, 1
        FROM ti WHERE try_number > 0 RETURNING id
    """)
    in_tx(settings, lambda c: run_store.cancel_run(c, "etl", "r1"))
    assert query(settings, "SELECT state FROM dag_runs WHERE run_id = 'r1'") == [("cancelled",)]
    assert dict(query(settings, "SELECT task_id, state FROM task_instances")) == {
        "a": "cancelled", "b": "cancelled", "c": "success"}
    assert dict(query(settings, "SELECT ti.task_id, tt.state FROM task_tries tt "
                      "JOIN task_instances ti ON ti.id = tt.task_instance_id")) == {"a": "cancelling", "c": "success"}
    with pytest.raises(Conflict):
        in_tx(settings, lambda c: run_store.cancel_run(c, "etl", "r1"))
    with pytest.raises(NotFound):
        in_tx(settings, lambda c: run_store.cancel_run(c, "etl", "nope"))


def test_delete_is_soft_cancels_active_runs_and_reapply_restores(settings: Settings) -> None:
    clock = FakeClock()
    in_tx(settings, lambda c: dag_store.apply_dag(c, parse_dag_spec(spec_doc()), clock=clock))
    in_tx(settings, lambda c: run_store.trigger_run(c, "etl", run_id="r1", conf={}, clock=clock))
    in_tx(settings, lambda c: dag_store.delete_dag(c, "etl"))
    assert query(settings, "SELECT deleted, next_run_at FROM dags") == [(True, None)]
    assert query(settings, "SELECT state FROM dag_runs") == [("cancelled",)]
    for call in (lambda c: dag_store.delete_dag(c, "etl"), lambda c: dag_store.set_paused(c, "etl", True),
                 lambda c: run_store.trigger_run(c, "etl", run_id=None, conf={}, clock=clock)):
        with pytest.raises(NotFound):
            in_tx(settings, call)
    again = in_tx(settings, lambda c: dag_store.apply_dag(c, parse_dag_spec(spec_doc()), clock=clock))
    assert again.changed and again.version == 2
    assert query(settings, "SELECT deleted, next_run_at IS NOT NULL FROM dags") == [(False, True)]
