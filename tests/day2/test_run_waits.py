"""Long-polling a run: an ETag on every answer, 304 when unchanged, an answer as soon as it changes."""

from __future__ import annotations

import threading
import time

import httpx
import psycopg

from tests.api.conftest import ADMIN, READ, spec


def _setup(client: httpx.Client) -> str:
    assert client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 201
    assert client.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
    return "/api/v2/dags/etl/runs/r1"


def test_etag_304_and_an_immediate_answer_on_change(api_client: httpx.Client, database_url: str) -> None:
    path = _setup(api_client)
    first = api_client.get(path, headers=READ)
    etag = first.headers["etag"]
    assert first.status_code == 200 and etag.startswith('"')
    # Unchanged, no wait: 304 at once; the same document gives the same tag.
    same = api_client.get(path, headers={**READ, "If-None-Match": etag})
    assert (same.status_code, same.headers["etag"], same.content) == (304, etag, b"")
    assert api_client.get(path, headers=READ).headers["etag"] == etag

    def change_later() -> None:
        time.sleep(0.5)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE dag_runs SET state = 'running', started_at = now() WHERE run_id = 'r1'")

    threading.Thread(target=change_later, daemon=True).start()
    started = time.monotonic()
    changed = api_client.get(path, params={"wait": 20}, headers={**READ, "If-None-Match": etag})
    waited = time.monotonic() - started
    assert changed.status_code == 200 and changed.json()["state"] == "running"
    assert changed.headers["etag"] != etag
    assert 0.4 < waited < 15  # it waited for the change, and answered long before the 20 s ran out


def test_an_unchanged_run_times_out_with_304_and_an_ended_one_answers_at_once(api_client: httpx.Client,
                                                                               database_url: str) -> None:
    path = _setup(api_client)
    etag = api_client.get(path, headers=READ).headers["etag"]
    started = time.monotonic()
    timed_out = api_client.get(path, params={"wait": 0.6}, headers={**READ, "If-None-Match": etag})
    assert timed_out.status_code == 304 and time.monotonic() - started >= 0.5
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE dag_runs SET state = 'cancelled', ended_at = now() WHERE run_id = 'r1'")
    ended = api_client.get(path, headers=READ).headers["etag"]
    started = time.monotonic()
    answer = api_client.get(path, params={"wait": 20}, headers={**READ, "If-None-Match": ended})
    assert answer.status_code == 304 and time.monotonic() - started < 5  # it will never change: no wait


def test_bad_waits_are_400(api_client: httpx.Client) -> None:
    path = _setup(api_client)
    for bad in ("-1", "31", "soon", "nan"):
        answer = api_client.get(path, params={"wait": bad}, headers=READ)
        assert answer.status_code == 400 and answer.json()["error"]["details"]["field"] == "wait", bad


def test_a_change_is_seen_within_a_fifth_of_the_time_waited_and_never_later_than_the_cap() -> None:
    """The re-read schedule: the pause before each check is at most a fifth of the time already
    waited (plus the first pause), never more than LAST_CHECK, and reaches the cap (so a long
    wait costs ten reads a second, not more). Growing by half, as before, answered a run that
    ended after 100 ms 30-50 ms late."""
    from leoflow.api.run_waits import FIRST_CHECK, LAST_CHECK, check_delay

    waited, checks_in_first_second = 0.0, 0
    for checks in range(200):
        delay = check_delay(checks)
        assert delay <= LAST_CHECK
        assert delay <= FIRST_CHECK + waited / 5 + 1e-9, (checks, waited, delay)
        waited += delay
        checks_in_first_second += waited <= 1.0
    assert check_delay(10_000) == LAST_CHECK
    assert checks_in_first_second <= 20
