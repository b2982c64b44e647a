"""Team roles for people signed in with the real OpenID Connect provider (tests/harness/oidc_provider.py):
the teams file's rules map the token's groups claim to roles; each person sees and does what the role table says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from leoflow.api.app import create_app
from tests.api.conftest import ADMIN, api_settings, spec
from tests.api.live import client_for
from tests.api.test_oidc import bearer, oidc_env
from tests.harness.oidc_provider import OidcProvider

USERS: dict[str, dict[str, Any]] = {
    "ada": {"email": "ada@example.com", "groups": ["data-eng"]},         # editor of data
    "otto": {"email": "otto@example.com", "groups": ["data-ops"]},       # operator of data
    "vera": {"email": "vera@example.com", "groups": ["ml-readers"]},     # viewer of ml
    "root": {"email": "root@example.com", "groups": ["platform-admins"]},
    "stray": {"email": "stray@example.com", "groups": ["nobody"]},
}
TEAMS = """
teams:
  - name: data
    dag_id_prefixes: [data-]
    rules: [{group: data-eng, role: editor}, {group: data-ops, role: operator}]
  - name: ml
    dag_id_prefixes: [ml-]
    rules: [{group: ml-readers, role: viewer}]
"""


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    with OidcProvider(tmp_path_factory.mktemp("idp"), USERS) as idp:
        yield idp


@pytest.fixture
def api(database_url: str, provider: OidcProvider, tmp_path: Path) -> Iterator[httpx.Client]:
    teams = tmp_path / "teams.yaml"
    teams.write_text(TEAMS)
    settings = api_settings(database_url, LEOFLOW_TEAMS_FILE=str(teams), **oidc_env(provider))
    with client_for(create_app(settings)) as client:
        for dag_id in ("data-etl", "ml-train"):
            assert client.post("/api/v2/dags", json=spec(dag_id), headers=ADMIN).status_code == 201
        yield client


def test_people_get_the_roles_their_groups_are_given(api: httpx.Client, provider: OidcProvider) -> None:
    ada, otto, vera, root, stray = (bearer(provider.device_login(u)["access_token"])
                                    for u in ("ada", "otto", "vera", "root", "stray"))
    assert [d["dag_id"] for d in api.get("/api/v2/dags", headers=ada).json()["items"]] == ["data-etl"]
    assert [d["dag_id"] for d in api.get("/api/v2/dags", headers=vera).json()["items"]] == ["ml-train"]
    # The operator triggers; the viewer is refused on its own team's DAG and gets 404 on another's.
    assert api.post("/api/v2/dags/data-etl/runs", json={"run_id": "by-otto"}, headers=otto).status_code == 201
    assert api.post("/api/v2/dags/ml-train/runs", json={}, headers=vera).status_code == 403
    assert api.get("/api/v2/dags/data-etl", headers=vera).status_code == 404
    # Only the editor applies, and only its team's DAGs.
    assert api.post("/api/v2/dags", json=spec("data-new"), headers=otto).status_code == 403
    assert api.post("/api/v2/dags", json=spec("data-new"), headers=ada).status_code == 201
    assert api.post("/api/v2/dags", json=spec("ml-new"), headers=ada).status_code == 403
    # LEOFLOW_OIDC_ADMIN_GROUPS makes an admin; a person in no team's rules holds no role.
    assert api.post("/api/v2/pools", json={"name": "gpu", "slots": 1}, headers=root).status_code == 201
    assert api.get("/api/v2/dags", headers=stray).status_code == 403
    assert api.get("/api/v2/dags/data-etl", headers=stray).status_code == 404
    audit = api.get("/api/v2/audit", headers=ADMIN).json()["items"]
    trigger = next(e for e in audit if e.get("run_id") == "by-otto")
    assert (trigger["actor"], trigger["actor_kind"], trigger["team"]) == ("otto@example.com", "oidc", "data")
    assert trigger["actor_subject"]  # the provider's sub, stable across e-mail changes
