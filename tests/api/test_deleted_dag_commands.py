"""Commands on a deleted DAG's runs answer 404 and record nothing (issue 44, item 10).

The delete cancels the DAG's running runs; a clear used to be recorded anyway, and the leader then
re-opened the run and ran its task. The leader's own refusal of a command recorded just before
the delete is tested in tests/scheduler/test_deleted_dag_commands.py.
"""

from __future__ import annotations

import threading
import time

import httpx
import psycopg

from tests.api.conftest import ADMIN, seed_task, spec


def test_commands_on_a_deleted_dags_run_are_404_and_change_nothing(api_client: httpx.Client,
                                                                  database_url: str) -> None:
    post = api_client.post
    assert post("/api/v2/dags", json=spec("etl"), headers=ADMIN).status_code == 201
    assert post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE dag_runs SET state = 'running' WHERE run_id = 'r1'")
    seed_task(database_url, "etl", "r1", "extract", state="running", tries=[{"state": "running", "ended": False}])
    assert api_client.delete("/api/v2/dags/etl", headers=ADMIN).status_code in (200, 204)

    for path, body in (("clear", {"tasks": ["extract"], "downstream": True}), ("clear", {"failed_only": True}),
                       ("tasks/extract/mark", {"state": "success"}), ("mark", {"state": "success"}),
                       ("cancel", None)):
        answer = post(f"/api/v2/dags/etl/runs/r1/{path}", json=body, headers=ADMIN)
        assert answer.status_code == 404, (path, answer.text)
        assert answer.json()["error"]["message"] == "DAG 'etl' not found"
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM run_commands").fetchone() == (0,)  # nothing for the leader
        assert conn.execute("SELECT state, reason FROM dag_runs WHERE run_id = 'r1'").fetchone() == (
            "cancelled", "DAG deleted")
        assert conn.execute("SELECT state FROM task_instances").fetchone() == ("cancelled",)


def test_a_command_the_leader_refused_because_the_dag_was_deleted_meanwhile_is_404(
        api_client: httpx.Client, database_url: str) -> None:
    post = api_client.post
    assert post("/api/v2/dags", json=spec("etl"), headers=ADMIN).status_code == 201
    assert post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE dag_runs SET state = 'failed' WHERE run_id = 'r1'")
    seed_task(database_url, "etl", "r1", "extract", state="failed", tries=[{"state": "failed", "exit_code": 1}])

    def delete_then_refuse() -> None:
        """The DAG is deleted after the API recorded the command; the leader then refuses it."""
        with psycopg.connect(database_url, autocommit=True) as conn:
            for _ in range(200):
                row = conn.execute("SELECT id FROM run_commands WHERE applied_at IS NULL").fetchone()
                if row:
                    conn.execute("UPDATE dags SET deleted = true WHERE dag_id = 'etl'")
                    conn.execute("UPDATE run_commands SET applied_at = now(), term = 7, error = %s WHERE id = %s",
                                 ("DAG 'etl' was deleted: its runs take no commands", row[0]))
                    return
                time.sleep(0.05)

    thread = threading.Thread(target=delete_then_refuse)
    thread.start()
    answer = post("/api/v2/dags/etl/runs/r1/clear", json={"failed_only": True}, headers=ADMIN)
    thread.join()
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["message"] == "DAG 'etl' was deleted: its runs take no commands"
