"""Every route of the OpenAPI document, called as every role, answers as docs/access-control.md's
generated role table says: allowed → never 401/403; refused → 403 (same team) or 404 (another team's DAG)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.api.openapi.document import openapi_document
from leoflow.model.access.roles import ROLES
from tests.api.conftest import ADMIN, api_settings, seed_task, spec
from tests.api.live import client_for

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(\w+) (\S+)` \| [^|]+ \|((?: [^|]+ \|){4})$")
#: Path values: the DAG is team data's; deletes aim at things that do not exist, so every later call has its DAG.
VALUES = {"dag_id": "data-etl", "run_id": "r1", "task_id": "extract", "version": "1", "backfill_id": "1",
          "notification_id": "1", "pool": "default", "token_id": "0123456789abcdef", "name": "nothing"}
DELETE_VALUES = {"dag_id": "data-absent", "pool": "absent"}


def role_table() -> dict[tuple[str, str], dict[str, str]]:
    text = (ROOT / "docs" / "access-control.md").read_text()
    block = text.partition("<!-- roles-table:start -->")[2].partition("<!-- roles-table:end -->")[0]
    table: dict[tuple[str, str], dict[str, str]] = {}
    for line in block.strip().splitlines()[2:]:
        found = ROW.match(line)
        assert found, line
        cells = [c.strip() for c in found.group(3).strip(" |").split("|")]
        table[(found.group(1), found.group(2))] = dict(zip(ROLES, cells, strict=True))
    return table


def concrete(method: str, path: str) -> str:
    values = {**VALUES, **DELETE_VALUES} if method == "DELETE" else VALUES
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


def test_the_table_lists_every_operation_of_the_document() -> None:
    documented = {(method.upper(), path) for path, ops in openapi_document()["paths"].items() for method in ops}
    assert set(role_table()) == documented


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Any:
    teams = tmp_path / "teams.yaml"
    teams.write_text("teams:\n  - {name: data, dag_id_prefixes: [data-]}\n  - {name: ml, dag_id_prefixes: [ml-]}\n")
    with client_for(create_app(api_settings(database_url, LEOFLOW_TEAMS_FILE=str(teams)))) as client:
        assert client.post("/api/v2/dags", json=spec("data-etl"), headers=ADMIN).status_code == 201
        assert client.post("/api/v2/dags/data-etl/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
        seed_task(database_url, "data-etl", "r1", "extract", state="success", tries=[{"log": "hi\n"}])
        yield client


def _caller(client: httpx.Client, role: str, team: str | None) -> dict[str, str]:
    body: dict[str, Any] = {"name": f"{role}-{team or 'all'}", "role": role, "expires_in_days": 1}
    if team is not None:
        body["team"] = team
    answer = client.post("/api/v2/tokens", json=body, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return {"Authorization": f"Bearer {answer.json()['secret']}"}


def test_every_route_as_every_role_answers_as_the_table_says(cluster: httpx.Client) -> None:
    callers = {role: _caller(cluster, role, None if role == "admin" else "data") for role in ROLES}
    outsider = _caller(cluster, "editor", "ml")  # an editor, of another team
    checked = 0
    for (method, path), allowed in role_table().items():
        url = concrete(method, path)
        body = {} if method in ("POST", "PUT", "PATCH") else None
        for role, headers in callers.items():
            status = cluster.request(method, url, json=body, headers=headers).status_code
            label = f"{method} {path} as {role}: {status}"
            if allowed[role] in ("yes", "open"):
                assert status not in (401, 403), label
            else:
                assert status == 403, label
            checked += 1
        status = cluster.request(method, url, json=body, headers=outsider).status_code
        label = f"{method} {path} as another team's editor: {status}"
        if "{dag_id}" in path:
            assert status == 404, label  # not 403: another team's DAG ids are not confirmed
        elif allowed["editor"] == "—":
            assert status == 403, label
        else:
            assert status not in (401, 403), label
        if allowed["viewer"] != "open":
            assert cluster.request(method, url, json=body).status_code == 401, f"{method} {path} without a token"
    assert checked >= 4 * 45
