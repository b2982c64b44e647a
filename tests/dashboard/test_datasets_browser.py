"""The dashboard's datasets in a real browser: the lineage graph (which DAG feeds which, through
which URI), the list with "no producer", and on a DAG that runs on datasets why it has not started."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from tests.dashboard.conftest import DESKTOP, PHONE, Browse, LiveServer, sign_in

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect

A, B = "s3://dash/orders", "s3://dash/customers"


def task(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], **fields}


@pytest.fixture(scope="module")
def server(live_server: LiveServer) -> Iterator[LiveServer]:
    with live_server.client() as client:
        for spec in ({"dag_id": "dash-ingest", "tasks": [task("load", produces=[A])]},
                     {"dag_id": "dash-report", "schedule": {"datasets": {"all": [A, B]}}, "tasks": [task("report")]}):
            answer = client.post("/api/v2/dags", json=spec)
            assert answer.status_code in (200, 201), answer.text
        # Only the orders: the report waits for the customers, which no DAG produces.
        assert client.post("/api/v2/datasets/events", json={"uri": A}).status_code == 201
    yield live_server


def test_the_datasets_page_draws_the_lineage_and_lists_each_uri(server: LiveServer,
                                                                  open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/datasets")
    graph = page.get_by_test_id("lineage-graph")
    expect(graph.locator("g.node")).to_have_count(4)
    edges = sorted(graph.locator("path.edge").evaluate_all("els => els.map(e => e.dataset.edge)"))
    assert edges == sorted([f"dash-ingest->◆ {A}", f"◆ {A}->dash-report", f"◆ {B}->dash-report"])
    expect(graph.locator("g.node.st-dataset")).to_have_count(2)
    table = page.get_by_test_id("datasets-table")
    expect(table.locator(f'tr[data-uri="{B}"]')).to_contain_text("no producer")
    expect(table.locator(f'tr[data-uri="{A}"]')).to_contain_text("dash-ingest.load")
    expect(table.locator(f'tr[data-uri="{A}"]')).to_contain_text("dash-report: 1")
    browse.screenshot("datasets")


def test_a_dag_on_datasets_says_what_it_waits_for(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/dags")
    expect(page.locator("[data-dag=dash-report]")).to_contain_text(f"datasets all: {A}, {B}")
    page.get_by_test_id("dag-link-dash-report").click()
    wait = page.get_by_test_id("dataset-wait")
    expect(wait).to_contain_text(f"Waiting for {B}: 1 of 2 datasets updated.")
    expect(wait).to_contain_text(f"No DAG produces {B}")
    browse.screenshot("dag-waiting-for-datasets")


def test_the_datasets_page_fits_a_phone(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(PHONE)
    page = browse.page
    sign_in(browse, server, fragment="#/datasets")
    expect(page.get_by_test_id("datasets-table")).to_be_visible()
    expect(page.get_by_test_id("lineage-graph").locator("g.node")).to_have_count(4)  # scrolls inside its box
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"page is {overflow}px wider than the phone"
    browse.screenshot("datasets")


def test_a_cron_and_datasets_dag_says_since_which_slot_it_waits(server: LiveServer,
                                                                  open_page: Callable[..., Browse]) -> None:
    """``combine: and``: the pending slot and what it waits for (last here: it adds nodes to the graph)."""
    daily, c, d = "dash-daily", "s3://dash/daily-orders", "s3://dash/daily-customers"
    with server.client() as client:
        spec = {"dag_id": daily, "start_date": "2026-01-01T00:00:00Z",
                "schedule": {"cron": "0 6 * * *", "datasets": {"all": [c, d]}, "combine": "and"},
                "tasks": [task("report")]}
        answer = client.post("/api/v2/dags", json=spec)
        assert answer.status_code in (200, 201), answer.text
        assert answer.json()["pending_slot"] is None  # the leader makes the last 06:00 slot pending
        assert client.post("/api/v2/datasets/events", json={"uri": c}).status_code == 201
        if not server.runs_execute:  # no leader here: plant the slot its step would have written
            with psycopg.connect(server.database_url) as conn:
                conn.execute("UPDATE dags SET pending_slot_at = '2026-01-02T06:00:00Z', "
                             "pending_slot_start = '2026-01-01T06:00:00Z' WHERE dag_id = %s", (daily,))
        for _ in range(100):
            slot = client.get(f"/api/v2/dags/{daily}").json()["pending_slot"]
            if slot is not None:
                break
            time.sleep(0.1)
        assert slot is not None and slot["logical_date"].endswith(("06:00:00Z", "06:00:00+00:00"))
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/dags")
    expect(page.locator(f"[data-dag={daily}]")).to_contain_text(f"0 6 * * * and datasets all: {c}, {d}")
    page.get_by_test_id(f"dag-link-{daily}").click()
    wait = page.get_by_test_id("dataset-wait")
    expect(wait).to_contain_text(f"Waiting for {d} since the")
    expect(wait).to_contain_text("slot: 1 of 2 datasets updated.")
    browse.screenshot("dag-slot-waiting-for-datasets")
