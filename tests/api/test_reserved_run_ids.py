"""The ``scheduled__`` run-id prefix is the scheduler's alone (issue 44, item 7).

A trigger that named its run ``scheduled__<slot>`` took that slot: the scheduler's insert then
did nothing, the slot never ran with its own logical date, and a backfill counted it as done.
"""

from __future__ import annotations

from datetime import datetime

import httpx
import psycopg

from leoflow.model.run_ids import scheduled_run_id
from tests.api.conftest import ADMIN, spec

SLOT = "scheduled__2026-11-28T22:27:00+00:00"


def test_a_trigger_cannot_take_a_scheduled_slot(api_client: httpx.Client, database_url: str) -> None:
    assert api_client.post("/api/v2/dags", json=spec("etl"), headers=ADMIN).status_code == 201
    for run_id in (SLOT, "scheduled__", "scheduled__anything"):
        answer = api_client.post("/api/v2/dags/etl/runs", json={"run_id": run_id}, headers=ADMIN)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["details"]["field"] == "run_id" and "scheduled__" in error["message"]
    yaml = api_client.post("/api/v2/dags/etl/runs", content=f"run_id: '{SLOT}'\n".encode(),
                           headers={**ADMIN, "Content-Type": "application/yaml"})
    assert yaml.status_code == 422 and yaml.json()["error"]["details"]["field"] == "run_id"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM dag_runs").fetchone() == (0,)
    # Ids that merely look alike are the caller's to choose.
    for run_id in ("Scheduled__x", "scheduled_x", "manual__2026-11-28T22:27:00+00:00", "my-scheduled__x"):
        answer = api_client.post("/api/v2/dags/etl/runs", json={"run_id": run_id}, headers=ADMIN)
        assert answer.status_code == 201, (run_id, answer.text)


def test_backfills_name_their_runs_after_the_slot_and_take_no_run_id(api_client: httpx.Client) -> None:
    """A backfill makes the slot's own run (the id the scheduler would give it); it accepts no id."""
    hourly = {**spec("hourly"), "schedule": "0 * * * *", "start_date": "2026-01-01T00:00:00Z", "catchup": False,
              "paused": True}
    assert api_client.post("/api/v2/dags", json=hourly, headers=ADMIN).status_code == 201
    answer = api_client.post("/api/v2/dags/hourly/backfill", headers=ADMIN,
                             json={"start": "2026-03-01T00:00:00Z", "end": "2026-03-01T02:00:00Z", "run_id": SLOT})
    assert answer.status_code == 422 and answer.json()["error"]["details"]["field"] == "run_id"
    assert scheduled_run_id(datetime.fromisoformat(SLOT.removeprefix("scheduled__"))) == SLOT
