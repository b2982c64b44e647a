"""A write the database rolls back for a deadlock runs again: the user gets the answer, not a 503.

The leader's scheduler and executor row-lock task instances and tries in their own order while
the API cancels a run (run row first, then its task instances), so the two can deadlock;
PostgreSQL then aborts one of them. Found by schemathesis' stateful phase (trigger, then cancel
at once, while the leader queued the run's tasks): ``503 database unavailable: deadlock
detected``. Here the deadlock is made on purpose, with a real server choosing the API as the
victim: a side transaction holds the run's task instance, the API's cancel waits for it, then the
side transaction asks for the run the cancel holds.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import psycopg

from tests.api.conftest import ADMIN, seed_task, spec
from tests.election.cluster import wait_for


def deadlocks(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0])


def waiting_on_a_lock(conn: psycopg.Connection[Any], table: str) -> bool:
    """Whether some session waits for a row lock while writing ``table``."""
    row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                       " AND query ILIKE %s", (f"%{table}%",)).fetchone()
    return bool(row and row[0])


def test_a_cancel_the_database_aborts_for_a_deadlock_runs_again(api_client: httpx.Client, database_url: str) -> None:
    assert api_client.post("/api/v2/dags", json=spec("etl"), headers=ADMIN).status_code == 201
    assert api_client.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
    seed_task(database_url, "etl", "r1", "extract", state="queued")

    with psycopg.connect(database_url, autocommit=True) as watch, psycopg.connect(database_url) as side:
        before = deadlocks(watch)
        # The side transaction never looks for the deadlock itself (30 s), so the API's session,
        # waiting first and looking after the default 1 s, is the one PostgreSQL aborts.
        side.execute("SET deadlock_timeout = '30s'")
        side.execute("UPDATE task_instances SET updated_at = now()"
                     " WHERE run_pk = (SELECT id FROM dag_runs WHERE run_id = 'r1')")
        answers: list[httpx.Response] = []
        cancel = threading.Thread(target=lambda: answers.append(
            api_client.post("/api/v2/dags/etl/runs/r1/cancel", headers=ADMIN)))
        cancel.start()
        wait_for(lambda: waiting_on_a_lock(watch, "task_instances"), 30, "the cancel to wait for the side's lock")
        side.execute("SELECT 1 FROM dag_runs WHERE run_id = 'r1' FOR UPDATE")  # the cycle; the API is aborted
        side.commit()
        cancel.join(60)
        assert deadlocks(watch) == before + 1, "no deadlock happened: the test did not test anything"

    assert len(answers) == 1
    assert answers[0].status_code == 200, answers[0].text
    assert answers[0].json()["state"] == "cancelled"
    task = api_client.get("/api/v2/dags/etl/runs/r1/tasks/extract", headers=ADMIN).json()
    assert task["state"] == "cancelled"
