"""The list form of ``POST /api/v2/datasets/events`` (``{events: [{uri, extra}, …]}``): recorded in
one transaction, all or none, each event with its audit row, answered in order; every bad value a
422 naming ``events[i].…`` with nothing kept. And the group commit never splits one request's list
across transactions (what makes it all or none)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
import pytest

from leoflow.api import event_batches
from leoflow.db.stores.datasets.events import ApiEvent
from leoflow.model import limits
from tests.api.conftest import ADMIN, READ

EVENTS = "/api/v2/datasets/events"


def consumer(client: httpx.Client, dag_id: str, *uris: str) -> None:
    answer = client.post("/api/v2/dags", json={"dag_id": dag_id, "schedule": {"datasets": {"any": list(uris)}},
                                               "tasks": [{"id": "r", "image": "busybox", "command": ["true"]}]},
                         headers=ADMIN)
    assert answer.status_code == 201, answer.text


def counts(database_url: str) -> tuple[int, int, list[tuple[str, str, int]]]:
    with psycopg.connect(database_url) as db:
        events = db.execute("SELECT count(*) FROM dataset_events").fetchone()
        audited = db.execute("SELECT count(*) FROM audit_events WHERE path = %s AND status = 201",
                             (EVENTS,)).fetchone()
        queue = db.execute("SELECT dag_id, uri, events FROM dataset_queue ORDER BY dag_id, uri").fetchall()
    assert events is not None and audited is not None
    return int(events[0]), int(audited[0]), [(str(d), str(u), int(n)) for d, u, n in queue]


def test_a_list_is_recorded_in_order_each_event_audited_and_queued(api_client: httpx.Client,
                                                                   database_url: str) -> None:
    consumer(api_client, "orders-report", "s3://o")
    consumer(api_client, "both", "s3://o", "s3://p")
    listed = [{"uri": "s3://o", "extra": {"n": 1}}, {"uri": "s3://p"}, {"uri": "ftp://nobody", "extra": None},
              {"uri": "s3://o", "extra": {"n": 2}}]
    answer = api_client.post(EVENTS, json={"events": listed}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    assert answer.json() == {"events": [
        {"uri": "s3://o", "source": "api", "queued_for": 2}, {"uri": "s3://p", "source": "api", "queued_for": 1},
        {"uri": "ftp://nobody", "source": "api", "queued_for": 0}, {"uri": "s3://o", "source": "api", "queued_for": 2}]}
    events, audited, queue = counts(database_url)
    assert (events, audited) == (4, 4)
    assert queue == [("both", "s3://o", 2), ("both", "s3://p", 1), ("orders-report", "s3://o", 2)]
    with psycopg.connect(database_url) as db:
        rows = db.execute("SELECT details->>'uri', (details->>'queued_for')::int, actor, method FROM audit_events "
                          "WHERE path = %s ORDER BY id", (EVENTS,)).fetchall()
        extras = db.execute("SELECT uri, extra FROM dataset_events ORDER BY id").fetchall()
    assert [(u, n) for u, n, _, _ in rows] == [("s3://o", 2), ("s3://p", 1), ("ftp://nobody", 0), ("s3://o", 2)]
    assert {(a, m) for _, _, a, m in rows} == {("boss", "POST")}
    assert [e for _, e in extras] == [{"n": 1}, {}, {}, {"n": 2}]
    # The single form answers as before.
    one = api_client.post(EVENTS, json={"uri": "s3://p"}, headers=ADMIN)
    assert one.status_code == 201 and one.json() == {"uri": "s3://p", "source": "api", "queued_for": 1}


def test_a_list_of_the_most_events_is_taken_and_one_more_refused(api_client: httpx.Client,
                                                                  database_url: str) -> None:
    most = limits.DATASET_EVENT_BATCH.maximum
    answer = api_client.post(EVENTS, json={"events": [{"uri": f"s3://m/{i}"} for i in range(most)]}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    assert len(answer.json()["events"]) == most
    refused = api_client.post(EVENTS, json={"events": [{"uri": "s3://m"}] * (most + 1)}, headers=ADMIN)
    assert refused.status_code == 422 and refused.json()["error"]["details"]["field"] == "events", refused.text
    assert counts(database_url)[:2] == (most, most)


@pytest.mark.parametrize(("body", "field"), [
    ({"events": []}, "events"),
    ({"events": {"uri": "s3://a"}}, "events"),
    ({"events": None}, "events"),
    ({"events": [{"uri": "s3://a"}, {"uri": "s3://b"}, {"uri": "s3://c"}, {"uri": ""}]}, "events[3].uri"),
    ({"events": [{"uri": "s3://a"}, {"uri": "s3://" + "a" * 10_000}]}, "events[1].uri"),
    ({"events": [{"uri": "s3://a\x1bb"}]}, "events[0].uri"),
    ({"events": [{"uri": "s3://a\u0000"}]}, "events[0].uri"),
    ({"events": [{"extra": {}}]}, "events[0].uri"),
    ({"events": [{"uri": "s3://a"}, "s3://b"]}, "events[1]"),
    ({"events": [{"uri": "s3://a", "extra": [1]}]}, "events[0].extra"),
    ({"events": [{"uri": "s3://a", "extra": {"k": "v" * 20_000}}]}, "events[0].extra"),
    ({"events": [{"uri": "s3://a", "bogus": 1}]}, "events[0].bogus"),
    ({"events": [{"uri": "s3://a"}], "uri": "s3://b"}, "uri"),
], ids=lambda v: repr(v)[:50])
def test_a_bad_list_is_a_422_naming_the_event_and_keeps_nothing(api_client: httpx.Client, database_url: str,
                                                                body: object, field: str) -> None:
    consumer(api_client, "waits", "s3://a")
    answer = api_client.post(EVENTS, json=body, headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field, answer.text
    events, audited, queue = counts(database_url)
    assert (events, audited, queue) == (0, 0, [])


def test_a_reader_cannot_record_a_list(api_client: httpx.Client, database_url: str) -> None:
    assert api_client.post(EVENTS, json={"events": [{"uri": "s3://o"}]}, headers=READ).status_code == 403
    assert counts(database_url)[0] == 0


def test_lists_and_single_events_sent_together_share_commits_and_all_count(api_client: httpx.Client,
                                                                            database_url: str) -> None:
    consumer(api_client, "hot", "s3://hot")

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=str(api_client.base_url), timeout=60,
                                     limits=httpx.Limits(max_connections=40)) as client:
            lists = [client.post(EVENTS, json={"events": [{"uri": "s3://hot", "extra": {"l": i, "n": n}}
                                                          for n in range(50)]}, headers=ADMIN) for i in range(20)]
            singles = [client.post(EVENTS, json={"uri": "s3://hot", "extra": {"s": i}}, headers=ADMIN)
                       for i in range(40)]
            return await asyncio.gather(*lists, *singles)

    answers = asyncio.run(burst())
    assert [a.status_code for a in answers] == [201] * 60
    assert all(e["queued_for"] == 1 for a in answers[:20] for e in a.json()["events"])
    events, audited, queue = counts(database_url)
    assert events == audited == 20 * 50 + 40 and queue == [("hot", "s3://hot", 1040)]
    with psycopg.connect(database_url) as db:
        split = db.execute("SELECT extra->>'l' FROM dataset_events WHERE extra ? 'l' GROUP BY extra->>'l' "
                           "HAVING count(DISTINCT created_at) > 1").fetchall()
    assert split == []  # each list was one transaction (one clock reading)


def pending(size: int) -> Any:
    return event_batches._Pending(None, [ApiEvent("s3://x", {}, None)] * size, None)  # type: ignore[arg-type]


def test_a_batch_never_splits_a_request_and_takes_at_least_one() -> None:
    most = event_batches.MAX_BATCH
    queue = [pending(1), pending(most - 1), pending(1), pending(3)]
    taken, left = event_batches._take(queue)
    assert [len(p.events) for p in taken] == [1, most - 1] and left == queue[2:]
    alone, rest = event_batches._take([pending(most + 5), pending(1)])
    assert [len(p.events) for p in alone] == [most + 5] and len(rest) == 1
    whole, none = event_batches._take(queue[2:])
    assert whole == queue[2:] and none == []
