"""``leoflow tasks approve|reject`` against a live API: the decision recorded, ``tasks show`` listing
what the task waits for, a second decision a one-line error with exit 1."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from leoflow.api.app import create_app
from leoflow.cli.main import main
from tests.api.conftest import ADMIN_TOKEN, api_settings, seed_task
from tests.api.live import serve


@pytest.fixture
def gate(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("INSERT INTO dags (dag_id) VALUES ('ship')")
            conn.execute("""INSERT INTO dag_versions (dag_id, version, spec, spec_hash)
                            VALUES ('ship', 1, '{}', 'x') RETURNING id""")
            conn.execute("""INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state)
                            SELECT 'ship', 'r1', id, 'manual', 'running' FROM dag_versions""")
        seed_task(database_url, "ship", "r1", "gate", state="waiting")
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("""INSERT INTO task_waits (task_instance_id, position, dag_id, kind, target, timeout_at)
                            SELECT id, 0, 'ship', 'approval', 'Ship it?', now() + interval '1 day'
                            FROM task_instances""")
        yield url


def test_approve_records_the_decision_and_show_lists_the_wait(gate: str, database_url: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "show", "ship", "r1", "gate"]) == 0
    out = capsys.readouterr().out
    assert "waiting for:" in out and "[waiting] an approval" in out and "Ship it?" in out
    assert main(["tasks", "approve", "ship", "r1", "gate", "-m", "canary is green"]) == 0
    assert capsys.readouterr().out.strip() == "ship: run r1 task gate approved by boss"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT decision, comment FROM task_waits").fetchall() == [("approve", "canary is green")]
    assert main(["tasks", "reject", "ship", "r1", "gate"]) == 1
    err = capsys.readouterr().err
    assert "already decided" in err and len(err.strip().splitlines()) == 1
