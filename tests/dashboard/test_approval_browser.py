"""An approval gate in a real browser: the run page shows the waiting task with Approve / Reject, the
task page says what it waits for, and approving (with a comment) lets the leader run it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.dashboard.conftest import DESKTOP, Browse, LiveServer, sign_in

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect


@pytest.fixture(scope="module")
def server(live_server: LiveServer) -> Iterator[LiveServer]:
    with live_server.client() as client:
        spec = {"dag_id": "dash-gate", "tasks": [
            {"id": "gate", "kind": "empty", "wait_for": [{"approval": {"message": "Ship it?"}}]}]}
        answer = client.post("/api/v2/dags", json=spec)
        assert answer.status_code in (200, 201), answer.text
        assert client.post("/api/v2/dags/dash-gate/runs", json={"run_id": "g1"}).status_code == 201
    yield live_server


def test_a_waiting_task_is_approved_from_the_run_page(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/dags/dash-gate/runs/g1/tasks/gate")
    expect(page.get_by_test_id("task-state")).to_contain_text("waiting", timeout=20_000)
    expect(page.get_by_test_id("waiting-for")).to_contain_text("an approval")
    expect(page.get_by_test_id("waiting-for")).to_contain_text("Ship it?")
    page.goto(f"{server.url}/#/dags/dash-gate/runs/g1")
    row = page.locator("tr[data-task=gate]")
    expect(row).to_have_attribute("data-state", "waiting")
    page.get_by_test_id("approval-comment-gate").fill("canary is green")
    page.get_by_test_id("approve-gate").click()
    page.get_by_test_id("approve-gate-confirm").click()
    expect(page.locator("tr[data-task=gate]")).to_have_attribute("data-state", "success", timeout=20_000)
    browse.screenshot("approval")
    with server.client() as client:
        [wait] = client.get("/api/v2/dags/dash-gate/runs/g1/tasks/gate").json()["waiting_for"]
    assert (wait["state"], wait["decision"], wait["comment"]) == ("met", "approve", "canary is green")
