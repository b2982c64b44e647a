"""Write buttons by the caller's role on the DAG's team, in a real browser against a real API.

Two teams (``data-``, ``ml-`` prefixes). A runtime operator token of team ``data`` sees the pause
switch, trigger and cancel on the team's DAG (and never sees the other team's); a viewer token of
the same team, and the static read token, see none; an operator without a team (every DAG) sees
them on every DAG. The page asks ``/dashboard/session?dag_id=`` what the caller may do there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.dashboard.conftest import (
    ADMIN_TOKEN,
    DESKTOP,
    READ_TOKEN,
    Browse,
    LiveServer,
    api_settings,
    serve_api,
    sign_in,
)
from tests.harness.postgres import PostgresServer

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect

TEAMS = """
teams:
  - {name: data, dag_id_prefixes: [data-]}
  - {name: ml, dag_id_prefixes: [ml-]}
"""
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _dag(dag_id: str) -> dict[str, object]:
    return {"dag_id": dag_id, "tasks": [{"id": "wait", "image": "busybox", "command": ["sleep", "60"]}]}


@pytest.fixture(scope="module")
def teams(pg_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    database_url = pg_server.create_database()
    path = Path(tmp_path_factory.mktemp("teams")) / "teams.yaml"
    path.write_text(TEAMS)
    try:
        with serve_api(api_settings(database_url, LEOFLOW_TEAMS_FILE=str(path))) as url:
            with httpx.Client(base_url=url, headers=ADMIN, timeout=30) as admin:
                for dag_id in ("data-etl", "ml-train"):
                    assert admin.post("/api/v2/dags", json=_dag(dag_id)).status_code == 201
                    assert admin.post(f"/api/v2/dags/{dag_id}/runs", json={"run_id": "r1"}).status_code == 201
            yield LiveServer(url=url, runs_execute=False, log_path=None, database_url=database_url)
    finally:
        pg_server.drop_database(database_url)


def _token(server: LiveServer, role: str, team: str | None) -> str:
    body: dict[str, object] = {"name": f"{role}-{team or 'all'}", "role": role, "expires_in_days": 1}
    if team:
        body["team"] = team
    with httpx.Client(base_url=server.url, headers=ADMIN, timeout=30) as admin:
        answer = admin.post("/api/v2/tokens", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["secret"])


def _buttons(browse: Browse, server: LiveServer, dag_id: str, *, shown: bool) -> None:
    page = browse.page
    page.goto(f"{server.url}/#/dags")
    row = page.locator(f"[data-testid=dags-table] tr[data-dag={dag_id}]")
    expect(row).to_be_visible()
    expect(row.locator("input[role=switch]")).to_have_count(1 if shown else 0)
    page.goto(f"{server.url}/#/dags/{dag_id}")
    expect(page.get_by_test_id("task-graph")).to_be_visible()
    expect(page.get_by_test_id("trigger-button")).to_have_count(1 if shown else 0)
    page.goto(f"{server.url}/#/dags/{dag_id}/runs/r1")
    expect(page.get_by_test_id("run-state")).to_be_visible()
    expect(page.get_by_test_id("cancel-run")).to_have_count(1 if shown else 0)


def test_a_teams_operator_gets_write_buttons_on_its_teams_dags_only(teams: LiveServer,
                                                                     open_page: Callable[..., Browse]) -> None:
    secret = _token(teams, "operator", "data")
    browse = open_page(DESKTOP)
    sign_in(browse, teams, secret, fragment="#/dags")
    expect(browse.page.get_by_test_id("scope")).to_have_text("operator")
    _buttons(browse, teams, "data-etl", shown=True)
    browse.page.goto(f"{teams.url}/#/dags")
    expect(browse.page.locator("[data-testid=dags-table] tr[data-dag=ml-train]")).to_have_count(0)
    # What the page asked: the other team's DAG is left out, word for word like a missing one.
    answer = httpx.get(f"{teams.url}/dashboard/session", params=[("dag_id", "data-etl"), ("dag_id", "ml-train"),
                                                                ("dag_id", "nothing")],
                       headers={"Authorization": f"Bearer {secret}"}).json()
    assert answer["role"] == "operator" and answer["admin"] is False
    assert answer["dags"] == {"data-etl": {"role": "operator", "operate": True, "edit": False}}
    # The trigger button works: the API agrees with the page.
    browse.page.goto(f"{teams.url}/#/dags/data-etl")
    browse.page.get_by_test_id("trigger-button").click()
    browse.page.get_by_test_id("trigger-submit").click()
    expect(browse.page.get_by_test_id("run-state")).to_be_visible()


def test_a_teams_viewer_and_the_read_token_get_none(teams: LiveServer, open_page: Callable[..., Browse]) -> None:
    for token, badge in ((_token(teams, "viewer", "data"), "read-only"), (READ_TOKEN, "read-only")):
        browse = open_page(DESKTOP)
        sign_in(browse, teams, token, fragment="#/dags")
        expect(browse.page.get_by_test_id("scope")).to_have_text(badge)
        _buttons(browse, teams, "data-etl", shown=False)


def test_an_operator_of_every_dag_gets_them_everywhere(teams: LiveServer, open_page: Callable[..., Browse]) -> None:
    browse = open_page(DESKTOP)
    sign_in(browse, teams, _token(teams, "operator", None), fragment="#/dags")
    for dag_id in ("data-etl", "ml-train"):
        _buttons(browse, teams, dag_id, shown=True)
    expect(browse.page.get_by_role("navigation", name="Main").get_by_role("link", name="Tokens")).to_be_hidden()
