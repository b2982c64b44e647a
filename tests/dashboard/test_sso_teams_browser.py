"""Teams through single sign-on, in a real browser: the provider's groups decide what a person sees and does.

Chromium (Playwright) against the API under uvicorn with a teams file, and the test provider
process (tests/harness/oidc_provider.py). Two teams (``data-`` and ``ml-`` DAG-id prefixes); the
provider's ``data-ops`` group operates team ``data``, ``data-view`` views it. Each person signs in
through the provider's own page and then sees only the team's DAG; the operator triggers it from
the page, and reading the other team's DAG answers 404 (as a missing one would); the viewer gets no
trigger button, and a write sent from the page anyway is refused. Fails on any console error the
test did not expect.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.dashboard.conftest import ADMIN_TOKEN, Browse, api_settings, serve_api
from tests.dashboard.test_sso_browser import sso_sign_in
from tests.harness.oidc_provider import CLIENT_ID, OidcProvider
from tests.harness.postgres import PostgresServer

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect

USERS: dict[str, dict[str, Any]] = {
    "olga": {"email": "olga@example.com", "groups": ["data-ops"]},
    "vera": {"email": "vera@example.com", "groups": ["data-view"]},
}
TEAMS = """
teams:
  - name: data
    dag_id_prefixes: [data-]
    rules:
      - {group: data-ops, role: operator}
      - {group: data-view, role: viewer}
  - name: ml
    dag_id_prefixes: [ml-]
"""
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
#: What the page itself fetches, with the session cookie and its CSRF value (a write needs both).
FETCH = """async ([method, path]) => {
    const csrf = document.cookie.match(/leoflow_csrf=([^;]+)/)[1];
    const answer = await fetch(path, {method, body: method === 'GET' ? undefined : '{}',
        headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf}});
    return answer.status;
}"""


def _dag(dag_id: str) -> dict[str, object]:
    return {"dag_id": dag_id, "schedule": None,
            "tasks": [{"id": "hello", "image": "busybox:1.36", "command": ["true"]}]}


@pytest.fixture(scope="module")
def site(pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("sso-teams")
    teams = Path(home) / "teams.yaml"
    teams.write_text(TEAMS)
    idp = OidcProvider(tmp_path_factory.mktemp("idp"), USERS)
    idp.start()
    url = pg_server.create_database()
    try:
        settings = api_settings(url, LEOFLOW_OIDC_ISSUER=idp.issuer, LEOFLOW_OIDC_CLIENT_ID=CLIENT_ID,
                                LEOFLOW_OIDC_SESSION_SECRET="k" * 40, LEOFLOW_TEAMS_FILE=str(teams))
        with serve_api(settings) as base:
            for dag_id in ("data-etl", "ml-train"):
                answer = httpx.post(f"{base}/api/v2/dags", json=_dag(dag_id), headers=ADMIN)
                assert answer.status_code == 201, answer.text
            yield base
    finally:
        idp.stop()
        pg_server.drop_database(url)


def runs_of(base: str, dag_id: str) -> int:
    answer = httpx.get(f"{base}/api/v2/dags/{dag_id}/runs", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return len(answer.json()["items"])


def sees_only_the_teams_dag(browse: Browse, base: str) -> None:
    page = browse.page
    page.goto(f"{base}/#/dags")
    expect(page.locator("[data-testid=dags-table] tr[data-dag=data-etl]")).to_be_visible()
    expect(page.locator("[data-testid=dags-table] tr[data-dag=ml-train]")).to_have_count(0)


def test_a_teams_operator_sees_its_dag_only_and_triggers_it(site: str, open_page: Callable[..., Browse]) -> None:
    browse = open_page()
    browse.problems.tolerate("404", "/api/v2/dags/ml-train")
    browse.problems.tolerate("404", "/api/v2/dags/no-such-dag")
    sso_sign_in(browse, site, "olga", "#/dags")
    sees_only_the_teams_dag(browse, site)
    page = browse.page
    # Another team's DAG answers as a missing one would: nothing to enumerate.
    assert page.evaluate(FETCH, ["GET", "/api/v2/dags/ml-train"]) == 404
    assert page.evaluate(FETCH, ["GET", "/api/v2/dags/no-such-dag"]) == 404
    page.goto(f"{site}/#/dags/data-etl")
    before = runs_of(site, "data-etl")
    page.get_by_test_id("trigger-button").click()
    page.get_by_test_id("trigger-submit").click()
    deadline = time.monotonic() + 30
    while runs_of(site, "data-etl") == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert runs_of(site, "data-etl") == before + 1
    assert page.evaluate(FETCH, ["POST", "/api/v2/dags/ml-train/runs"]) == 404
    assert runs_of(site, "ml-train") == 0
    browse.screenshot("sso-team-operator")


def test_a_teams_viewer_sees_its_dag_and_is_refused_a_trigger(site: str, open_page: Callable[..., Browse]) -> None:
    browse = open_page()
    browse.problems.tolerate("403", "/api/v2/dags/data-etl/runs")
    sso_sign_in(browse, site, "vera", "#/dags")
    sees_only_the_teams_dag(browse, site)
    page = browse.page
    page.goto(f"{site}/#/dags/data-etl")
    expect(page.get_by_test_id("task-graph")).to_be_visible()
    expect(page.get_by_test_id("trigger-button")).to_have_count(0)
    before = runs_of(site, "data-etl")
    assert page.evaluate(FETCH, ["POST", "/api/v2/dags/data-etl/runs"]) == 403
    assert runs_of(site, "data-etl") == before
    browse.screenshot("sso-team-viewer")
