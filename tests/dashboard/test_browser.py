"""The dashboard in a real browser (Debian's Chromium via Playwright) against a live server.

Every test fails on any browser console error or uncaught exception (see ``open_page``), and
saves screenshots under ``test-artifacts/dashboard/``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.dashboard.conftest import (
    DESKTOP,
    PHONE,
    READ_TOKEN,
    Browse,
    LiveServer,
    api_settings,
    require_runs_execute,
    serve_api,
    sign_in,
)
from tests.harness.postgres import PostgresServer

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect

RUN_TIMEOUT_MS = 120_000  # a loaded 2-core machine: generous, polled by expect()

FLOW_DAG = {
    "dag_id": "dash-flow",
    "description": "Dashboard test: fan-out/fan-in of shell tasks.",
    "schedule": None,
    "max_active_runs": 4,
    "tasks": [
        {"id": "extract", "image": "busybox:1.36",
         "command": ["sh", "-c", "echo extracting; for i in 1 2 3; do echo row $i; done"]},
        {"id": "transform-a", "image": "busybox:1.36", "command": ["sh", "-c", "echo transform a"],
         "depends_on": ["extract"]},
        {"id": "transform-b", "image": "busybox:1.36", "command": ["sh", "-c", "echo transform b"],
         "depends_on": ["extract"]},
        {"id": "load", "image": "busybox:1.36", "command": ["sh", "-c", "echo loaded-rows-ok"],
         "depends_on": ["transform-a", "transform-b"]},
    ],
}
SLOW_DAG = {
    "dag_id": "dash-slow",
    "schedule": None,
    "tasks": [{"id": "wait", "image": "busybox:1.36", "command": ["sh", "-c", "echo waiting; sleep 300"]}],
}
TAIL_DAG = {
    "dag_id": "dash-tail",
    "schedule": None,
    "tasks": [{"id": "work", "image": "busybox:1.36",
               "command": ["sh", "-c", "echo started; sleep 6; echo finished-ok"]}],
}
PARAMS_DAG = {
    "dag_id": "dash-params",
    "schedule": "0 * * * *",
    "start_date": "2026-01-01T00:00:00Z",
    "paused": True,
    "params": {"type": "object", "required": ["day"], "properties": {
        "day": {"type": "string", "format": "date", "description": "Which day to load", "default": "2026-01-01"},
        "limit": {"type": "integer", "minimum": 1, "default": 10},
        "mode": {"type": "string", "enum": ["full", "delta"], "default": "delta"},
        "dry_run": {"type": "boolean", "default": False}}},
    "tasks": [{"id": "only", "image": "busybox:1.36", "command": ["true"]}],
}
PAUSE_DAG = {
    "dag_id": "dash-pause",
    "schedule": "0 3 * * *",
    "start_date": "2026-01-01T00:00:00Z",
    "tasks": [{"id": "only", "image": "busybox:1.36", "command": ["true"]}],
}


def retry_dag(marker: Path) -> dict[str, Any]:
    """Fails its first try (leaving a marker file), succeeds on the second."""
    script = (f"if [ -e {marker} ]; then echo second-try-ok; "
              f"else touch {marker}; echo first-try-fails; exit 3; fi")
    return {"dag_id": "dash-retry", "schedule": None,
            "tasks": [{"id": "flaky", "image": "busybox:1.36", "command": ["sh", "-c", script],
                       "retries": 1, "retry_delay_seconds": 1}]}


def rerun_dag(marker: Path) -> dict[str, Any]:
    """Fails its first run (no retries; leaves a marker file), succeeds when cleared; `after`
    only runs after a success."""
    script = f"if [ -e {marker} ]; then echo rerun-ok; else touch {marker}; echo first-run-fails; exit 4; fi"
    return {"dag_id": "dash-rerun", "schedule": None,
            "tasks": [{"id": "flaky", "image": "busybox:1.36", "command": ["sh", "-c", script]},
                      {"id": "after", "image": "busybox:1.36", "command": ["sh", "-c", "echo after"],
                       "depends_on": ["flaky"]}]}


@pytest.fixture(scope="module")
def server(live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    marker = tmp_path_factory.mktemp("retry") / "first-try-done"
    rerun_marker = tmp_path_factory.mktemp("rerun") / "first-run-done"
    with live_server.client() as client:
        for spec in (FLOW_DAG, SLOW_DAG, TAIL_DAG, PAUSE_DAG, PARAMS_DAG, retry_dag(marker), rerun_dag(rerun_marker)):
            response = client.post("/api/v2/dags", json=spec)
            assert response.status_code in (200, 201), response.text
    yield live_server


def api_get(server: LiveServer, path: str) -> Any:
    with server.client() as client:
        response = client.get(f"/api/v2{path}")
        assert response.status_code == 200, response.text
        return response.json()


def trigger(server: LiveServer, dag_id: str, **body: Any) -> str:
    with server.client() as client:
        response = client.post(f"/api/v2/dags/{dag_id}/runs", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["run_id"])


def no_page_overflow(browse: Browse) -> None:
    """Usable at this width: the page itself never scrolls sideways (wide tables scroll inside)."""
    overflow = browse.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"page is {overflow}px wider than the {browse.viewport['width']}px viewport"


# --------------------------------------------------------------------------- sign-in and scopes

def test_sign_in_then_cluster_page_shows_leader_and_replicas(server: LiveServer,
                                                             open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server)
    expect(page.get_by_test_id("scope")).to_have_text("admin")
    expect(page.get_by_test_id("nodes")).to_be_visible()
    if server.runs_execute:
        leader = api_get(server, "/cluster/leader")
        expect(page.get_by_test_id("leader-node")).to_have_text(leader["node_id"])
        expect(page.get_by_test_id("leader-term")).to_have_text(str(leader["term"]))
        expect(page.get_by_test_id("nodes-table")).to_contain_text(leader["node_id"])
        expect(page.get_by_test_id("timeline")).to_contain_text("leader_elected")
    else:
        expect(page.get_by_test_id("no-leader")).to_be_visible()
    expect(page.get_by_test_id("live-status")).to_have_text("live")
    browse.screenshot("cluster")


def test_wrong_token_is_refused_without_console_errors(server: LiveServer,
                                                       open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    page.goto(f"{server.url}/#/dags")
    page.get_by_test_id("token-input").fill("certainly-not-a-valid-token")
    page.get_by_test_id("token-submit").click()
    expect(page.locator("#login-error")).to_have_text("That token was not accepted.")
    assert page.evaluate("sessionStorage.length") == 0  # a refused token is not kept
    expect(page.get_by_test_id("dags")).to_have_count(0)
    browse.screenshot("sign-in")


def test_token_is_kept_for_the_browser_session(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/dags")
    page.reload()
    # After a reload the page fetches the DAG list again: on a loaded machine that can take
    # longer than Playwright's default 5 s, so wait with the run's generous bound.
    expect(page.get_by_test_id("dags-table")).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_test_id("token-input")).to_be_hidden()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_test_id("token-input")).to_be_visible(timeout=RUN_TIMEOUT_MS)
    assert page.evaluate("sessionStorage.length") == 0


def test_a_token_revoked_mid_session_returns_to_sign_in(server: LiveServer,
                                                        open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/dags")
    expect(page.get_by_test_id("dags-table")).to_be_visible()
    browse.problems.tolerate("status of 401", "/api/v2/")
    # As if the operator removed the token from LEOFLOW_API_TOKENS: the next poll gets 401.
    page.evaluate("sessionStorage.setItem('leoflow.token', 'revoked-token-0000')")
    expect(page.locator("#login-error")).to_have_text("The token was rejected (expired or revoked).")
    expect(page.get_by_test_id("token-input")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0


def test_read_only_token_sees_no_write_buttons(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    run_id = trigger(server, "dash-slow")
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, READ_TOKEN, fragment="#/dags")
    expect(page.get_by_test_id("scope")).to_have_text("read-only")
    expect(page.get_by_test_id("paused-dash-flow")).to_have_text("active")
    expect(page.locator("input[role=switch]")).to_have_count(0)
    page.get_by_test_id("dag-link-dash-flow").click()
    expect(page.get_by_test_id("task-graph")).to_be_visible()
    expect(page.get_by_test_id("trigger-button")).to_have_count(0)
    page.goto(f"{server.url}/#/dags/dash-slow/runs/{run_id}")
    expect(page.get_by_test_id("run-state")).to_be_visible()
    expect(page.get_by_test_id("cancel-run")).to_have_count(0)
    browse.screenshot("run-read-only")
    with server.client() as client:  # clean up: the slow run must not hold the executor
        client.post(f"/api/v2/dags/dash-slow/runs/{run_id}/cancel")


def test_with_auth_disabled_there_is_no_sign_in(pg_server: PostgresServer,
                                                 open_page: Callable[..., Browse]) -> None:
    database_url = pg_server.create_database()
    try:
        with serve_api(api_settings(database_url, LEOFLOW_AUTH="disabled", LEOFLOW_API_TOKENS="")) as url:
            browse = open_page(DESKTOP)
            page = browse.page
            page.goto(f"{url}/#/dags")
            expect(page.get_by_test_id("dags-table-empty")).to_be_visible()
            expect(page.get_by_test_id("scope")).to_have_text("admin")
            expect(page.get_by_test_id("token-input")).to_be_hidden()
            expect(page.get_by_role("button", name="Sign out")).to_be_hidden()
    finally:
        pg_server.drop_database(database_url)


# --------------------------------------------------------------------------- DAGs and runs

def test_dag_page_draws_the_graph_from_depends_on(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/dags")
    expect(page.get_by_test_id("dags-table")).to_contain_text("dash-flow")
    expect(page.locator("[data-dag=dash-pause]")).to_contain_text("0 3 * * *")
    browse.screenshot("dags")
    page.get_by_test_id("dag-link-dash-flow").click()
    graph = page.get_by_test_id("task-graph")
    expect(graph.locator("g.node")).to_have_count(4)
    edges = sorted(graph.locator("path.edge").evaluate_all("els => els.map(e => e.dataset.edge)"))
    assert edges == ["extract->transform-a", "extract->transform-b", "transform-a->load", "transform-b->load"]
    # Left to right: every edge points right (a layered layout from the dependencies).
    xs = {t: graph.locator(f"g.node[data-task={t}]").bounding_box()["x"]
          for t in ("extract", "transform-a", "transform-b", "load")}
    assert xs["extract"] < xs["transform-a"] == xs["transform-b"] < xs["load"]
    expect(page.get_by_test_id("dag-facts")).to_contain_text("manual only")


def test_trigger_from_the_ui_with_conf_runs_to_success_and_the_log_opens(
        server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/dags/dash-flow")
    page.get_by_test_id("trigger-button").click()
    # Bad JSON is refused in the page, naming the field.
    page.get_by_test_id("trigger-conf").fill("{not json")
    page.get_by_test_id("trigger-submit").click()
    expect(page.get_by_test_id("trigger-form")).to_contain_text("conf:")
    # conf carrying markup must be shown as text, never interpreted.
    page.get_by_test_id("trigger-run-id").fill("ui-run-1")
    page.get_by_test_id("trigger-conf").fill('{"table": "<img src=x onerror=alert(1)>"}')
    page.get_by_test_id("trigger-submit").click()
    expect(page).to_have_url(f"{server.url}/#/dags/dash-flow/runs/ui-run-1")
    expect(page.get_by_test_id("run-facts")).to_contain_text('"<img src=x onerror=alert(1)>"')
    assert api_get(server, "/dags/dash-flow/runs/ui-run-1")["conf"] == {"table": "<img src=x onerror=alert(1)>"}
    require_runs_execute(server)

    # Live updates: the page polls; nobody reloads it.
    expect(page.get_by_test_id("run-state").locator(".badge")).to_have_attribute(
        "data-state", "success", timeout=RUN_TIMEOUT_MS)
    expect(page.locator("[data-testid=ti-table] tbody tr[data-state=success]")).to_have_count(4)
    expect(page.get_by_test_id("gantt").locator(".gantt-row[data-task] .bar.st-success")).to_have_count(4)
    expect(page.get_by_test_id("cancel-run")).to_have_count(0)  # finished runs cannot be cancelled
    browse.screenshot("run")

    page.get_by_test_id("task-link-load").click()
    expect(page.get_by_test_id("try-tab-1")).to_be_visible()
    expect(page.get_by_test_id("log")).to_contain_text("loaded-rows-ok", timeout=RUN_TIMEOUT_MS)
    browse.screenshot("logs")

    page.goto(f"{server.url}/#/dags/dash-flow")
    cells = page.get_by_test_id("runs-grid").locator("td a.cell[data-state=success]")
    expect(cells).to_have_count(4)
    browse.screenshot("dag")


def test_log_page_follows_a_running_try_until_its_log_is_complete(
        server: LiveServer, open_page: Callable[..., Browse]) -> None:
    require_runs_execute(server)
    run_id = trigger(server, "dash-tail")
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment=f"#/dags/dash-tail/runs/{run_id}/tasks/work")
    status = page.get_by_test_id("log-status")
    expect(status).to_have_attribute("data-live", "true", timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_test_id("task-state").locator(".badge")).to_have_attribute("data-state", "running")
    # Where the text comes from: the local executor's growing stored copy (a pod would say "pod").
    expect(status).to_have_attribute("data-source", "stored")
    browse.screenshot("logs-live")
    # No reload: the page keeps polling and shows the finished log when the try ends.
    expect(page.get_by_test_id("log")).to_contain_text("finished-ok", timeout=RUN_TIMEOUT_MS)
    # The try's tab comes from another poll than the log's: on a loaded host it may lag the log
    # by more than the default 5 s, so it gets the same generous bound as the run itself.
    expect(status).to_have_attribute("data-live", "false", timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_test_id("try-tab-1").locator(".badge")).to_have_attribute("data-state", "success",
                                                                                timeout=RUN_TIMEOUT_MS)
    # Standalone archives every log (file:// under its home): the process's archived log is a tab of its own.
    page.get_by_test_id("container-tab-task").click(timeout=RUN_TIMEOUT_MS)
    expect(status).to_have_attribute("data-source", "archive")
    expect(page.get_by_test_id("log")).to_have_text("started\nfinished-ok\n")
    expect(page.get_by_test_id("log-download")).to_be_visible()
    with page.expect_download() as saved:
        page.get_by_test_id("log-download").click()
    assert Path(saved.value.path()).read_text() == "started\nfinished-ok\n"
    assert saved.value.suggested_filename == "work-try1-task.log"
    page.get_by_test_id("container-tab-default").click()
    expect(status).to_have_attribute("data-source", "stored")
    expect(page.get_by_test_id("log-download")).to_be_hidden()
    # Search within the log: plain text, any case; marks keep the text as it is; Next wraps.
    search, count = page.get_by_test_id("log-search"), page.get_by_test_id("log-search-count")
    log = page.get_by_test_id("log")
    search.fill("T")
    expect(count).to_have_text("1 of 2")
    expect(log.locator("mark.hit")).to_have_count(2)
    expect(log.locator("mark.current")).to_have_attribute("data-hit", "0")
    page.get_by_test_id("log-search-next").click()
    expect(count).to_have_text("2 of 2")
    expect(log.locator("mark.current")).to_have_attribute("data-hit", "1")
    search.press("Enter")  # Enter is Next: past the last match, back to the first
    expect(count).to_have_text("1 of 2")
    expect(log).to_have_text("started\nfinished-ok\n")
    search.fill("(.*")  # typed text is never a pattern
    expect(count).to_have_text("no match")
    search.fill("")
    expect(count).to_have_text("")
    expect(log.locator("mark")).to_have_count(0)


def test_cancel_from_the_run_page_stops_the_run(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    run_id = trigger(server, "dash-slow")
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment=f"#/dags/dash-slow/runs/{run_id}")
    if server.runs_execute:  # cancel a task that really runs, not just a queued run
        expect(page.locator("[data-testid=ti-table] tr[data-task=wait]")).to_have_attribute(
            "data-state", "running", timeout=RUN_TIMEOUT_MS)
    page.get_by_test_id("cancel-run").click()
    page.get_by_test_id("cancel-run-confirm").click()
    expect(page.get_by_test_id("run-state").locator(".badge")).to_have_attribute(
        "data-state", "cancelled", timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_test_id("cancel-run")).to_have_count(0)
    assert api_get(server, f"/dags/dash-slow/runs/{run_id}")["state"] == "cancelled"


def test_an_open_confirmation_outlives_the_run_pages_polls(server: LiveServer,
                                                          open_page: Callable[..., Browse]) -> None:
    """The run page redraws its task table on every poll (1.5 s while the run is active); a row's
    "Yes, success" must stay where the operator is about to press it until it is answered. Before,
    each poll replaced it with the idle button, so on a slow host the confirmation could not be hit."""
    require_runs_execute(server)  # row actions appear once the run has started
    run_id = trigger(server, "dash-slow")
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment=f"#/dags/dash-slow/runs/{run_id}")
    expect(page.locator("[data-testid=ti-table] tr[data-task=wait]")).to_have_attribute(
        "data-state", "running", timeout=RUN_TIMEOUT_MS)
    page.get_by_test_id("mark-success-wait").click()
    confirm = page.get_by_test_id("mark-success-wait-confirm")
    handle = confirm.element_handle()
    assert handle is not None
    # Polls are sequential (the next is timed after the last one drew): once the second poll after
    # the click has been sent, a whole refresh has redrawn the page meanwhile. No sleep.
    run_url = f"/api/v2/dags/dash-slow/runs/{run_id}"
    for _ in range(2):
        with page.expect_request(lambda request: unquote(request.url.split("?")[0]).endswith(run_url),
                                 timeout=RUN_TIMEOUT_MS):
            pass
    assert handle.evaluate("el => el.isConnected"), "a poll redrew the open confirmation away"
    confirm.click()
    expect(page.locator("[data-testid=ti-table] tr[data-task=wait]")).to_have_attribute(
        "data-state", "success", timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_test_id("mark-success-wait")).to_have_count(0)


def test_clear_failed_tasks_and_mark_success_from_the_run_page(server: LiveServer,
                                                               open_page: Callable[..., Browse]) -> None:
    require_runs_execute(server)
    run_id = trigger(server, "dash-rerun", run_id="rerun-1")
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment=f"#/dags/dash-rerun/runs/{run_id}")
    state = page.get_by_test_id("run-state").locator(".badge")
    expect(state).to_have_attribute("data-state", "failed", timeout=RUN_TIMEOUT_MS)
    expect(page.locator("[data-testid=ti-table] tr[data-task=after]")).to_have_attribute("data-state",
                                                                                      "upstream_failed")
    browse.screenshot("run-failed-clear")
    page.get_by_test_id("clear-failed").click()
    page.get_by_test_id("clear-failed-confirm").click()
    expect(page.get_by_text("Cleared: after, flaky.")).to_be_visible(timeout=RUN_TIMEOUT_MS)
    expect(state).to_have_attribute("data-state", "success", timeout=RUN_TIMEOUT_MS)
    flaky = page.locator("[data-testid=ti-table] tr[data-task=flaky]")
    expect(flaky).to_contain_text("2/2")  # the rerun is try 2 with a fresh budget; try 1 is kept
    expect(page.get_by_test_id("clear-failed")).to_have_count(0)

    slow = trigger(server, "dash-slow")
    page.goto(f"{server.url}/#/dags/dash-slow/runs/{slow}")
    expect(page.locator("[data-testid=ti-table] tr[data-task=wait]")).to_have_attribute(
        "data-state", "running", timeout=RUN_TIMEOUT_MS)
    page.get_by_test_id("mark-success-wait").click()
    page.get_by_test_id("mark-success-wait-confirm").click()
    expect(state).to_have_attribute("data-state", "success", timeout=RUN_TIMEOUT_MS)
    run = api_get(server, f"/dags/dash-slow/runs/{slow}")
    assert run["tasks"][0]["state"] == "success" and run["tasks"][0]["reason"].startswith("marked success by ")

    other = trigger(server, "dash-slow")
    page.goto(f"{server.url}/#/dags/dash-slow/runs/{other}")
    expect(page.locator("[data-testid=ti-table] tr[data-task=wait]")).to_have_attribute(
        "data-state", "running", timeout=RUN_TIMEOUT_MS)
    page.get_by_test_id("mark-run-failed").click()
    page.get_by_test_id("mark-run-failed-confirm").click()
    expect(state).to_have_attribute("data-state", "failed", timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_test_id("run-reason")).to_contain_text("run marked failed by ")


def test_each_try_has_its_own_log_tab(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    require_runs_execute(server)
    run_id = trigger(server, "dash-retry", run_id="retry-1")
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment=f"#/dags/dash-retry/runs/{run_id}")
    row = page.locator("[data-testid=ti-table] tr[data-task=flaky]")
    expect(row).to_have_attribute("data-state", "success", timeout=RUN_TIMEOUT_MS)
    expect(row).to_contain_text("2/2")
    page.get_by_test_id("task-link-flaky").click()
    expect(page.get_by_test_id("try-tab-2")).to_have_attribute("aria-selected", "true")  # newest try first
    expect(page.get_by_test_id("log")).to_contain_text("second-try-ok")
    page.get_by_test_id("try-tab-1").click()
    expect(page.get_by_test_id("log")).to_contain_text("first-try-fails")
    expect(page.get_by_test_id("try-facts")).to_contain_text("Exit code3")
    expect(page).to_have_url(f"{server.url}/#/dags/dash-retry/runs/{run_id}/tasks/flaky?try=1")
    browse.screenshot("logs-retry")


def test_an_api_outage_is_shown_and_the_page_recovers(server: LiveServer,
                                                      open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/dags")
    expect(page.get_by_test_id("dags-table")).to_be_visible()
    browse.problems.tolerate("net::ERR_FAILED", "/api/v2/")
    page.route("**/api/v2/**", lambda route: route.abort())
    expect(page.get_by_test_id("live-status")).to_have_text("offline — retrying")
    expect(page.get_by_test_id("view-error")).to_contain_text("cannot be reached")
    expect(page.get_by_test_id("dags-table")).to_be_visible()  # the last data stays on screen
    page.unroute("**/api/v2/**")
    expect(page.get_by_test_id("live-status")).to_have_text("live", timeout=60_000)
    expect(page.get_by_test_id("view-error")).to_be_hidden()


def test_a_module_that_fails_to_load_is_shown_and_the_page_reloads_once_the_server_answers(
        server: LiveServer, open_page: Callable[..., Browse]) -> None:
    """One module request lost (a network change, a proxy restart) must not leave a dead page.

    The browser keeps a failed module in the page's module map, so nothing of the app would
    ever run: no sign-in, no notice. The page's loader says so, and reloads once the server
    answers (here its first check is lost too), after a pause that doubles with each failure in
    a row: seeded here to two earlier failures, so 4 s then 8 s, long enough to see each notice.
    """
    browse = open_page(DESKTOP)
    page = browse.page
    module = "/static/js/pages/logs.js"
    lost: list[str] = []

    def lose_the_first(route: Any) -> None:
        request = route.request
        kind = "check" if request.resource_type == "fetch" else request.url if module in request.url else None
        if kind is not None and kind not in lost:
            lost.append(kind)
            route.abort("internetdisconnected")
        else:
            route.continue_()

    browse.problems.tolerate("net::ERR_INTERNET_DISCONNECTED", server.url)
    page.context.add_init_script("sessionStorage.setItem('leoflow.load-failures', '2')")
    page.route(f"{server.url}/**", lose_the_first)
    page.goto(f"{server.url}/#/cluster")
    notice = page.get_by_test_id("load-error")
    expect(notice).to_contain_text("could not load its code (")
    expect(notice).to_contain_text("Retrying in 4 s")
    expect(page.get_by_test_id("live-status")).to_have_text("not loaded — retrying")
    expect(notice).to_contain_text("the server cannot be reached. Retrying in 8 s", timeout=30_000)
    expect(page.get_by_test_id("token-input")).to_be_visible(timeout=30_000)
    assert lost == [f"{server.url}{module}", "check"]
    assert page.evaluate("sessionStorage.getItem('leoflow.load-failures')") is None  # a load worked
    sign_in(browse, server)
    expect(page.get_by_test_id("nodes")).to_be_visible()


def test_a_missing_run_says_not_found(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    browse.problems.tolerate("status of 404", "/api/v2/dags/dash-flow/runs/no-such-run")
    sign_in(browse, server, fragment="#/dags/dash-flow/runs/no-such-run")
    expect(browse.page.get_by_test_id("view-error")).to_contain_text("Not found: run 'no-such-run'")


#: Delays every PATCH the page sends by half a second, in the page itself.
SLOW_PATCH = """{ const send = window.fetch; window.fetch = async (url, options) => {
  if (options && options.method === "PATCH") await new Promise((wake) => setTimeout(wake, 500));
  return send(url, options); }; }"""


def test_pause_and_unpause_a_dag_from_the_list(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    # Every PATCH answers half a second late, as from a slow server: the switch flips the
    # moment it is clicked, before the PATCH answers; its label is redrawn from the list the
    # page re-reads after the server has accepted the change, so the label (not the switch)
    # says when the API must agree. Without the delay, asking the API on the switch's word
    # passed or failed by timing.
    page.add_init_script(SLOW_PATCH)
    sign_in(browse, server, fragment="#/dags")
    switch = page.get_by_test_id("pause-toggle-dash-pause")
    expect(switch).to_be_checked()
    label = page.locator("[data-dag=dash-pause] .switch-text")
    switch.click()
    expect(label).to_have_text("paused")
    expect(page.get_by_test_id("pause-toggle-dash-pause")).not_to_be_checked()
    assert api_get(server, "/dags/dash-pause")["paused"] is True
    browse.screenshot("dags-paused")
    page.get_by_test_id("pause-toggle-dash-pause").click()
    expect(label).to_have_text("active")
    expect(page.get_by_test_id("pause-toggle-dash-pause")).to_be_checked()
    assert api_get(server, "/dags/dash-pause")["paused"] is False


# --------------------------------------------------------------------------- both viewports

@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_every_page_renders_usable_at(viewport: dict[str, int], server: LiveServer,
                                      open_page: Callable[..., Browse]) -> None:
    run_id = trigger(server, "dash-flow", run_id=f"viewport-{viewport['width']}")
    browse = open_page(viewport)
    page = browse.page
    sign_in(browse, server)
    pages = [
        ("cluster", "#/cluster", "nodes"),
        ("dags", "#/dags", "dags-table"),
        ("dag", "#/dags/dash-flow", "task-graph"),
        ("run", f"#/dags/dash-flow/runs/{run_id}", "ti-table"),
        ("logs", f"#/dags/dash-flow/runs/{run_id}/tasks/extract", "log"),
        ("audit", "#/audit", "audit-table"),
        ("pools", "#/pools", "pools-table"),
    ]
    for name, fragment, landmark in pages:
        page.goto(f"{server.url}/{fragment}")
        expect(page.get_by_test_id(landmark)).to_be_visible()
        expect(page.get_by_test_id("live-status")).to_have_text("live")
        for link in ("Cluster", "DAGs"):
            box = page.get_by_role("navigation", name="Main").get_by_role("link", name=link).bounding_box()
            assert box is not None and box["x"] + box["width"] <= viewport["width"], f"{link} nav off-screen on {name}"
        no_page_overflow(browse)
        browse.screenshot(f"page-{name}")


# --------------------------------------------------------------------------- day-2 verbs

def test_the_trigger_form_is_generated_from_params(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    browse.problems.tolerate("422", "/api/v2/dags/dash-params/runs")  # provoked below, on purpose
    page = browse.page
    sign_in(browse, server, fragment="#/dags/dash-params")
    page.get_by_test_id("trigger-button").click()
    expect(page.get_by_test_id("params-form")).to_be_visible()
    expect(page.get_by_test_id("trigger-conf")).to_be_hidden()  # no raw JSON when the schema has fields
    expect(page.get_by_test_id("param-limit")).to_have_value("10")
    expect(page.get_by_test_id("param-day")).to_have_attribute("type", "date")
    expect(page.get_by_test_id("param-day")).to_have_value("2026-01-01")
    # The server's 422 names the field.
    page.get_by_test_id("param-limit").fill("0")
    page.get_by_test_id("trigger-submit").click()
    expect(page.get_by_test_id("trigger-form")).to_contain_text("conf.limit:")
    page.get_by_test_id("param-limit").fill("10")
    page.get_by_test_id("param-day").fill("2026-11-20")
    page.get_by_test_id("param-mode").select_option(label="full")
    page.get_by_test_id("param-dry_run").check()
    page.get_by_test_id("trigger-run-id").fill("params-1")
    page.get_by_test_id("trigger-submit").click()
    expect(page).to_have_url(f"{server.url}/#/dags/dash-params/runs/params-1")
    conf = api_get(server, "/dags/dash-params/runs/params-1")["conf"]
    assert conf == {"day": "2026-11-20", "limit": 10, "mode": "full", "dry_run": True}
    browse.screenshot("trigger-params")


def test_backfill_from_the_dag_page_shows_progress_and_cancels(server: LiveServer,
                                                               open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/dags/dash-params")
    page.get_by_test_id("backfill-button").click()
    page.get_by_test_id("backfill-start").fill("2026-03-01")
    page.get_by_test_id("backfill-end").fill("2026-03-03")
    page.get_by_test_id("backfill-max").fill("1")
    page.get_by_test_id("backfill-submit").click()
    rows = page.get_by_test_id("backfills-table").locator("tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("/48")
    backfill_id = rows.first.get_attribute("data-backfill")
    page.get_by_test_id(f"cancel-backfill-{backfill_id}").click()
    page.get_by_test_id(f"cancel-backfill-{backfill_id}-confirm").click()
    expect(rows.first).to_have_attribute("data-state", "cancelled")
    assert api_get(server, f"/dags/dash-params/backfills/{backfill_id}")["state"] == "cancelled"
    browse.screenshot("backfill")


def test_the_audit_page_lists_writes_and_read_tokens_do_not_see_it(server: LiveServer,
                                                                   open_page: Callable[..., Browse]) -> None:
    trigger(server, "dash-flow", run_id="audited-1")
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/audit")
    table = page.get_by_test_id("audit-table")
    expect(table).to_contain_text("/api/v2/dags/dash-flow/runs")
    expect(table.locator("tr[data-actor=dash-admin]").first).to_be_visible()
    page.get_by_test_id("audit-actor").fill("nobody")
    page.get_by_test_id("audit-actor").press("Enter")
    expect(page.get_by_test_id("audit-table-empty")).to_be_visible()
    browse.screenshot("audit")

    reader = open_page(DESKTOP)
    reader.problems.tolerate("403", "/api/v2/audit")
    sign_in(reader, server, token=READ_TOKEN, fragment="#/audit")
    expect(reader.page.get_by_test_id("audit-forbidden")).to_be_visible()
    nav = reader.page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit")
    expect(nav).to_be_hidden()


def test_the_pools_page_lists_pools_their_use_and_missing_ones(server: LiveServer,
                                                               open_page: Callable[..., Browse]) -> None:
    require_runs_execute(server)
    with server.client() as client:
        created = client.post("/api/v2/pools", json={"name": "dash-gpu", "slots": 3, "description": "GPU nodes"})
        assert created.status_code == 201, created.text
        spec = {"dag_id": "dash-pooled", "tasks": [{"id": "wait", "image": "busybox", "command": ["true"],
                                                    "pool": "dash-nowhere"}]}
        assert client.post("/api/v2/dags", json=spec).status_code in (200, 201)
    trigger(server, "dash-pooled")
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/pools")
    table = page.get_by_test_id("pools-table")
    expect(table.locator("tr[data-pool=default]")).to_contain_text("built in")
    expect(table.locator("tr[data-pool=dash-gpu]")).to_contain_text("GPU nodes")
    # The run's only task names a pool nobody created: it waits, and the page says why.
    missing = table.locator("tr[data-pool=dash-nowhere]")
    expect(missing).to_contain_text("missing")
    expect(missing).to_contain_text("1")
    browse.screenshot("pools")


def test_admins_create_resize_and_delete_pools_on_the_pools_page(server: LiveServer,
                                                                 open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, fragment="#/pools")
    table = page.get_by_test_id("pools-table")
    expect(table.locator("tr[data-pool=default]")).to_contain_text("built in")
    # Create: a row with its slots and none in use.
    page.get_by_test_id("pool-name").fill("dash-batch")
    page.get_by_test_id("pool-slots").fill("2")
    page.get_by_test_id("pool-description").fill("nightly batch")
    page.get_by_test_id("pool-submit").click()
    row = table.locator("tr[data-pool=dash-batch]")
    expect(row).to_contain_text("0 / 2")
    expect(row).to_contain_text("nightly batch")
    # A bad size is refused with the API's message naming the field; nothing changes.
    browse.problems.tolerate("422", "/api/v2/pools/dash-batch")  # provoked here, on purpose
    row.get_by_test_id("pool-edit").click()
    page.get_by_test_id("pool-slots").fill("-1")
    page.get_by_test_id("pool-submit").click()
    expect(page.get_by_test_id("pool-message")).to_contain_text("slots: must be between 0 and 100,000")
    expect(row).to_contain_text("0 / 2")
    # Resize from the row's button, then delete (asked in place).
    row.get_by_test_id("pool-edit").click()
    page.get_by_test_id("pool-slots").fill("5")
    page.get_by_test_id("pool-submit").click()
    expect(row).to_contain_text("0 / 5")
    with server.client() as client:
        assert client.get("/api/v2/pools/dash-batch").json()["slots"] == 5
    row.get_by_test_id("pool-delete").click()
    row.get_by_test_id("pool-delete-confirm").click()
    expect(table.locator("tr[data-pool=dash-batch]")).to_have_count(0)
    with server.client() as client:
        assert client.get("/api/v2/pools/dash-batch").status_code == 404


def test_the_run_page_shows_its_notifications(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    from tests.day2.harness import WebhookReceiver

    require_runs_execute(server)
    with WebhookReceiver().serving() as receiver, server.client() as client:
        spec = {"dag_id": "dash-notify", "schedule": None, "notify": [
            {"on": ["success"], "webhook": {"url": receiver.url}}],
            "tasks": [{"id": "only", "image": "busybox:1.36", "command": ["true"]}]}
        assert client.post("/api/v2/dags", json=spec).status_code in (200, 201)
        run_id = trigger(server, "dash-notify", run_id="notified-1")
        browse = open_page(DESKTOP)
        sign_in(browse, server, fragment=f"#/dags/dash-notify/runs/{run_id}")
        row = browse.page.get_by_test_id("notifications-table").locator("tbody tr")
        expect(row).to_have_attribute("data-state", "delivered", timeout=RUN_TIMEOUT_MS)
        expect(row).to_contain_text("success")
        assert receiver.accepted()[0].json["run_id"] == "notified-1"
        browse.screenshot("run-notifications")


def test_a_scheduler_error_shows_on_the_run_and_a_stopped_schedule_on_the_dag(
        server: LiveServer, open_page: Callable[..., Browse]) -> None:
    """Issue 16: a contained failure is readable where users look — the run page and the DAG page.

    The rows are planted as the scheduler leaves them (a run failed with its reason, a schedule
    stopped with its error), so the test needs no poison to get past the API's validation.
    """
    with server.client() as client:
        spec = {"dag_id": "dash-poisoned", "schedule": "0 * * * *", "start_date": "2026-01-01T00:00:00Z",
                "paused": True, "tasks": [{"id": "only", "image": "busybox:1.36", "command": ["true"]}]}
        assert client.post("/api/v2/dags", json=spec).status_code in (200, 201)
    reason = "scheduler error: RecursionError: maximum recursion depth exceeded while decoding a JSON object"
    error = "scheduler error: CroniterBadDateError: failed to find prev date"
    with psycopg.connect(server.database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, reason, ended_at) "
                     "SELECT dag_id, 'poisoned-1', current_version_id, 'manual', 'failed', %s, now() "
                     "FROM dags WHERE dag_id = 'dash-poisoned'", (reason,))
        conn.execute("UPDATE dags SET schedule_error = %s WHERE dag_id = 'dash-poisoned'", (error,))
    browse = open_page(DESKTOP)
    sign_in(browse, server, fragment="#/dags/dash-poisoned/runs/poisoned-1")
    expect(browse.page.get_by_test_id("run-reason")).to_have_text(f"run failed: {reason}")
    browse.screenshot("run-scheduler-error")
    browse.page.goto(f"{server.url}/#/dags/dash-poisoned")
    expect(browse.page.get_by_test_id("schedule-error")).to_have_text(error)
    browse.screenshot("dag-schedule-stopped")


def test_a_tasks_outputs_show_on_its_panel_as_text(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    """ADR 0014: the task panel lists the outputs, name → value, as text (a ``<script>`` stays
    characters), a long value cut with the rest one click away (and kept open across polls).

    The rows are planted as the leader leaves them: a run that succeeded, its task's try with
    the outputs it stored, and its log.
    """
    long_value = "s3://bucket/" + "p" * 300
    outputs = {"html": "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">",
               "long": long_value, "rows": 12, "meta": {"parts": ["a", "b"]}}
    with server.client() as client:
        spec = {"dag_id": "dash-outputs", "schedule": None,
                "tasks": [{"id": "publish", "image": "busybox:1.36", "command": ["true"]},
                          {"id": "later", "image": "busybox:1.36", "command": ["true"], "depends_on": ["publish"]}]}
        assert client.post("/api/v2/dags", json=spec).status_code in (200, 201)
    with psycopg.connect(server.database_url, autocommit=True) as conn:
        run_pk = conn.execute(
            "INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, started_at, ended_at) "
            "SELECT dag_id, 'outputs-1', current_version_id, 'manual', 'success', now(), now() FROM dags "
            "WHERE dag_id = 'dash-outputs' RETURNING id").fetchone()[0]  # type: ignore[index]
        for task_id, published in (("publish", outputs), ("later", None)):
            ti = conn.execute("INSERT INTO task_instances (run_pk, task_id, state, try_number, max_tries, started_at, "
                              "ended_at) VALUES (%s, %s, 'success', 1, 1, now(), now()) RETURNING id",
                              (run_pk, task_id)).fetchone()[0]  # type: ignore[index]
            try_pk = conn.execute(
                "INSERT INTO task_tries (task_instance_id, try_number, state, term, started_at, ended_at, exit_code, "
                "logs_shipped_at, outputs, outputs_bytes) VALUES (%s, 1, 'success', 1, now(), now(), 0, now(), %s, %s) "
                "RETURNING id", (ti, Jsonb(published) if published else None,
                                 len(json.dumps(published)) if published else None)).fetchone()[0]  # type: ignore[index]
            conn.execute("INSERT INTO task_logs (task_try_id, content, truncated, size_bytes) "
                         "VALUES (%s, %s, false, 3)", (try_pk, "ok\n"))
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, token=READ_TOKEN, fragment="#/dags/dash-outputs/runs/outputs-1/tasks/publish")
    panel = page.get_by_test_id("task-outputs")
    expect(panel).to_be_visible()
    expect(page.get_by_test_id("output-html")).to_have_text(outputs["html"])  # the characters, as written
    assert panel.locator("script, img").count() == 0  # nothing of it became an element
    expect(page.get_by_test_id("output-rows")).to_have_text("12")
    expect(page.get_by_test_id("output-meta")).to_have_text('{"parts":["a","b"]}')
    long = page.get_by_test_id("output-long")
    expect(long.locator("code")).to_have_text(long_value[:160] + "…")
    page.get_by_test_id("output-more-long").click()
    expect(long.locator("code")).to_have_text(long_value)
    expect(long).to_have_attribute("data-expanded", "true")
    page.wait_for_timeout(6_000)  # past the finished task's 5 s poll: still open
    expect(long.locator("code")).to_have_text(long_value)
    expect(page.get_by_test_id("log")).to_contain_text("ok")
    assert page.evaluate("window.pwned === undefined")
    browse.screenshot("task-outputs")
    # A task that published nothing shows no outputs panel.
    page.goto(f"{server.url}/#/dags/dash-outputs/runs/outputs-1/tasks/later")
    expect(page.get_by_test_id("log")).to_contain_text("ok")
    expect(page.get_by_test_id("task-outputs")).to_be_hidden()


def test_a_mapped_task_shows_its_instances_and_each_opens(server: LiveServer,
                                                          open_page: Callable[..., Browse]) -> None:
    """ADR 0014, decision 3: a mapped task is one row with its instances counted by state; its task
    page lists the instances, and each opens on its own tries and log (``?map_index=``)."""
    with server.client() as client:
        spec = {"dag_id": "dash-map", "schedule": None, "tasks": [
            {"id": "each", "image": "busybox:1.36", "command": ["echo", "part {{ item }} at {{ map_index }}"],
             "map_over": ["a", "b", "c"]}]}
        assert client.post("/api/v2/dags", json=spec).status_code in (200, 201)
        assert client.post("/api/v2/dags/dash-map/runs", json={"run_id": "map-1"}).status_code == 201
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, server, token=READ_TOKEN, fragment="#/dags/dash-map/runs/map-1")
    expect(page.get_by_test_id("run-state").locator(".badge")).to_have_attribute(
        "data-state", "success", timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_test_id("map-each")).to_contain_text("3: 3 success")
    page.get_by_test_id("task-link-each").click()
    expect(page.get_by_test_id("task-instances")).to_contain_text("Mapped over 3 items: 3 success.")
    page.get_by_test_id("instance-1").click()
    expect(page.get_by_test_id("log")).to_have_text("part b at 1\n", timeout=RUN_TIMEOUT_MS)
    expect(page.get_by_test_id("try-tab-1")).to_be_visible()
