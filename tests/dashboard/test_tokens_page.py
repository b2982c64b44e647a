"""The dashboard's API tokens page in a real browser: create (the secret shown once, usable at once), list, revoke."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.dashboard.conftest import DESKTOP, READ_TOKEN, Browse, LiveServer, sign_in

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect


def test_admins_create_and_revoke_tokens_on_the_tokens_page(live_server: LiveServer,
                                                            open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, live_server, fragment="#/tokens")
    table = page.get_by_test_id("tokens-table")
    expect(page.get_by_test_id("apitoken-form")).to_be_visible()
    page.get_by_test_id("apitoken-name").fill("dash-ci")
    page.get_by_test_id("apitoken-role").select_option("viewer")
    page.get_by_test_id("apitoken-days").fill("7")
    page.get_by_test_id("apitoken-submit").click()
    secret_el = page.get_by_test_id("apitoken-secret")
    expect(secret_el).to_contain_text("lft_")
    secret = secret_el.inner_text().strip()
    row = table.locator("tr[data-token=dash-ci]")
    expect(row).to_contain_text("viewer")
    expect(row).to_contain_text(secret[:12])
    assert secret not in table.inner_text()  # the list never shows a secret
    bearer = {"Authorization": f"Bearer {secret}"}
    assert httpx.get(f"{live_server.url}/api/v2/dags", headers=bearer).status_code == 200
    # A bad request is refused with the API's message naming the field.
    browse.problems.tolerate("422", "/api/v2/tokens")
    page.get_by_test_id("apitoken-name").fill("dash-bad")
    page.get_by_test_id("apitoken-days").fill("0")
    page.get_by_test_id("apitoken-submit").click()
    expect(page.get_by_test_id("apitoken-message")).to_contain_text("expires_in_days")
    row.get_by_test_id("apitoken-revoke").click()
    row.get_by_test_id("apitoken-revoke-confirm").click()
    expect(table.locator("tr[data-token=dash-ci]")).to_have_count(0)
    assert httpx.get(f"{live_server.url}/api/v2/dags", headers=bearer).status_code == 401
    browse.screenshot("tokens")


def test_readers_see_no_tokens_link(live_server: LiveServer, open_page: Callable[..., Browse]) -> None:
    reader = open_page(DESKTOP)
    sign_in(reader, live_server, token=READ_TOKEN, fragment="#/dags")
    nav = reader.page.get_by_role("navigation", name="Main").get_by_role("link", name="Tokens")
    expect(nav).to_be_hidden()
