"""Single sign-on in a real browser: the provider's login page, then the dashboard as that person.

Chromium (Playwright) against the API under uvicorn and the test provider process
(tests/harness/oidc_provider.py): an admin-group member signs in through the provider's page and
triggers a run from the DAG page; a reader signs in, sees no trigger form, and a write sent from
the page anyway is refused. Fails on any console error the test did not expect.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.dashboard.conftest import ADMIN_TOKEN, Browse, api_settings, serve_api
from tests.harness.oidc_provider import CLIENT_ID, PASSWORD, OidcProvider
from tests.harness.postgres import PostgresServer

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect

USERS: dict[str, dict[str, Any]] = {
    "alice": {"email": "alice@example.com", "groups": ["platform-admins"]},
    "bob": {"email": "bob@example.com", "groups": ["data"]},
}
DAG = {"dag_id": "sso-dag", "schedule": None,
       "tasks": [{"id": "hello", "image": "busybox:1.36", "command": ["true"]}]}


@pytest.fixture(scope="module")
def site(pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    idp = OidcProvider(tmp_path_factory.mktemp("idp"), USERS)
    idp.start()
    url = pg_server.create_database()
    try:
        settings = api_settings(url, LEOFLOW_OIDC_ISSUER=idp.issuer, LEOFLOW_OIDC_CLIENT_ID=CLIENT_ID,
                                LEOFLOW_OIDC_ADMIN_GROUPS="platform-admins", LEOFLOW_OIDC_SESSION_SECRET="k" * 40)
        with serve_api(settings) as base:
            answer = httpx.post(f"{base}/api/v2/dags", json=DAG, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            assert answer.status_code == 201, answer.text
            yield base
    finally:
        idp.stop()
        pg_server.drop_database(url)


def sso_sign_in(browse: Browse, base: str, user: str, fragment: str) -> None:
    page = browse.page
    page.goto(f"{base}/{fragment}")
    expect(page.get_by_test_id("sso-login")).to_be_visible(timeout=30_000)
    page.get_by_test_id("sso-login").click()
    expect(page.locator("#username")).to_be_visible()  # the provider's own sign-in page
    page.fill("#username", user)
    page.fill("#password", PASSWORD)
    page.click("#sign-in")
    expect(page.get_by_test_id("scope")).to_be_visible()


def runs_of(base: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base}/api/v2/dags/sso-dag/runs", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    return list(answer.json()["items"])


def test_an_admin_signs_in_through_the_provider_and_triggers(site: str, open_page: Callable[..., Browse]) -> None:
    browse = open_page()
    sso_sign_in(browse, site, "alice", "#/dags/sso-dag")
    page = browse.page
    expect(page.get_by_test_id("scope")).to_have_text("admin")
    assert page.url.endswith("#/dags/sso-dag")  # back where the sign-in started
    assert "leoflow_session" not in page.evaluate("document.cookie")  # HttpOnly: no script reads it
    before = len(runs_of(site))
    page.get_by_test_id("trigger-button").click()
    page.get_by_test_id("trigger-submit").click()
    deadline = time.monotonic() + 30
    while len(runs_of(site)) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(runs_of(site)) == before + 1
    page.click("#signout")
    expect(page.get_by_test_id("sso-login")).to_be_visible()
    assert page.evaluate("document.cookie") == ""  # both cookies gone
    browse.screenshot("sso-signed-out")


def test_a_reader_sees_no_trigger_and_a_write_is_refused(site: str, open_page: Callable[..., Browse]) -> None:
    browse = open_page()
    browse.problems.tolerate("403", "/api/v2/dags/sso-dag/runs")
    sso_sign_in(browse, site, "bob", "#/dags/sso-dag")
    page = browse.page
    expect(page.get_by_test_id("scope")).to_have_text("read-only")
    expect(page.get_by_test_id("trigger-button")).to_have_count(0)
    before = len(runs_of(site))
    status = page.evaluate("""async () => {
        const csrf = document.cookie.match(/leoflow_csrf=([^;]+)/)[1];
        const answer = await fetch('/api/v2/dags/sso-dag/runs', {method: 'POST', body: '{}',
            headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf}});
        return answer.status;
    }""")
    assert status == 403
    assert len(runs_of(site)) == before
    browse.screenshot("sso-reader")
