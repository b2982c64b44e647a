"""``GET …/tasks/{task_id}/events``: the Kubernetes events kept with a try, read back after its pod is gone;
bad parameters are a clear 400 naming the parameter, never a 500."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psycopg
import pytest

from leoflow.api.app import create_app
from tests.api.conftest import ADMIN, READ, api_settings, seed_task, spec
from tests.api.live import client_for

EVENTS = "/api/v2/dags/etl/runs/r1/tasks/extract/events"


@pytest.fixture
def client(database_url: str) -> Iterator[httpx.Client]:
    with client_for(create_app(api_settings(database_url))) as http:
        http.post("/api/v2/dags", json=spec(), headers=ADMIN).raise_for_status()
        http.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).raise_for_status()
        yield http


def _keep(database_url: str, try_number: int, reason: str, message: str, *, count: int = 1,
          container: str | None = "task", type_: str = "Warning") -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pod_events (task_try_id, uid, type, reason, message, container, count, first_seen, last_seen) "
            "SELECT t.id, %s, %s, %s, %s, %s, %s, now(), now() FROM task_tries t "
            "WHERE t.executor_ref = %s", (f"{reason}-{try_number}", type_, reason, message, container, count,
                                          f"pod-extract-{try_number}"))


def test_a_tries_events_are_read_back(client: httpx.Client, database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="failed",
              tries=[{"state": "failed"}, {"state": "failed"}])
    _keep(database_url, 1, "FailedMount", 'MountVolume.SetUp failed for volume "creds" : secret "x" not found',
          count=9, container=None)
    _keep(database_url, 2, "BackOff", 'Back-off pulling image "nope"')
    latest = client.get(EVENTS, headers=READ)
    assert latest.status_code == 200, latest.text
    assert latest.json()["try_number"] == 2
    assert [(e["reason"], e["container"]) for e in latest.json()["events"]] == [("BackOff", "task")]
    first = client.get(EVENTS, params={"try": 1}, headers=READ).json()
    [event] = first["events"]
    assert event["reason"] == "FailedMount" and event["count"] == 9 and event["container"] is None
    assert 'secret "x" not found' in event["message"] and event["type"] == "Warning"
    assert set(event) == {"type", "reason", "message", "container", "count", "first_seen", "last_seen"}


def test_a_try_without_events_answers_an_empty_list(client: httpx.Client, database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"state": "success"}])
    assert client.get(EVENTS, headers=READ).json() == {"try_number": 1, "events": []}


@pytest.mark.parametrize("params", [{"try": "0"}, {"try": "-1"}, {"try": "x"}, {"try": "1" * 40},
                                    {"try": "\x00"}, {"map_index": "nope"}])
def test_bad_parameters_are_a_clear_400(client: httpx.Client, database_url: str, params: dict[str, str]) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"state": "success"}])
    answer = client.get(EVENTS, params=params, headers=READ)
    assert answer.status_code == 400, answer.text
    assert next(iter(params)) in answer.text


def test_missing_try_task_or_run_is_a_404(client: httpx.Client, database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"state": "success"}])
    missing_try = client.get(EVENTS, params={"try": 5}, headers=READ)
    assert missing_try.status_code == 404 and "no try 5" in missing_try.text
    assert client.get(EVENTS.replace("extract", "nothing"), headers=READ).status_code == 404
    assert client.get(EVENTS.replace("r1", "r9"), headers=READ).status_code == 404
    seed_task(database_url, "etl", "r1", "load", state="pending")
    unstarted = client.get(EVENTS.replace("extract", "load"), headers=READ)
    assert unstarted.status_code == 404 and "has not started a try yet" in unstarted.text
