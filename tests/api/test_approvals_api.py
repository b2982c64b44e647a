"""Approval gates and ``wait_for`` through the API: a DAG named by ``wait_for`` must exist at apply
(422 naming the field), every bad wait value is a 422 naming its field, and an approval is decided
once (operate right, audited with its comment; 404/409/422 otherwise) and shown on the task."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from tests.api.conftest import ADMIN, READ, seed_task

APPROVAL = "/api/v2/dags/ship/runs/r1/tasks/gate/approval"


def task(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], **fields}


def apply(client: httpx.Client, dag_id: str, *tasks: dict[str, Any]) -> httpx.Response:
    return client.post("/api/v2/dags", json={"dag_id": dag_id, "tasks": list(tasks)}, headers=ADMIN)


def test_wait_for_a_dag_that_does_not_exist_is_a_422_at_apply(api_client: httpx.Client) -> None:
    answer = apply(api_client, "report", task("r", wait_for=[{"dag": "ingest"}]))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == "tasks[0].wait_for[0].dag"
    assert "'ingest' does not exist" in answer.json()["error"]["message"]
    assert apply(api_client, "ingest", task("load")).status_code == 201
    ok = apply(api_client, "report", task("r", wait_for=[{"dag": "ingest", "offset": "-1d"}]))
    assert ok.status_code == 201, ok.text
    assert ok.json()["spec"]["tasks"][0]["wait_for"] == [{"dag": "ingest", "states": ["success"], "offset": "-1d"}]
    # Its own DAG (yesterday's run of itself) needs nothing else.
    assert apply(api_client, "self", task("r", wait_for={"dag": "self", "offset": "-1d"})).status_code == 201
    assert api_client.delete("/api/v2/dags/ingest", headers=ADMIN).status_code in (200, 204)
    again = apply(api_client, "other", task("r", wait_for=[{"dag": "ingest"}]))
    assert again.status_code == 422 and again.json()["error"]["details"]["field"] == "tasks[0].wait_for[0].dag"


@pytest.mark.parametrize(("wait_for", "field"), [
    ("ingest", "tasks[0].wait_for"),
    ([{}], "tasks[0].wait_for[0]"),
    ([{"dag": "a", "dataset": "s3://x"}], "tasks[0].wait_for[0]"),
    ([{"dag": "Not A Dag!"}], "tasks[0].wait_for[0].dag"),
    ([{"dag": "a", "states": ["running"]}], "tasks[0].wait_for[0].states[0]"),
    ([{"dag": "a", "states": []}], "tasks[0].wait_for[0].states"),
    ([{"dag": "a", "offset": "yesterday"}], "tasks[0].wait_for[0].offset"),
    ([{"dag": "a", "offset": "-400d"}], "tasks[0].wait_for[0].offset"),
    ([{"dag": "a", "offset": "9" * 50 + "d"}], "tasks[0].wait_for[0].offset"),
    ([{"not_before": True}], "tasks[0].wait_for[0].not_before"),
    ([{"not_before": 1e300}], "tasks[0].wait_for[0].not_before"),
    ([{"dataset": ""}], "tasks[0].wait_for[0].dataset"),
    ([{"dataset": "s3://a\nb"}], "tasks[0].wait_for[0].dataset"),
    ([{"dataset": "x" * 10_000}], "tasks[0].wait_for[0].dataset"),
    ([{"approval": "yes"}], "tasks[0].wait_for[0].approval"),
    ([{"approval": {"message": "m" * 501}}], "tasks[0].wait_for[0].approval.message"),
    ([{"approval": {"who": "me"}}], "tasks[0].wait_for[0].approval.who"),
    ([{"approval": {}, "timeout_seconds": 0}], "tasks[0].wait_for[0].timeout_seconds"),
    ([{"approval": {}, "timeout_seconds": 10**12}], "tasks[0].wait_for[0].timeout_seconds"),
    ([{"approval": {}, "soft_fail": "yes"}], "tasks[0].wait_for[0].soft_fail"),
    ([{"dataset": f"s3://{i}"} for i in range(21)], "tasks[0].wait_for"),
    ([{"dataset": "s3://a"}, {"dataset": "s3://a"}], "tasks[0].wait_for[1]"),
])
def test_bad_wait_values_are_422_naming_the_field(api_client: httpx.Client, wait_for: Any, field: str) -> None:
    answer = apply(api_client, "bad", task("r", wait_for=wait_for))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field, answer.json()


def test_depends_on_past_must_be_a_boolean(api_client: httpx.Client) -> None:
    answer = apply(api_client, "bad", task("r", depends_on_past="yes"))
    assert answer.status_code == 422 and answer.json()["error"]["details"]["field"] == "tasks[0].depends_on_past"
    ok = apply(api_client, "good", task("r", depends_on_past=True))
    assert ok.status_code == 201 and ok.json()["spec"]["tasks"][0]["depends_on_past"] is True


@pytest.fixture
def gate(api_client: httpx.Client, database_url: str) -> httpx.Client:
    assert apply(api_client, "ship", task("gate", wait_for=[{"approval": {"message": "Ship it?"}}])).status_code == 201
    assert api_client.post("/api/v2/dags/ship/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
    seed_task(database_url, "ship", "r1", "gate", state="waiting")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE dag_runs SET state = 'running' WHERE run_id = 'r1'")
        conn.execute("""INSERT INTO task_waits (task_instance_id, position, dag_id, kind, target, timeout_at)
                        SELECT id, 0, 'ship', 'approval', 'Ship it?', now() + interval '1 day'
                        FROM task_instances WHERE task_id = 'gate'""")
    return api_client


def test_an_approval_is_decided_once_audited_and_shown_on_the_task(gate: httpx.Client, database_url: str) -> None:
    shown = gate.get("/api/v2/dags/ship/runs/r1/tasks/gate", headers=READ)
    assert shown.status_code == 200, shown.text
    [wait] = shown.json()["waiting_for"]
    assert (wait["kind"], wait["state"], wait["message"]) == ("approval", "waiting", "Ship it?")
    assert "approval" in wait["reason"] and wait["decision"] is None
    assert gate.post(APPROVAL, json={"decision": "approve"}, headers=READ).status_code == 403
    answer = gate.post(APPROVAL, json={"decision": "approve", "comment": "checked the canary"}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"dag_id": "ship", "run_id": "r1", "task_id": "gate", "decision": "approve",
                             "decided_by": "boss", "comment": "checked the canary"}
    second = gate.post(APPROVAL, json={"decision": "reject"}, headers=ADMIN)
    assert second.status_code == 409 and "already decided" in second.json()["error"]["message"]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT decision, decided_by, comment, state FROM task_waits").fetchall() == [
            ("approve", "boss", "checked the canary", "waiting")]  # the leader applies it
    audit = gate.get("/api/v2/audit", headers=ADMIN).json()["items"]
    [entry] = [e for e in audit if e["path"] == APPROVAL and e["status"] == 200]
    assert entry["details"]["decision"] == "approve" and entry["details"]["comment"] == "checked the canary"


@pytest.mark.parametrize(("body", "field"), [
    ({}, "decision"), ({"decision": "maybe"}, "decision"), ({"decision": 1}, "decision"),
    ({"decision": "reject", "comment": 5}, "comment"), ({"decision": "reject", "comment": "x" * 2001}, "comment"),
    ({"decision": "reject", "comment": "a\x00b"}, "comment"), ({"decision": "reject", "by": "me"}, "by"),
])
def test_bad_approval_bodies_are_422_naming_the_field(gate: httpx.Client, body: dict[str, Any], field: str) -> None:
    answer = gate.post(APPROVAL, json=body, headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field


def test_approving_what_does_not_wait_is_404_or_409(gate: httpx.Client, database_url: str) -> None:
    assert gate.post("/api/v2/dags/ship/runs/r1/tasks/nope/approval", json={"decision": "approve"},
                     headers=ADMIN).status_code == 404
    assert gate.post("/api/v2/dags/ship/runs/r9/tasks/gate/approval", json={"decision": "approve"},
                     headers=ADMIN).status_code == 404
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE task_instances SET state = 'cancelled'")
    answer = gate.post(APPROVAL, json={"decision": "approve"}, headers=ADMIN)
    assert answer.status_code == 409 and "cancelled" in answer.json()["error"]["message"]
