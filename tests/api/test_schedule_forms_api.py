"""Schedule forms and logical dates through the API: what the run answer shows, what is refused (422 naming
the field), and that a trigger for a logical date is not run twice."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.conftest import ADMIN, READ, spec


def test_a_trigger_for_a_logical_date_carries_it_as_its_data_interval(api_client: httpx.Client) -> None:
    assert api_client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 201
    created = api_client.post("/api/v2/dags/etl/runs", json={"logical_date": "2026-05-01T02:00:00+02:00"},
                              headers=ADMIN)
    assert created.status_code == 201, created.text
    run = created.json()
    assert run["run_id"] == "manual__2026-05-01T00:00:00+00:00"
    assert run["logical_date"] == run["data_interval_start"] == run["data_interval_end"]
    assert run["logical_date"].startswith("2026-05-01T00:00:00")
    # The hot read (rendered by PostgreSQL) answers the same fields.
    shown = api_client.get(f"/api/v2/dags/etl/runs/{run['run_id']}", headers=READ).json()
    assert {k: shown[k] for k in ("data_interval_start", "data_interval_end")} == {
        k: run[k] for k in ("data_interval_start", "data_interval_end")}
    listed = api_client.get("/api/v2/dags/etl/runs", headers=READ).json()
    assert listed["items"][0]["data_interval_end"] == run["data_interval_end"]

    again = api_client.post("/api/v2/dags/etl/runs", json={"logical_date": "2026-05-01T00:00:00Z"}, headers=ADMIN)
    assert again.status_code == 409 and "logical_date" in again.text
    other = api_client.post("/api/v2/dags/etl/runs", json={"logical_date": "2026-05-01T00:00:00Z", "run_id": "rerun"},
                            headers=ADMIN)
    assert other.status_code == 201 and other.json()["logical_date"] == run["logical_date"]


def test_a_bad_logical_date_is_a_422_naming_it(api_client: httpx.Client) -> None:
    assert api_client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 201
    for value in ("2026-05-01T00:00:00", "not a date", 12, "0001-01-01T00:00:00Z", "x" * 100_000):
        answer = api_client.post("/api/v2/dags/etl/runs", json={"logical_date": value}, headers=ADMIN)
        assert answer.status_code == 422, (value, answer.text[:200])
        assert answer.json()["error"]["details"]["field"] == "logical_date"


def test_bad_schedule_forms_are_422s_naming_the_field(api_client: httpx.Client) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"schedule": [f"{m} * * * *" for m in range(50)]}, "schedule"),
        ({"schedule": {"every": "5s"}}, "schedule.every"),
        ({"schedule": {"every": "soon"}}, "schedule.every"),
        ({"start_date": "2026-02-01T00:00:00Z", "end_date": "2026-01-01T00:00:00Z", "schedule": "@daily"}, "end_date"),
        ({"schedule": "@hourly", "overlap": "queue"}, "overlap"),
        ({"schedule": "@hourly", "starting_deadline_seconds": -1}, "starting_deadline_seconds"),
    ]
    for changes, field in cases:
        answer = api_client.post("/api/v2/dags", json=spec(**changes), headers=ADMIN)
        assert answer.status_code == 422, (changes, answer.text[:300])
        assert answer.json()["error"]["details"]["field"] == field, answer.text[:300]


def test_schedule_forms_are_shown_as_written(api_client: httpx.Client) -> None:
    for dag_id, schedule in (("lists", ["0 6 * * *", "0 18 * * 1-5"]), ("every", {"every": "90m"}),
                             ("once", "@once")):
        created = api_client.post("/api/v2/dags", json=spec(dag_id, schedule=schedule, end_date="2100-01-01"),
                                  headers=ADMIN)
        assert created.status_code == 201, created.text
        shown = api_client.get(f"/api/v2/dags/{dag_id}", headers=READ).json()
        assert shown["schedule"] == (schedule if schedule != {"every": "90m"} else {"every": "1h30m"})
        assert shown["next_run_at"] is not None
