"""The dashboard as a new user meets it, at phone and desktop sizes: where sign-in lands, that no
action button is clipped (the failed run's Clear/Mark buttons on a phone), that the DAG's tables fit,
that the recent-runs grid has a legend, and that the trigger form's fields look like the others.

Screenshots of each page at each size go to ``test-artifacts/dashboard/`` (``layout-*``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from leoflow.model.spec.params_formats import KNOWN as KNOWN_FORMATS
from leoflow.model.spec.params_validator import FORMATS
from leoflow.model.states import TASK_STATES
from tests.dashboard.conftest import DESKTOP, PHONE, Browse, LiveServer, require_runs_execute, sign_in

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect

RUN_TIMEOUT_S = 120.0
TABLET = {"width": 768, "height": 1024}  # wider than a phone (720 px), narrower than a run's task table
SMALL_LAPTOP = {"width": 1024, "height": 768}  # just wide enough for tables: their buttons wrap in the cell
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, SMALL_LAPTOP, TABLET, PHONE],
                                    ids=["1280x800", "1024x768", "768x1024", "390x844"])

#: A DAG whose first task fails (no retries) and whose second is then upstream_failed: the run
#: page shows every action (clear failed, mark run success, clear and mark each task).
FAILING_DAG = {
    "dag_id": "layout-failing-with-a-long-name",
    "schedule": None,
    "tasks": [{"id": "extract-the-daily-orders", "image": "busybox:1.36", "command": ["sh", "-c", "exit 3"]},
              {"id": "load", "image": "busybox:1.36", "command": ["true"],
               "depends_on": ["extract-the-daily-orders"]}],
}
PARAMS_DAG = {
    "dag_id": "layout-params",
    "schedule": None,
    "params": {"type": "object", "required": ["day"], "properties": {
        "day": {"type": "string", "format": "date", "default": "2026-01-01"},
        "limit": {"type": "integer", "minimum": 1, "default": 10},
        "mode": {"type": "string", "enum": ["full", "delta"], "default": "delta"},
        "note": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "options": {"type": "object", "default": {}}}},
    "tasks": [{"id": "only", "image": "busybox:1.36", "command": ["true"]}],
}

#: Every action button inside the view that the page clips: its text wider than its box, or its
#: box outside the viewport (or outside an ancestor that hides overflow).
CLIPPED_BUTTONS = """() => {
  const width = document.documentElement.clientWidth;
  const clipped = [];
  for (const button of document.querySelectorAll("#view button")) {
    if (button.offsetParent === null) continue;  // not displayed
    const box = button.getBoundingClientRect();
    let hiddenBy = null;
    for (let el = button.parentElement; el && el !== document.body; el = el.parentElement) {
      const style = getComputedStyle(el);
      if (style.overflowX === "visible") continue;
      const outer = el.getBoundingClientRect();
      if (box.left < outer.left - 1 || box.right > outer.right + 1) { hiddenBy = el.className || el.tagName; break; }
    }
    if (button.scrollWidth > button.clientWidth + 1 || box.left < 0 || box.right > width + 1 || hiddenBy) {
      clipped.push(`${button.textContent} (${button.dataset.testid || ""}): text ${button.scrollWidth}px in ` +
                   `${button.clientWidth}px, box ${Math.round(box.left)}..${Math.round(box.right)} of ${width}` +
                   (hiddenBy ? `, hidden by ${hiddenBy}` : ""));
    }
  }
  return clipped;
}"""

#: Tables whose content is wider than what shows of them (the runs grid may scroll: it is a chart).
CLIPPED_TABLES = """() => [...document.querySelectorAll("#view .table-wrap:not(.grid-wrap)")]
  .filter((wrap) => wrap.offsetParent !== null && wrap.scrollWidth > wrap.clientWidth + 1)
  .map((wrap) => `${wrap.querySelector("table")?.dataset.testid}: ${wrap.scrollWidth}px in ${wrap.clientWidth}px`)"""


@pytest.fixture(scope="module")
def server(live_server: LiveServer) -> Iterator[LiveServer]:
    with live_server.client() as client:
        for spec in (FAILING_DAG, PARAMS_DAG):
            response = client.post("/api/v2/dags", json=spec)
            assert response.status_code in (200, 201), response.text
    yield live_server


def failed_run(server: LiveServer, run_id: str) -> str:
    """Trigger FAILING_DAG and wait until the run has failed."""
    dag_id = FAILING_DAG["dag_id"]
    with server.client() as client:
        response = client.post(f"/api/v2/dags/{dag_id}/runs", json={"run_id": run_id})
        assert response.status_code == 201, response.text
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while client.get(f"/api/v2/dags/{dag_id}/runs/{run_id}").json()["state"] != "failed":
            assert time.monotonic() < deadline, f"{run_id} did not fail within {RUN_TIMEOUT_S:.0f} s"
            time.sleep(0.3)
    return run_id


def shot(browse: Browse, name: str) -> None:
    browse.screenshot(f"layout-{name}")


def test_the_legend_knows_every_task_state() -> None:
    """The dashboard's list of task states (the legend's entries) is the model's, in its order."""
    source = (Path(__file__).resolve().parents[2] / "leoflow/api/static/js/format.js").read_text()
    listed = re.search(r"export const TASK_STATES = \[([^\]]*)\]", source)
    assert listed is not None
    assert re.findall(r'"([a-z_]+)"', listed.group(1)) == list(TASK_STATES)


def test_the_trigger_forms_format_examples_pass_the_servers_checks() -> None:
    source = (Path(__file__).resolve().parents[2] / "leoflow/api/static/js/params.js").read_text()
    block = re.search(r"const FORMAT_EXAMPLES = \{(.*?)\};", source, re.S)
    assert block is not None
    examples = dict(re.findall(r'"?([a-z0-9-]+)"?: "([^"]*)"', block.group(1)))
    assert len(examples) >= 9 and set(examples) <= KNOWN_FORMATS, examples
    assert {name: value for name, value in examples.items() if not FORMATS.conforms(value, name)} == {}


def test_sign_in_lands_on_the_dags_page(server: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(PHONE)
    page = browse.page
    sign_in(browse, server, fragment="")
    expect(page.get_by_test_id("dags-table")).to_be_visible()
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="DAGs")).to_have_class("active")
    assert page.title() == "DAGs · Leoflow"
    page.get_by_role("link", name="Leoflow").click()  # the brand leads there too
    expect(page.get_by_test_id("dags-table")).to_be_visible()


@VIEWPORTS
def test_no_action_on_a_failed_run_is_clipped(viewport: dict[str, int], server: LiveServer,
                                              open_page: Callable[..., Browse]) -> None:
    require_runs_execute(server)
    run_id = failed_run(server, f"failed-at-{viewport['width']}")
    browse = open_page(viewport)
    page = browse.page
    sign_in(browse, server, fragment=f"#/dags/{FAILING_DAG['dag_id']}/runs/{run_id}")
    expect(page.locator("[data-testid=ti-table] tr[data-task=load]")).to_have_attribute("data-state",
                                                                                     "upstream_failed")
    expect(page.get_by_test_id("clear-failed")).to_be_visible()
    for testid in ("clear-task-load", "mark-success-load", "mark-failed-load", "mark-run-success"):
        expect(page.get_by_test_id(testid)).to_be_visible()
    shot(browse, "run-failed")
    assert page.evaluate(CLIPPED_BUTTONS) == []
    assert page.evaluate(CLIPPED_TABLES) == []
    page.get_by_test_id("mark-success-extract-the-daily-orders").click()  # its confirmation, open
    expect(page.get_by_test_id("mark-success-extract-the-daily-orders-confirm")).to_be_visible()
    assert page.evaluate(CLIPPED_BUTTONS) == []
    shot(browse, "run-failed-confirm")

    page.goto(f"{server.url}/#/dags/{FAILING_DAG['dag_id']}")
    expect(page.get_by_test_id(f"run-link-{run_id}")).to_be_visible()
    expect(page.get_by_test_id("runs-grid")).to_be_visible()
    shot(browse, "dag")
    assert page.evaluate(CLIPPED_BUTTONS) == []
    assert page.evaluate(CLIPPED_TABLES) == []


def test_the_recent_runs_grid_has_a_legend_of_every_state(server: LiveServer,
                                                          open_page: Callable[..., Browse]) -> None:
    require_runs_execute(server)
    failed_run(server, "for-the-legend")
    browse = open_page(PHONE)
    page = browse.page
    sign_in(browse, server, fragment=f"#/dags/{FAILING_DAG['dag_id']}")
    legend = page.get_by_test_id("state-legend")
    expect(legend).to_be_visible()
    states = legend.locator("[data-state]").evaluate_all("items => items.map((item) => item.dataset.state)")
    assert {"success", "failed", "running", "queued", "up_for_retry", "upstream_failed", "skipped", "cancelling",
            "cancelled", "none"} <= set(states), states
    for state in ("failed", "upstream_failed"):  # each swatch has the colour of the grid's cells
        swatch = legend.locator(f"[data-state={state}] .cell").evaluate("el => getComputedStyle(el).backgroundColor")
        cell = page.locator(f"[data-testid=runs-grid] td .cell[data-state={state}]").first.evaluate(
            "el => getComputedStyle(el).backgroundColor")
        assert swatch == cell, (state, swatch, cell)
    expect(legend).to_contain_text("cancelling")
    assert page.evaluate(CLIPPED_BUTTONS) == []


@VIEWPORTS
def test_the_trigger_forms_fields_are_styled_alike(viewport: dict[str, int], server: LiveServer,
                                                   open_page: Callable[..., Browse]) -> None:
    browse = open_page(viewport)
    page = browse.page
    sign_in(browse, server, fragment=f"#/dags/{PARAMS_DAG['dag_id']}")
    page.get_by_test_id("trigger-button").click()
    expect(page.get_by_test_id("params-form")).to_be_visible()
    look = ("el => { const s = getComputedStyle(el); return [s.borderTopWidth, s.borderTopStyle, s.borderTopColor, "
            "s.borderRadius, s.paddingLeft, s.backgroundColor, s.color, s.fontFamily]; }")
    reference = page.get_by_test_id("trigger-run-id").evaluate(look)  # a styled text input
    for testid in ("param-day", "param-limit", "param-mode", "param-note", "param-at"):
        assert page.get_by_test_id(testid).evaluate(look) == reference, testid
    # a format the server checks shows an example of it
    expect(page.get_by_test_id("param-at")).to_have_attribute("placeholder", "e.g. 2026-11-01T09:30:00Z")
    options = page.get_by_test_id("param-options").evaluate(look)  # JSON: a textarea in the mono font
    assert options[:7] == reference[:7]
    height = page.get_by_test_id("trigger-run-id").evaluate("el => el.offsetHeight")
    fills = "el => [el.offsetWidth, el.parentElement.clientWidth, el.offsetHeight]"  # its label's width
    for testid in ("param-day", "param-limit", "param-mode", "param-note"):
        width, row, tall = page.get_by_test_id(testid).evaluate(fills)
        assert abs(width - row) <= 1 and abs(tall - height) <= 3, (testid, width, row, tall, height)
    shot(browse, "trigger-form")
    assert page.evaluate(CLIPPED_BUTTONS) == []


@VIEWPORTS
def test_screenshots_of_every_page(viewport: dict[str, int], server: LiveServer,
                                   open_page: Callable[..., Browse]) -> None:
    browse = open_page(viewport)
    page = browse.page
    sign_in(browse, server, fragment="")
    for name, fragment, landmark in [("dags", "#/dags", "dags-table"), ("cluster", "#/cluster", "nodes-table"),
                                     ("pools", "#/pools", "pools-table"), ("audit", "#/audit", "audit-table"),
                                     ("params-dag", f"#/dags/{PARAMS_DAG['dag_id']}", "task-graph")]:
        page.goto(f"{server.url}/{fragment}")
        expect(page.get_by_test_id(landmark)).to_be_visible()
        shot(browse, name)
        assert page.evaluate(CLIPPED_BUTTONS) == [], name
        assert page.evaluate(CLIPPED_TABLES) == [], name
