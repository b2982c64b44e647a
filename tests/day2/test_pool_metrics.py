"""Pool gauges on /metrics: what GET /api/v2/pools says, per pool, refreshed on scrape; a pool
that tasks name but nobody created is exported with 0 slots; a deleted pool's series go away."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from leoflow.api.app import create_app
from tests.api.conftest import ADMIN, api_settings
from tests.api.live import client_for
from tests.day2.pool_usage import USAGE, seed_pool_usage

POOL_METRICS = ("leoflow_pool_slots", "leoflow_pool_occupied_slots", "leoflow_pool_open_slots",
                "leoflow_pool_waiting_tasks")


@pytest.fixture
def client(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    monkeypatch.setattr("leoflow.api.routes.system.STATE_GAUGE_TTL", 0.0)  # every scrape reads the database
    with client_for(create_app(api_settings(database_url, LEOFLOW_PARALLELISM="7"))) as api:
        yield api


def scrape(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The pool samples of one scrape: (name, sorted labels) -> value."""
    answer = client.get("/metrics")
    assert answer.status_code == 200, answer.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.text) if family.name in POOL_METRICS
            for s in family.samples}


def of(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], pool: str) -> dict[str, float]:
    """One pool's samples by name (occupied slots as ``..._queued`` / ``..._running``)."""
    out: dict[str, float] = {}
    for (name, labels), value in samples.items():
        by = dict(labels)
        if by["pool"] == pool:
            out[name + (f"_{by['state']}" if "state" in by else "")] = value
    return out


def test_pool_gauges_follow_the_pools(client: httpx.Client, database_url: str) -> None:
    assert of(scrape(client), "default") == {
        "leoflow_pool_slots": 7, "leoflow_pool_occupied_slots_queued": 0, "leoflow_pool_occupied_slots_running": 0,
        "leoflow_pool_open_slots": 7, "leoflow_pool_waiting_tasks": 0}

    assert client.post("/api/v2/pools", json={"name": "gpu", "slots": 3}, headers=ADMIN).status_code == 201
    seed_pool_usage(client, database_url, [*USAGE, ("f", "success", "gpu")])  # a finished task holds nothing
    samples = scrape(client)
    assert of(samples, "gpu") == {
        "leoflow_pool_slots": 3, "leoflow_pool_occupied_slots_queued": 1, "leoflow_pool_occupied_slots_running": 1,
        "leoflow_pool_open_slots": 1, "leoflow_pool_waiting_tasks": 1}
    # Named by a waiting task, created by nobody: 0 slots, so the task waits for ever (alertable).
    assert of(samples, "later")["leoflow_pool_slots"] == 0
    assert of(samples, "later")["leoflow_pool_waiting_tasks"] == 1
    assert of(samples, "default")["leoflow_pool_occupied_slots_running"] == 1
    assert of(samples, "default")["leoflow_pool_open_slots"] == 6

    # Shrunk below its use: open slots never go negative.
    assert client.patch("/api/v2/pools/gpu", json={"slots": 1}, headers=ADMIN).status_code == 200
    assert of(scrape(client), "gpu")["leoflow_pool_open_slots"] == 0

    # Deleted, and no task names it any more: its series are gone, not frozen at their last value.
    assert client.delete("/api/v2/pools/gpu", headers=ADMIN).status_code == 204
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM task_instances WHERE pool = 'gpu'")
    assert of(scrape(client), "gpu") == {}
    assert of(scrape(client), "later")["leoflow_pool_waiting_tasks"] == 1


def test_a_failed_refresh_keeps_the_last_pool_values(client: httpx.Client, database_url: str) -> None:
    assert client.post("/api/v2/pools", json={"name": "gpu", "slots": 3}, headers=ADMIN).status_code == 201
    assert of(scrape(client), "gpu")["leoflow_pool_slots"] == 3
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE pools RENAME TO pools_away")  # the pool statement now fails
        try:
            answer = client.get("/metrics")
            assert answer.status_code == 200  # a scrape never fails because the database did
            assert of(scrape(client), "gpu")["leoflow_pool_slots"] == 3
        finally:
            conn.execute("ALTER TABLE pools_away RENAME TO pools")
