"""Backfills: validation with 422s that name the field, the leader's step, and a whole backfill."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from leoflow.backfill.service import BackfillService
from leoflow.clock import SystemClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.memory import MemoryExecutor, Outcome
from leoflow.leadership import LeaderContext
from leoflow.model.tries import TaskLaunch
from leoflow.settings import Settings
from tests.api.conftest import ADMIN, READ
from tests.day2.harness import leader, wait_for
from tests.scheduler.harness import fast, rows, set_term

HOURLY = {"dag_id": "hourly", "schedule": "0 * * * *", "start_date": "2026-01-01T00:00:00Z", "catchup": False,
          "paused": True,  # the scheduler's own runs stay out of the way
          "tasks": [{"id": "a", "image": "busybox", "command": ["true"]},
                    {"id": "b", "image": "busybox", "command": ["true"], "depends_on": ["a"]}]}
START = "2026-03-01T00:00:00Z"


def _apply(client: httpx.Client, spec: dict[str, Any] = HOURLY) -> None:
    assert client.post("/api/v2/dags", json=spec, headers=ADMIN).status_code == 201


def _backfill(client: httpx.Client, dag: str = "hourly", **body: Any) -> httpx.Response:
    return client.post(f"/api/v2/dags/{dag}/backfill", json=body, headers=ADMIN)


@pytest.mark.parametrize(("body", "field"), [
    ({"end": "2026-03-02"}, "start"),
    ({"start": START}, "end"),
    ({"start": START, "end": START}, "end"),
    ({"start": "2026-03-02", "end": "2026-03-01"}, "end"),
    ({"start": "yesterday", "end": "2026-03-02"}, "start"),
    ({"start": START, "end": "2999-01-01"}, "end"),
    ({"start": "2026-03-01T00:30:00Z", "end": "2026-03-01T00:59:00Z"}, "start"),
    ({"start": "2025-01-01", "end": "2026-03-01"}, "end"),  # > 1000 hourly slots
    ({"start": START, "end": "2026-03-02", "max_active_runs": 0}, "max_active_runs"),
    ({"start": START, "end": "2026-03-02", "max_active_runs": 1001}, "max_active_runs"),
    ({"start": START, "end": "2026-03-02", "max_active_runs": True}, "max_active_runs"),
    ({"start": START, "end": "2026-03-02", "rerun_failed": "yes"}, "rerun_failed"),
    ({"start": START, "end": "2026-03-02", "reprocess": "failed"}, "reprocess"),
])
def test_bad_requests_are_422_naming_the_field(api_client: httpx.Client, body: dict[str, Any], field: str) -> None:
    _apply(api_client)
    answer = _backfill(api_client, **body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field


def test_create_list_show_cancel_and_one_running_per_dag(api_client: httpx.Client) -> None:
    _apply(api_client)
    _apply(api_client, {**HOURLY, "dag_id": "manual", "schedule": None})
    unscheduled = _backfill(api_client, "manual", start=START, end="2026-03-02")
    assert unscheduled.json()["error"]["details"]["field"] == "dag_id"
    assert _backfill(api_client, "nope", start=START, end="2026-03-02").status_code == 404
    assert api_client.post("/api/v2/dags/hourly/backfill", json={"start": START, "end": "2026-03-02"},
                           headers=READ).status_code == 403

    created = _backfill(api_client, start=START, end="2026-03-02", max_active_runs=3)
    assert created.status_code == 201, created.text
    b = created.json()
    assert (b["state"], b["slots_total"], b["max_active_runs"], b["rerun_failed"]) == ("running", 24, 3, False)
    assert b["next_logical_date"].startswith("2026-03-01T00:00:00") and b["created_by"] == "boss"
    assert b["runs"] == {}
    # Dates without a time are midnight in the DAG's zone; a date-time without offset too.
    assert _backfill(api_client, start="2026-03-03", end="2026-03-04").status_code == 409

    listed = api_client.get("/api/v2/dags/hourly/backfills", headers=READ).json()
    assert [x["id"] for x in listed["items"]] == [b["id"]]
    assert api_client.get(f"/api/v2/dags/hourly/backfills/{b['id']}", headers=READ).json()["id"] == b["id"]
    assert api_client.get("/api/v2/dags/hourly/backfills/999", headers=READ).status_code == 404
    assert api_client.get("/api/v2/dags/hourly/backfills/x1", headers=READ).status_code == 404

    cancelled = api_client.post(f"/api/v2/dags/hourly/backfills/{b['id']}/cancel", headers=ADMIN)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert api_client.post(f"/api/v2/dags/hourly/backfills/{b['id']}/cancel", headers=ADMIN).status_code == 409
    assert _backfill(api_client, start="2026-03-03", end="2026-03-04").status_code == 201


def _ctx(settings: Settings, db: Database) -> LeaderContext:
    return LeaderContext(term=1, settings=settings, db=db, clock=SystemClock())


def test_the_leader_keeps_at_most_max_active_runs_and_completes(api_client: httpx.Client, settings: Settings) -> None:
    """Driven step by step: no scheduler runs, the test finishes runs by hand."""
    _apply(api_client)
    bid = _backfill(api_client, start=START, end="2026-03-01T05:00:00Z", max_active_runs=2).json()["id"]

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=2)
        try:
            await set_term(engine, settings.cluster.name, 1)
            ctx, service = _ctx(settings, Database(engine)), BackfillService()
            finished: list[str] = []
            for _ in range(4):
                await service.step_all(ctx)
                await service.step_all(ctx)  # a second step with no room changes nothing
                active = await rows(engine, "SELECT run_id FROM dag_runs WHERE backfill_id = :b "
                                    "AND state IN ('queued', 'running') ORDER BY run_id", b=bid)
                assert len(active) <= 2
                for (run_id,) in active[:1]:  # finish the oldest one
                    await rows_exec(engine, "UPDATE dag_runs SET state = 'success', ended_at = now() "
                                    "WHERE run_id = :r", r=run_id)
                    finished.append(run_id)
            await service.step_all(ctx)
            runs = await rows(engine, "SELECT run_id, run_type, logical_date FROM dag_runs WHERE backfill_id = :b "
                              "ORDER BY logical_date", b=bid)
            assert [r[0] for r in runs] == [f"scheduled__2026-03-01T0{h}:00:00+00:00" for h in range(5)]
            assert {r[1] for r in runs} == {"scheduled"}
            state = await rows(engine, "SELECT state, runs_created, next_logical_date FROM backfills WHERE id = :b",
                               b=bid)
            assert state == [("running", 5, None)]  # one run still unfinished
            await rows_exec(engine, "UPDATE dag_runs SET state = 'success', ended_at = now() WHERE backfill_id = :b",
                            b=bid)
            await service.step_all(ctx)
            assert (await rows(engine, "SELECT state FROM backfills WHERE id = :b", b=bid)) == [("completed",)]
        finally:
            await engine.dispose()

    asyncio.run(main())
    shown = api_client.get(f"/api/v2/dags/hourly/backfills/{bid}", headers=READ).json()
    assert shown["runs"] == {"success": 5} and shown["completed_at"] is not None


async def rows_exec(engine: Any, sql: str, **params: Any) -> None:
    from sqlalchemy import text

    async with engine.begin() as conn:
        await conn.execute(text(sql), params)


def test_a_whole_backfill_skips_existing_runs_and_reruns_failed_ones(api_client: httpx.Client,
                                                                     settings: Settings) -> None:
    """End to end with the scheduler: one slot already succeeded, one failed (re-run), others new."""
    settings = fast(settings)
    _apply(api_client)
    first = "scheduled__2026-03-01T00:00:00+00:00"
    second = "scheduled__2026-03-01T01:00:00+00:00"

    def outcome(launch: TaskLaunch) -> Outcome:
        if launch.key.run_id == second and launch.key.task_id == "b" and launch.key.try_number == 1:
            return ("failed", 3, "exit code 3")
        return ("success", 0, None)

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=4)
        try:
            async with leader(settings, MemoryExecutor(outcome=outcome), engine=engine, services=("backfill",)):
                # Without rerun_failed: the first two slots' runs are made, b of the second fails.
                r1 = await asyncio.to_thread(_backfill, api_client, start=START, end="2026-03-01T02:00:00Z")
                await wait_for(lambda: _state(api_client, r1.json()["id"]) == "completed")
                states = dict(await rows(engine, "SELECT run_id, state FROM dag_runs"))
                assert states == {first: "success", second: "failed"}
                # With rerun_failed over four slots: 1 skipped (success), 1 re-run, 2 new.
                r2 = await asyncio.to_thread(_backfill, api_client, start=START, end="2026-03-01T04:00:00Z",
                                             rerun_failed=True, max_active_runs=1)
                await wait_for(lambda: _state(api_client, r2.json()["id"]) == "completed")
            b = api_client.get(f"/api/v2/dags/hourly/backfills/{r2.json()['id']}", headers=READ).json()
            assert (b["runs_created"], b["runs_rerun"], b["slots_skipped"]) == (2, 1, 1)
            assert b["runs"] == {"success": 3}
            states = dict(await rows(engine, "SELECT run_id, state FROM dag_runs"))
            assert set(states.values()) == {"success"} and len(states) == 4
            tries = await rows(engine, "SELECT ti.task_id, ti.try_number, ti.max_tries FROM task_instances ti "
                               "JOIN dag_runs r ON r.id = ti.run_pk WHERE r.run_id = :r ORDER BY 1", r=second)
            # b's failed try 1 is kept; the re-run is try 2 with a fresh budget; a is untouched.
            assert tries == [("a", 1, 1), ("b", 2, 2)]
            history = await rows(engine, "SELECT tt.try_number, tt.state FROM task_tries tt JOIN task_instances ti "
                                 "ON ti.id = tt.task_instance_id JOIN dag_runs r ON r.id = ti.run_pk "
                                 "WHERE r.run_id = :r AND ti.task_id = 'b' ORDER BY 1", r=second)
            assert history == [(1, "failed"), (2, "success")]
        finally:
            await engine.dispose()

    asyncio.run(main())


def _state(client: httpx.Client, backfill_id: int) -> str:
    return str(client.get(f"/api/v2/dags/hourly/backfills/{backfill_id}", headers=READ).json()["state"])


def test_cancel_cancels_queued_runs_and_stops_new_ones(api_client: httpx.Client, settings: Settings) -> None:
    _apply(api_client)
    bid = _backfill(api_client, start=START, end="2026-03-01T10:00:00Z", max_active_runs=3).json()["id"]

    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=2)
        try:
            await set_term(engine, settings.cluster.name, 1)
            ctx = _ctx(settings, Database(engine))
            await BackfillService().step_all(ctx)
            await rows_exec(engine, "UPDATE dag_runs SET state = 'running' WHERE run_id = :r",
                            r="scheduled__2026-03-01T00:00:00+00:00")
            await asyncio.to_thread(api_client.post, f"/api/v2/dags/hourly/backfills/{bid}/cancel", headers=ADMIN)
            await BackfillService().step_all(ctx)
            states = sorted(s for (s,) in await rows(engine, "SELECT state FROM dag_runs WHERE backfill_id = :b",
                                                       b=bid))
            assert states == ["cancelled", "cancelled", "running"]
            reasons = {r for (r,) in await rows(engine, "SELECT reason FROM dag_runs WHERE state = 'cancelled'")}
            assert reasons == {"backfill cancelled"}
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_slots_follow_the_dags_time_zone() -> None:
    from leoflow.model.backfill import backfill_slots, parse_moment

    start = parse_moment("2026-03-28", "start", "Europe/Berlin")
    end = parse_moment("2026-03-31", "end", "Europe/Berlin")
    slots = backfill_slots("0 3 * * *", "Europe/Berlin", start, end)
    # 03:00 Berlin is 02:00 UTC before the DST switch (29 March) and 01:00 UTC after it.
    assert slots == [datetime(2026, 3, 28, 2, tzinfo=UTC), datetime(2026, 3, 29, 1, tzinfo=UTC),
                     datetime(2026, 3, 30, 1, tzinfo=UTC)]
    assert start == datetime(2026, 3, 27, 23, tzinfo=UTC)
    assert end.astimezone(UTC) - start.astimezone(UTC) == timedelta(days=3, hours=-1)  # one hour lost to DST
