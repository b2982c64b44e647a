"""Datasets through the API: outside events (write scope, audited, every bad value a 422 naming its
field), the queue they fill, and the list of datasets with producers, consumers and queued events."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
import pytest

from tests.api.conftest import ADMIN, READ

EVENTS = "/api/v2/datasets/events"


def task(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], **fields}


def test_an_event_queues_for_each_consumer_and_the_list_shows_it(api_client: httpx.Client) -> None:
    assert api_client.post("/api/v2/dags", json={"dag_id": "ingest", "tasks": [task("load", produces=["s3://o"])]},
                           headers=ADMIN).status_code == 201
    for dag_id in ("report", "audit"):
        answer = api_client.post("/api/v2/dags", json={"dag_id": dag_id, "schedule": {"datasets": {"all": ["s3://o"]}},
                                                       "tasks": [task("r")]}, headers=ADMIN)
        assert answer.status_code == 201, answer.text
        assert answer.json()["spec"]["schedule"] == {"datasets": {"all": ["s3://o"]}}
    for _ in range(3):
        answer = api_client.post(EVENTS, json={"uri": "s3://o", "extra": {"rows": 12}}, headers=ADMIN)
        assert answer.status_code == 201, answer.text
        assert answer.json() == {"uri": "s3://o", "source": "api", "queued_for": 2}
    nobody = api_client.post(EVENTS, json={"uri": "ftp://nobody"}, headers=ADMIN)
    assert nobody.status_code == 201 and nobody.json()["queued_for"] == 0
    listed = api_client.get("/api/v2/datasets", headers=READ)
    assert listed.status_code == 200, listed.text
    [dataset] = listed.json()["items"]  # a URI known only from its history is not listed...
    assert dataset["uri"] == "s3://o" and dataset["producers"] == [{"dag_id": "ingest", "task_id": "load"}]
    assert dataset["consumers"] == ["audit", "report"] and dataset["no_producer"] is False
    assert [(q["dag_id"], q["events"]) for q in dataset["queued"]] == [("audit", 3), ("report", 3)]
    assert dataset["last_event"]["source"] == "api"
    one = api_client.get("/api/v2/datasets", params={"uri": "ftp://nobody"}, headers=READ).json()["items"]
    assert [(d["uri"], d["no_producer"], d["consumers"]) for d in one] == [("ftp://nobody", True, [])]  # ...but found
    assert api_client.get("/api/v2/datasets", params={"uri": "ftp://never"}, headers=READ).json()["items"] == []
    audit = api_client.get("/api/v2/audit", headers=ADMIN).json()["items"]
    assert any(e["path"] == EVENTS and e["status"] == 201 for e in audit), audit[:3]
    assert api_client.delete("/api/v2/dags/report", headers=ADMIN).status_code in (200, 204)
    [dataset] = api_client.get("/api/v2/datasets", headers=READ).json()["items"]
    assert dataset["consumers"] == ["audit"] and [q["dag_id"] for q in dataset["queued"]] == ["audit"]


def test_the_list_pages_by_uri(api_client: httpx.Client) -> None:
    uris = [f"s3://b/{i:02d}" for i in range(5)]
    assert api_client.post("/api/v2/dags", json={"dag_id": "many", "schedule": {"datasets": {"any": uris}},
                                                 "tasks": [task("r")]}, headers=ADMIN).status_code == 201
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        answer = api_client.get("/api/v2/datasets", params=params, headers=READ).json()
        seen += [d["uri"] for d in answer["items"]]
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert seen == uris


def test_a_reader_cannot_record_an_event(api_client: httpx.Client) -> None:
    assert api_client.post(EVENTS, json={"uri": "s3://o"}, headers=READ).status_code == 403


@pytest.mark.parametrize(("body", "field"), [
    ({}, "uri"),
    ({"uri": ""}, "uri"),
    ({"uri": "s3://" + "a" * 10_000}, "uri"),
    ({"uri": "s3://a\nb"}, "uri"),
    ({"uri": "s3://a\u0000"}, "uri"),
    ({"uri": 5}, "uri"),
    ({"uri": "s3://a", "extra": [1]}, "extra"),
    ({"uri": "s3://a", "extra": {"k": "v" * 20_000}}, "extra"),
    ({"uri": "s3://a", "extra": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}}, "extra"),
    ({"uri": "s3://a", "bogus": 1}, "bogus"),
    (["s3://a"], "body"),
], ids=lambda v: repr(v)[:40])
def test_bad_events_are_422s_naming_the_field(api_client: httpx.Client, body: object, field: str) -> None:
    answer = api_client.post(EVENTS, json=body, headers=ADMIN)
    assert answer.status_code in (400, 422), answer.text
    assert answer.json()["error"]["details"]["field"] == field, answer.text


@pytest.mark.parametrize(("params", "field"), [({"uri": "a\tb"}, "uri"), ({"uri": "x" * 1_001}, "uri"),
                                               ({"limit": 0}, "limit"), ({"cursor": "nope"}, "cursor")])
def test_bad_list_parameters_are_400s_naming_them(api_client: httpx.Client, params: dict[str, Any],
                                                  field: str) -> None:
    answer = api_client.get("/api/v2/datasets", params=params, headers=READ)
    assert answer.status_code in (400, 422), answer.text
    assert answer.json()["error"]["details"]["field"] == field, answer.text


def test_a_dataset_dag_shows_its_schedule_in_the_list_and_its_document(api_client: httpx.Client) -> None:
    schedule = {"datasets": {"any": ["s3://o", "s3://p"]}}
    for dag_id, body in (("report", {"schedule": schedule}), ("nightly", {"schedule": "0 3 * * *"}), ("manual", {})):
        answer = api_client.post("/api/v2/dags", json={"dag_id": dag_id, "tasks": [task("r")], **body}, headers=ADMIN)
        assert answer.status_code == 201, answer.text
        assert answer.json()["schedule"] == body.get("schedule")
    listed = {d["dag_id"]: d["schedule"] for d in api_client.get("/api/v2/dags", headers=READ).json()["items"]}
    assert listed == {"report": schedule, "nightly": "0 3 * * *", "manual": None}
    assert api_client.get("/api/v2/dags/report", headers=READ).json()["schedule"] == schedule


def test_a_burst_of_one_uri_is_written_in_batches_each_event_recorded_and_audited(
        api_client: httpx.Client, database_url: str) -> None:
    for dag_id in ("hot-a", "hot-b"):
        assert api_client.post("/api/v2/dags", json={"dag_id": dag_id, "schedule": {"datasets": {"all": ["s3://hot"]}},
                                                     "tasks": [task("r")]}, headers=ADMIN).status_code == 201
    sent = 120

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=str(api_client.base_url), timeout=60, limits=limits) as client:
            return await asyncio.gather(*(client.post(EVENTS, json={"uri": "s3://hot", "extra": {"n": i}},
                                                      headers=ADMIN) for i in range(sent)))

    answers = asyncio.run(burst())
    assert [a.status_code for a in answers] == [201] * sent
    assert {a.json()["queued_for"] for a in answers} == {2}
    with psycopg.connect(database_url) as db:
        events, extras, written_at = db.execute(
            "SELECT count(*), count(DISTINCT extra), count(DISTINCT created_at) FROM dataset_events").fetchone()
        queue = db.execute("SELECT dag_id, events FROM dataset_queue ORDER BY dag_id").fetchall()
        audited = db.execute("SELECT count(*) FROM audit_events WHERE path = %s AND status = 201",
                             (EVENTS,)).fetchone()[0]
    assert events == extras == audited == sent and queue == [("hot-a", sent), ("hot-b", sent)]
    # Reports that arrived while a write committed shared the next one (its clock reading): one
    # transaction a report would give each its own reading.
    assert written_at < sent, written_at


def test_the_list_of_one_dag_holds_what_it_produces_and_consumes(api_client: httpx.Client) -> None:
    both = {"dag_id": "both", "schedule": {"datasets": {"all": ["s3://a", "s3://b"]}},
            "tasks": [task("t", produces=["s3://c"])]}
    assert api_client.post("/api/v2/dags", json=both, headers=ADMIN).status_code == 201
    assert api_client.post("/api/v2/dags", json={"dag_id": "other", "schedule": {"datasets": {"all": ["s3://z"]}},
                                                 "tasks": [task("t")]}, headers=ADMIN).status_code == 201
    assert api_client.post(EVENTS, json={"uri": "s3://a"}, headers=ADMIN).status_code == 201
    listed = api_client.get("/api/v2/datasets", params={"dag_id": "both"}, headers=READ).json()["items"]
    assert [(d["uri"], d["consumers"], [q["dag_id"] for q in d["queued"]]) for d in listed] == [
        ("s3://a", ["both"], ["both"]), ("s3://b", ["both"], []), ("s3://c", [], [])]
    assert api_client.get("/api/v2/datasets", params={"dag_id": "nope"}, headers=READ).json()["items"] == []
    too_long = api_client.get("/api/v2/datasets", params={"dag_id": "x" * 51}, headers=READ)
    assert too_long.status_code == 400 and too_long.json()["error"]["details"]["field"] == "dag_id"
