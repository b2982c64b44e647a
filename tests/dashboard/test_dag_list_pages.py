"""The DAG list with 250 DAGs in a real browser: pages of 50 (next, previous) and the id-prefix
search, which sends one request per pause in typing and pages within its matches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from tests.dashboard.conftest import DESKTOP, Browse, LiveServer, api_settings, serve_api, sign_in
from tests.harness.postgres import PostgresServer

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect

#: 150 + 100 DAGs: two prefixes, so a search has several pages of matches and a page of ten.
ALPHA = [f"alpha-{i:03d}" for i in range(150)]
BETA = [f"beta-{i:03d}" for i in range(100)]


@pytest.fixture(scope="module")
def many(pg_server: PostgresServer) -> Iterator[LiveServer]:
    database_url = pg_server.create_database()
    try:
        ids = ALPHA + BETA
        with psycopg.connect(database_url, autocommit=True) as db, db.transaction():
            db.execute("INSERT INTO dags (dag_id, paused) SELECT d, d LIKE '%%7' FROM unnest(%s::text[]) AS d", (ids,))
            db.execute("INSERT INTO dag_versions (dag_id, version, spec, spec_hash) "
                       "SELECT dag_id, 1, '{}'::jsonb, 'h' FROM dags")
            db.execute("UPDATE dags d SET current_version_id = v.id FROM dag_versions v WHERE v.dag_id = d.dag_id")
            db.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state) "
                       "SELECT dag_id, 'nightly', current_version_id, 'manual', 'failed' FROM dags "
                       "WHERE dag_id = 'beta-012'")
        with serve_api(api_settings(database_url)) as url:
            yield LiveServer(url=url, runs_execute=False, log_path=None, database_url=database_url)
    finally:
        pg_server.drop_database(database_url)


def rows_of(first: int, last: int) -> str:
    """What the pager says a page holds (with an en dash)."""
    return f"{first}\N{EN DASH}{last}"


def shown(browse: Browse) -> list[str]:
    return [str(x) for x in browse.page.locator("[data-testid=dags-table] tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.dag)")]


def test_the_list_pages_by_fifty(many: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, many, fragment="#/dags")
    rows = page.locator("[data-testid=dags-table] tbody tr")
    expect(rows).to_have_count(50)
    expect(page.get_by_test_id("dags-page")).to_have_text(rows_of(1, 50))
    assert shown(browse) == ALPHA[:50]
    expect(page.get_by_test_id("dags-prev")).to_be_disabled()
    # The last run comes with the list: a badge linking to it, "never" for the rest.
    page.get_by_test_id("dags-next").click()
    expect(page.get_by_test_id("dags-page")).to_have_text(rows_of(51, 100))
    assert shown(browse) == ALPHA[50:100]
    for expected in (rows_of(101, 150), rows_of(151, 200), rows_of(201, 250)):
        page.get_by_test_id("dags-next").click()
        expect(page.get_by_test_id("dags-page")).to_have_text(expected)
    assert shown(browse) == BETA[50:]
    expect(page.get_by_test_id("dags-next")).to_be_disabled()
    page.get_by_test_id("dags-prev").click()
    expect(page.get_by_test_id("dags-page")).to_have_text(rows_of(151, 200))
    assert shown(browse) == BETA[:50]
    run_link = page.locator("[data-dag=beta-012] a[title=nightly]")
    expect(run_link).to_have_text("failed")
    # A poll re-reads the page shown, not the first one.
    page.wait_for_timeout(2_500)
    assert shown(browse) == BETA[:50]
    browse.screenshot("dags-paged")


def test_the_prefix_search_is_debounced_and_pages_within_its_matches(
        many: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    prefixes: list[str] = []
    page.on("request", lambda r: prefixes.extend(parse_qs(urlsplit(r.url).query).get("prefix", []))
            if "/api/v2/dags?" in r.url else None)
    sign_in(browse, many, fragment="#/dags")
    expect(page.locator("[data-testid=dags-table] tbody tr")).to_have_count(50)
    search = page.get_by_test_id("dag-search")
    # Seven keystrokes within a millisecond (a real keyboard's pace depends on the host's load):
    # one request, for what the box says once typing paused; none for "b", "be", ... "beta-0".
    search.evaluate("""el => { for (const v of ["b", "be", "bet", "beta", "beta-", "beta-0", "beta-01"]) {
        el.value = v; el.dispatchEvent(new Event("input", { bubbles: true })); } }""")
    expect(page.locator("[data-testid=dags-table] tbody tr")).to_have_count(10)
    assert shown(browse) == BETA[10:20]
    assert set(prefixes) == {"beta-01"}, prefixes
    expect(page.get_by_test_id("dags-pager")).to_be_hidden()
    assert page.evaluate("location.hash") == "#/dags?prefix=beta-01"

    search.fill("")
    search.press_sequentially("alpha", delay=30)
    expect(page.get_by_test_id("dags-page")).to_have_text(rows_of(1, 50))
    assert shown(browse) == ALPHA[:50]
    # A double click faster than the page arrives moves one page: the second click has no cursor yet
    # (it reused the shown page's, and labelled page 2 as 101-150).
    page.get_by_test_id("dags-next").evaluate("el => { el.click(); el.click(); }")
    expect(page.get_by_test_id("dags-page")).to_have_text(rows_of(51, 100))
    assert shown(browse) == ALPHA[50:100]
    page.get_by_test_id("dags-prev").click()
    expect(page.get_by_test_id("dags-page")).to_have_text(rows_of(1, 50))
    page.get_by_test_id("dags-next").click()
    page.get_by_test_id("dags-next").click()
    expect(page.get_by_test_id("dags-page")).to_have_text(rows_of(101, 150))
    assert shown(browse) == ALPHA[100:]
    expect(page.get_by_test_id("dags-next")).to_be_disabled()

    # Wildcards are text: nothing starts with "%" or "beta_".
    for literal in ("%", "beta_"):
        search.fill(literal)
        empty = page.get_by_test_id("dags-table-empty")
        expect(empty).to_contain_text(f"starts with \N{LEFT DOUBLE QUOTATION MARK}{literal}")
    search.fill("")
    expect(page.get_by_test_id("dags-page")).to_have_text(rows_of(1, 50))
    assert shown(browse) == ALPHA[:50]

    # The search survives a reload: it is in the address.
    page.goto(f"{many.url}/#/dags?prefix=beta-09")
    expect(page.locator("[data-testid=dags-table] tbody tr")).to_have_count(10)
    expect(page.get_by_test_id("dag-search")).to_have_value("beta-09")
    browse.screenshot("dags-searched")
