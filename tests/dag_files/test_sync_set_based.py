"""A sync applies its DAGs set-based: a fixed number of statements however many DAGs it holds,
with what applying each DAG alone would store (issue: 10,000 files were ~80,000 statements, past
the request's deadline, and nothing was applied)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.clock import FakeClock
from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import dags as dag_store
from leoflow.model.files.dag_files import LocatedDag
from leoflow.model.files.dag_sync import SyncOptions
from leoflow.model.spec.dag import DagSpec, parse_dag_spec
from leoflow.settings import load_settings
from tests.harness.postgres import PostgresServer

T = TypeVar("T")
CLOCK = FakeClock(datetime(2026, 2, 1, tzinfo=UTC))


def doc(dag_id: str, **changes: Any) -> dict[str, Any]:
    return {"dag_id": dag_id, "schedule": "0 3 * * *", "start_date": "2026-01-01T00:00:00Z",
            "tasks": [{"id": "a", "kind": "empty"}], **changes}


def specs(docs: list[dict[str, Any]]) -> list[DagSpec]:
    return [parse_dag_spec(d, now=CLOCK.now()) for d in docs]


def in_tx(url: str, fn: Callable[[AsyncConnection], Awaitable[T]], statements: list[str] | None = None) -> T:
    async def main() -> T:
        engine = make_async_engine(load_settings({"LEOFLOW_DATABASE_URL": url}).database, pool_size=1)
        if statements is not None:
            event.listen(engine.sync_engine, "before_cursor_execute",
                         lambda *args: statements.append(args[2]))
        try:
            async with engine.begin() as conn:
                return await fn(conn)
        finally:
            await engine.dispose()
    return asyncio.run(main())


def sync(url: str, docs: list[dict[str, Any]], statements: list[str] | None = None) -> dict[str, str]:
    located = [LocatedDag(s, f"{s.dag_id}.yaml", 0) for s in specs(docs)]
    plan = in_tx(url, lambda c: dag_store.sync_dags(c, located, SyncOptions("s"), clock=CLOCK), statements)
    return {c.dag_id: c.action for c in plan.changes}


def stored(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as db:
        return db.execute("""
            SELECT d.dag_id, d.paused, d.deleted, d.schedule, d.next_run_at, d.schedule_error, d.max_active_tasks,
                   v.version, v.spec_hash, v.spec, v.default_conf,
                   (SELECT array_agg(r.uri || '/' || r.role || '/' || r.task_id ORDER BY r.uri, r.role, r.task_id)
                      FROM dataset_references r WHERE r.dag_id = d.dag_id)
            FROM dags d LEFT JOIN dag_versions v ON v.id = d.current_version_id ORDER BY d.dag_id""").fetchall()


def test_statements_do_not_grow_with_the_dags_of_a_sync(pg_server: PostgresServer) -> None:
    counts = []
    for size in (5, 200):
        url = pg_server.create_database()
        try:
            statements: list[str] = []
            sync(url, [doc(f"d{i:03d}") for i in range(size)], statements)
            counts.append(len(statements))
            assert len(stored(url)) == size
        finally:
            pg_server.drop_database(url)
    assert counts[0] == counts[1] and counts[1] < 20, counts


def test_a_mixed_sync_stores_what_applying_each_dag_alone_stores(pg_server: PostgresServer) -> None:
    """Created, changed (schedule moved: re-planned), unchanged, unchanged with a stopped schedule
    (re-planned), back from a delete (paused from its spec), references replaced and dropped."""
    before = [doc("keep"), doc("move"), doc("stopped"), doc("gone", paused=True),
              doc("feeds", tasks=[{"id": "a", "image": "busybox", "command": ["true"], "produces": ["s3://b/x"]}])]
    after = [doc("keep"), doc("move", schedule="0 4 * * *"), doc("stopped"), doc("gone", paused=True),
             doc("feeds"), doc("eats", schedule={"datasets": {"any": ["s3://b/x"]}}), doc("new", max_active_tasks=3)]
    results = []
    for one_by_one in (False, True):
        url = pg_server.create_database()
        try:
            sync(url, before)
            with psycopg.connect(url, autocommit=True) as db:
                db.execute("UPDATE dags SET next_run_at = NULL, schedule_error = 'bad' WHERE dag_id = 'stopped'")
                db.execute("UPDATE dags SET deleted = true, paused = false WHERE dag_id = 'gone'")
            if one_by_one:
                for spec in specs(after):
                    in_tx(url, lambda c, s=spec: dag_store.apply_dag(c, s, clock=CLOCK))
            else:
                assert sync(url, after) == {"keep": "unchanged", "move": "changed", "stopped": "unchanged",
                                            "gone": "created", "feeds": "changed", "eats": "created",
                                            "new": "created"}
                in_tx(url, lambda c: dag_store.apply_dags(c, specs([doc("stopped")]), clock=CLOCK))
            results.append(stored(url))
        finally:
            pg_server.drop_database(url)
    set_based, alone = results
    assert set_based == alone
    rows = {r[0]: r for r in set_based}
    assert rows["stopped"][4] is not None and rows["stopped"][5] is None  # re-planned, error cleared
    assert rows["gone"][1] is True and rows["gone"][2] is False and rows["gone"][7] == 2
    assert rows["move"][7] == 2 and rows["keep"][7] == 1 and rows["new"][6] == 3
    assert rows["feeds"][11] is None and rows["eats"][11] == ["s3://b/x/consumer/"]


def test_a_wait_for_may_name_a_dag_of_the_same_sync(pg_server: PostgresServer) -> None:
    url = pg_server.create_database()
    try:
        waiter = doc("a-waiter", tasks=[{"id": "a", "kind": "empty", "wait_for": [{"dag": "z-target"}]}])
        assert sync(url, [waiter, doc("z-target")]) == {"a-waiter": "created", "z-target": "created"}
        rows = {r[0]: r for r in stored(url)}
        assert rows["a-waiter"][7] == 1 and rows["z-target"][7] == 1
    finally:
        pg_server.drop_database(url)


def test_a_schedule_shared_by_many_dags_is_planned_once(pg_server: PostgresServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = dag_store.first_scheduled_run

    def counting(spec: DagSpec, now: datetime) -> datetime | None:
        calls.append(spec.dag_id)
        return real(spec, now)

    monkeypatch.setattr(dag_store, "first_scheduled_run", counting)
    url = pg_server.create_database()
    try:
        sync(url, [doc(f"d{i:03d}") for i in range(100)] + [doc("other", schedule="0 4 * * *")])
        firsts = {r[0]: r[4] for r in stored(url)}
    finally:
        pg_server.drop_database(url)
    assert len(calls) == 2, calls
    assert len({firsts[f"d{i:03d}"] for i in range(100)}) == 1 and firsts["other"] != firsts["d000"]
