"""Behaviour under pressure: database calls time out (503, never a hung request) and the pool
never uses more connections than its share of LEOFLOW_DB_POOL_SIZE."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg

from leoflow.api.app import create_app
from leoflow.db.connection.budget import ConnectionBudget
from tests.api.conftest import ADMIN, READ, api_settings, spec
from tests.api.live import client_for


def test_a_blocked_statement_times_out_with_503(database_url: str) -> None:
    app = create_app(api_settings(database_url, LEOFLOW_DB_STATEMENT_TIMEOUT="1"))
    with client_for(app) as client, psycopg.connect(database_url) as blocker:
        assert client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 201
        blocker.execute("LOCK TABLE dags IN ACCESS EXCLUSIVE MODE")  # held until rollback
        started = time.monotonic()
        answer = client.get("/api/v2/dags/etl", headers=READ)
        elapsed = time.monotonic() - started
        blocker.rollback()
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"]
        assert elapsed < 20  # the 1 s statement/lock timeout, not the 60 s client timeout
        assert client.get("/api/v2/dags/etl", headers=READ).status_code == 200


def test_the_pool_stays_within_its_bound_under_concurrent_load(database_url: str) -> None:
    pool_size = 7
    api_share = ConnectionBudget.split(pool_size).api
    assert api_share == 4
    app = create_app(api_settings(database_url, LEOFLOW_DB_POOL_SIZE=str(pool_size)))
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        with psycopg.connect(database_url, autocommit=True) as conn:
            while not stop.is_set():
                count = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                     ("leoflow-api:api-test",)).fetchone()[0]  # type: ignore[index]
                peak = max(peak, count)
                time.sleep(0.01)

    with client_for(app) as client:
        client.post("/api/v2/dags", json=spec(), headers=ADMIN)
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            with ThreadPoolExecutor(max_workers=24) as pool:
                answers = list(pool.map(lambda _: client.get("/api/v2/dags/etl", headers=READ).status_code,
                                        range(240)))
        finally:
            stop.set()
            watcher.join()
    assert answers == [200] * 240
    assert 1 <= peak <= api_share
