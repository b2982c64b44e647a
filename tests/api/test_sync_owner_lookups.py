"""A sync in an install with teams looks its DAGs' owners up in one query, not one per DAG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leoflow.api.app import create_app
from leoflow.db.stores import dags as dag_store
from tests.api.conftest import ADMIN, api_settings
from tests.api.live import client_for

TEAMS = """
teams:
  - {name: data, dag_id_prefixes: [data-], namespace: data}
"""


def test_a_sync_of_many_dags_looks_their_owners_up_once(database_url: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[int] = []
    real = dag_store.named_teams

    async def counting(conn: Any, dag_ids: Any) -> dict[str, str | None]:
        lookups.append(len(dag_ids))
        return await real(conn, dag_ids)

    monkeypatch.setattr(dag_store, "named_teams", counting)
    (tmp_path / "teams.yaml").write_text(TEAMS)
    settings = api_settings(database_url, LEOFLOW_TEAMS_FILE=str(tmp_path / "teams.yaml"))
    files = [{"name": f"d{i:03d}.yaml", "content": f"dag_id: data-{i:03d}\ntasks: [{{id: a, kind: empty}}]\n"}
             for i in range(60)]
    with client_for(create_app(settings)) as client:
        answer = client.post("/api/v2/dags:sync", json={"source": "git", "files": files}, headers=ADMIN)
        assert answer.status_code == 200, answer.text[:300]
        assert answer.json()["counts"]["created"] == 60
    assert lookups == [60], lookups
