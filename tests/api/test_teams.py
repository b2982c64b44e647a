"""Teams and roles on real PostgreSQL: a DAG of another team is 404, lists show only your team's,
each role may do exactly its actions, the teams file reloads without a restart and a bad one is one line."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from leoflow.api.app import create_app
from leoflow.errors import SettingsError
from tests.api.conftest import ADMIN, READ, api_settings, spec
from tests.api.live import client_for

TEAMS = """
teams:
  - name: data
    dag_id_prefixes: [data-]
    rules:
      - {group: data-eng, role: editor}
  - name: ml
    dag_id_prefixes: [ml-]
admin_groups: [platform-admins]
"""


def _token(client: httpx.Client, role: str, team: str | None) -> dict[str, str]:
    body: dict[str, Any] = {"name": f"{role}-{team or 'all'}", "role": role, "expires_in_days": 1}
    if team is not None:
        body["team"] = team
    answer = client.post("/api/v2/tokens", json=body, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return {"Authorization": f"Bearer {answer.json()['secret']}"}


@pytest.fixture
def teams_file(tmp_path: Path) -> Path:
    path = tmp_path / "teams.yaml"
    path.write_text(TEAMS)
    return path


@pytest.fixture
def cluster(database_url: str, teams_file: Path) -> Any:
    with client_for(create_app(api_settings(database_url, LEOFLOW_TEAMS_FILE=str(teams_file)))) as client:
        for dag_id in ("data-etl", "ml-train", "orphan"):
            assert client.post("/api/v2/dags", json=spec(dag_id), headers=ADMIN).status_code == 201
        for dag_id in ("data-etl", "ml-train", "orphan"):
            assert client.post(f"/api/v2/dags/{dag_id}/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
        yield client


def test_another_teams_dag_is_404_word_for_word_like_a_missing_one(cluster: httpx.Client) -> None:
    viewer = _token(cluster, "viewer", "data")
    assert cluster.get("/api/v2/dags/data-etl", headers=viewer).status_code == 200
    hidden = cluster.get("/api/v2/dags/ml-train", headers=viewer)
    missing = cluster.get("/api/v2/dags/ml-nothing", headers=viewer)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["message"].replace("ml-train", "X") == \
        missing.json()["error"]["message"].replace("ml-nothing", "X")
    for path in ("/api/v2/dags/ml-train/runs", "/api/v2/dags/ml-train/runs/r1", "/api/v2/dags/ml-train/runs/r1/tasks",
                 "/api/v2/dags/ml-train/runs/r1/tasks/extract/logs", "/api/v2/dags/ml-train/versions",
                 "/api/v2/dags/orphan", "/api/v2/dags/orphan/runs/r1"):
        assert cluster.get(path, headers=viewer).status_code == 404, path
    # Writes to another team's DAG are 404 too: a write must not confirm that the id exists.
    assert cluster.post("/api/v2/dags/ml-train/runs", json={}, headers=viewer).status_code == 404
    assert cluster.delete("/api/v2/dags/ml-train", headers=viewer).status_code == 404


def test_lists_show_only_what_the_caller_may_read(cluster: httpx.Client) -> None:
    viewer = _token(cluster, "viewer", "data")
    assert [d["dag_id"] for d in cluster.get("/api/v2/dags", headers=viewer).json()["items"]] == ["data-etl"]
    assert {r["dag_id"] for r in cluster.get("/api/v2/runs", headers=viewer).json()["items"]} == {"data-etl"}
    every = {d["dag_id"] for d in cluster.get("/api/v2/dags", headers=ADMIN).json()["items"]}
    assert every == {"data-etl", "ml-train", "orphan"}
    # A static read token reads every DAG (as before teams), the teamless one included.
    assert {d["dag_id"] for d in cluster.get("/api/v2/dags", headers=READ).json()["items"]} == every


def test_each_role_may_do_exactly_its_actions(cluster: httpx.Client) -> None:
    viewer, operator, editor = (_token(cluster, role, "data") for role in ("viewer", "operator", "editor"))
    trigger = "/api/v2/dags/data-etl/runs"
    assert cluster.post(trigger, json={"run_id": "v"}, headers=viewer).status_code == 403
    assert cluster.post(trigger, json={"run_id": "o"}, headers=operator).status_code == 201
    assert cluster.post(trigger, json={"run_id": "e"}, headers=editor).status_code == 201
    assert cluster.post("/api/v2/dags/data-etl/runs/o/cancel", headers=operator).status_code in (200, 202)
    assert cluster.patch("/api/v2/dags/data-etl", json={"paused": True}, headers=operator).status_code == 200
    # Apply: editors, and only DAGs of their team.
    assert cluster.post("/api/v2/dags", json=spec("data-new"), headers=operator).status_code == 403
    assert cluster.post("/api/v2/dags", json=spec("data-new"), headers=editor).status_code == 201
    refused = cluster.post("/api/v2/dags", json=spec("ml-new"), headers=editor)
    assert refused.status_code == 403 and refused.json()["error"]["details"]["field"] == "dag_id"
    assert cluster.post("/api/v2/dags", json=spec("orphan-2"), headers=editor).status_code == 403
    assert cluster.delete("/api/v2/dags/data-new", headers=operator).status_code == 403
    assert cluster.delete("/api/v2/dags/data-new", headers=editor).status_code in (200, 204)
    # Cluster actions are the admins'.
    for headers in (viewer, operator, editor):
        assert cluster.post("/api/v2/pools", json={"name": "p", "slots": 1}, headers=headers).status_code == 403
        assert cluster.get("/api/v2/audit", headers=headers).status_code == 403
    for headers in (viewer, operator):
        assert cluster.get("/api/v2/tokens", headers=headers).status_code == 403
    assert cluster.get("/api/v2/dags", headers=_token(cluster, "admin", None)).status_code == 200


def test_sync_edits_only_the_callers_team(cluster: httpx.Client) -> None:
    editor = _token(cluster, "editor", "data")
    files = [{"name": "a.yaml", "content": "dag_id: data-synced\ntasks:\n  - {id: a, image: busybox}\n"}]
    assert cluster.post("/api/v2/dags:sync", json={"source": "data", "files": files}, headers=editor).status_code == 200
    other = [*files, {"name": "b.yaml", "content": "dag_id: ml-synced\ntasks:\n  - {id: a, image: busybox}\n"}]
    answer = cluster.post("/api/v2/dags:sync", json={"source": "data", "files": other}, headers=editor)
    assert answer.status_code == 403 and "ml-synced" in answer.json()["error"]["message"]
    assert cluster.get("/api/v2/dags/ml-synced", headers=ADMIN).status_code == 404  # nothing applied


def test_team_editors_manage_their_teams_tokens(cluster: httpx.Client) -> None:
    editor = _token(cluster, "editor", "data")
    ml_viewer = cluster.post("/api/v2/tokens", json={"name": "ml-bot", "role": "viewer", "team": "ml",
                                                     "expires_in_days": 1}, headers=ADMIN).json()
    mine = cluster.post("/api/v2/tokens", json={"name": "ci", "role": "operator", "team": "data",
                                                "expires_in_days": 1}, headers=editor)
    assert mine.status_code == 201, mine.text
    listed = cluster.get("/api/v2/tokens", headers=editor).json()["items"]
    assert {t["team"] for t in listed} == {"data"} and "ml-bot" not in {t["name"] for t in listed}
    for body in ({"name": "x", "role": "viewer", "team": "ml", "expires_in_days": 1},
                 {"name": "x", "role": "viewer", "expires_in_days": 1},
                 {"name": "x", "role": "admin", "expires_in_days": 1}):
        assert cluster.post("/api/v2/tokens", json=body, headers=editor).status_code == 403, body
    assert cluster.delete(f"/api/v2/tokens/{ml_viewer['id']}", headers=editor).status_code == 404  # not confirmed
    assert cluster.delete(f"/api/v2/tokens/{mine.json()['id']}", headers=editor).status_code == 204
    assert len(cluster.get("/api/v2/tokens", headers=ADMIN).json()["items"]) == 2  # the editor's and ml-bot


def test_a_team_field_owns_the_dag_over_its_prefix(cluster: httpx.Client) -> None:
    data_viewer, ml_viewer, data_editor = (_token(cluster, r, t) for r, t in
                                           (("viewer", "data"), ("viewer", "ml"), ("editor", "data")))
    assert cluster.post("/api/v2/dags", json=spec("shared-report", team="data"), headers=ADMIN).status_code == 201
    assert cluster.get("/api/v2/dags/shared-report", headers=data_viewer).status_code == 200
    assert cluster.get("/api/v2/dags/shared-report", headers=ml_viewer).status_code == 404
    assert "shared-report" in {d["dag_id"] for d in cluster.get("/api/v2/dags", headers=data_viewer).json()["items"]}
    # An editor may not hand a DAG to another team, nor take one by naming itself.
    moved = cluster.post("/api/v2/dags", json=spec("data-etl", team="ml"), headers=data_editor)
    assert moved.status_code == 403 and moved.json()["error"]["details"]["field"] == "team"
    taken = cluster.post("/api/v2/dags", json=spec("ml-train", team="data"), headers=data_editor)
    assert taken.status_code == 403 and taken.json()["error"]["details"]["field"] == "dag_id"
    assert cluster.get("/api/v2/dags/data-etl", headers=data_viewer).status_code == 200
    # An admin moves a DAG: every replica decides by its new team within a second.
    assert cluster.post("/api/v2/dags", json=spec("data-etl", team="ml"), headers=ADMIN).status_code == 201
    deadline = time.monotonic() + 2
    while cluster.get("/api/v2/dags/data-etl", headers=data_viewer).status_code != 404:
        assert time.monotonic() < deadline, "the DAG's new team was not applied"
        time.sleep(0.1)
    assert cluster.get("/api/v2/dags/data-etl", headers=ml_viewer).status_code == 200


def test_a_bad_team_field_is_a_422_naming_it(cluster: httpx.Client) -> None:
    for team in ("Data", 7, "x" * 51, ""):
        answer = cluster.post("/api/v2/dags", json=spec("data-bad", team=team), headers=ADMIN)
        assert answer.status_code == 422, answer.text
        assert "team" in json.dumps(answer.json()["error"]), answer.text


def test_audit_records_identity_and_team(cluster: httpx.Client, database_url: str) -> None:
    operator = _token(cluster, "operator", "data")
    assert cluster.post("/api/v2/dags/data-etl/runs", json={"run_id": "audited"}, headers=operator).status_code == 201
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT actor, actor_kind, team FROM audit_events WHERE run_id = 'audited'").fetchone()
    assert row == ("operator-data", "token", "data")


def test_metrics_with_auth_need_a_cluster_wide_reader(database_url: str, teams_file: Path) -> None:
    settings = api_settings(database_url, LEOFLOW_TEAMS_FILE=str(teams_file), LEOFLOW_METRICS_AUTH="true")
    with client_for(create_app(settings)) as client:
        assert client.get("/metrics", headers=READ).status_code == 200
        assert client.get("/metrics", headers=_token(client, "viewer", None)).status_code == 200
        refused = client.get("/metrics", headers=_token(client, "editor", "data"))
        assert refused.status_code == 403 and "cluster-wide" in refused.json()["error"]["message"]


def test_a_token_names_a_configured_team(cluster: httpx.Client) -> None:
    answer = cluster.post("/api/v2/tokens", json={"name": "x", "role": "viewer", "team": "nope",
                                                  "expires_in_days": 1}, headers=ADMIN)
    assert answer.status_code == 422 and answer.json()["error"]["details"]["field"] == "team"


def test_the_teams_file_reloads_without_a_restart(cluster: httpx.Client, teams_file: Path) -> None:
    viewer = _token(cluster, "viewer", "ml")
    assert cluster.get("/api/v2/dags/orphan", headers=viewer).status_code == 404
    teams_file.write_text(TEAMS.replace("[ml-]", "[ml-, orphan]"))
    os.utime(teams_file, (time.time() + 5, time.time() + 5))  # a new mtime even within the same second
    deadline = time.monotonic() + 5
    while cluster.get("/api/v2/dags/orphan", headers=viewer).status_code != 200:
        assert time.monotonic() < deadline, "the teams file was not reloaded"
        time.sleep(0.1)
    # A bad edit keeps the last good teams (a typo must not lock everyone out).
    teams_file.write_text("teams: [{name: ml, dag_id_prefixes: oops}]\n")
    os.utime(teams_file, (time.time() + 10, time.time() + 10))
    time.sleep(1.3)
    assert cluster.get("/api/v2/dags/orphan", headers=viewer).status_code == 200


@pytest.mark.parametrize(("content", "problem"), [
    ("teams: [{name: Data}]", "teams[0].name"),
    ("teams: [{name: a, dag_id_prefixes: x}]", "teams[0].dag_id_prefixes: must be a list"),
    ("teams: [{name: a, rules: [{group: g, role: root}]}]", "teams[0].rules[0].role"),
    ("teams: [{name: a, rules: [{group: g, role: admin}]}]", "admin_groups"),
    ("teams: [{name: a, rules: [{role: viewer}]}]", "teams[0].rules[0].group"),
    ("teams: [{name: a}, {name: a}]", "declared twice"),
    ("teams: [{name: a, dag_id_prefixes: [x-]}, {name: b, dag_id_prefixes: [x-]}]", "already belongs"),
    ("teams: [{name: a, colour: red}]", "teams[0].colour"),
    ("[1, 2]", "a mapping"),
    ("teams: {name: a}", "teams: must be a list"),
    ("teams: [{name: a, dag_id_prefixes: [" + ", ".join(f"p{i}-" for i in range(101)) + "]}]", "at most 100"),
    ("teams: [" + ", ".join(f"{{name: t{i}}}" for i in range(1001)) + "]", "at most 1000"),
    ("a: &a [1]\nb: [*a, *a, *a", "LEOFLOW_TEAMS_FILE"),
    ("teams: [{name: a, namespace: Team_A}]", "teams[0].namespace"),
    ("teams: [{name: a, namespace: " + "n" * 64 + "}]", "teams[0].namespace"),
    ("teams: [{name: a, namespace: [x]}]", "teams[0].namespace: must be a string"),
    ("teams: [{name: a, service_account: 'a b'}]", "teams[0].service_account"),
    ("teams: [{name: a, pod_template: [1]}]", "teams[0].pod_template"),
    ("teams: [{name: a, pod_template: {spec: {containers: 3}}}]", "teams[0].pod_template.spec.containers"),
    ("teams: [{name: a, pod_template: {metadata: {name: x}}}]", "teams[0].pod_template.metadata"),
])
def test_a_bad_teams_file_stops_the_server_with_one_line(database_url: str, tmp_path: Path, content: str,
                                                          problem: str) -> None:
    path = tmp_path / "teams.yaml"
    path.write_text(content)
    with pytest.raises(SettingsError) as raised:
        create_app(api_settings(database_url, LEOFLOW_TEAMS_FILE=str(path)))
    message = str(raised.value)
    assert message.startswith("LEOFLOW_TEAMS_FILE: ") and problem in message and "\n" not in message, message


def test_no_teams_file_is_todays_behaviour(database_url: str) -> None:
    with client_for(create_app(api_settings(database_url))) as client:
        assert client.post("/api/v2/dags", json=spec("anything"), headers=ADMIN).status_code == 201
        operator = _token(client, "operator", None)
        assert client.post("/api/v2/dags/anything/runs", json={}, headers=operator).status_code == 201
        assert client.get("/api/v2/dags", headers=READ).json()["items"][0]["dag_id"] == "anything"
        assert json.loads(client.get("/api/v2/dags/anything", headers=operator).text)["dag_id"] == "anything"


def test_a_configmap_swap_is_picked_up(tmp_path: Path) -> None:
    """Kubernetes updates a mounted ConfigMap by swapping a ..data symlink to a new directory."""
    from leoflow.api.access import RELOAD_INTERVAL, TeamsSource

    first, second = tmp_path / "..2026_11_29_1", tmp_path / "..2026_11_29_2"
    first.mkdir()
    second.mkdir()
    (first / "teams.yaml").write_text("teams: [{name: a, dag_id_prefixes: [a-]}]\n")
    (second / "teams.yaml").write_text("teams: [{name: b, dag_id_prefixes: [a-]}]\n")
    os.utime(second / "teams.yaml", (time.time() + 60, time.time() + 60))
    (tmp_path / "..data").symlink_to(first.name)
    (tmp_path / "teams.yaml").symlink_to("..data/teams.yaml")
    now = [0.0]
    source = TeamsSource(str(tmp_path / "teams.yaml"), monotonic=lambda: now[0])
    assert source.current().team_of("a-x") == "a"
    (tmp_path / "..data_tmp").symlink_to(second.name)
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")  # the kubelet's atomic swap
    assert source.current().team_of("a-x") == "a"  # not looked at again within the interval
    now[0] += RELOAD_INTERVAL
    assert source.current().team_of("a-x") == "b"


def test_the_dataset_list_shows_a_team_only_what_its_dags_produce_or_consume(cluster: httpx.Client) -> None:
    def dag(dag_id: str, **fields: Any) -> dict[str, Any]:
        return {**spec(dag_id), **fields}

    load = {"id": "load", "image": "busybox", "command": ["true"], "produces": ["s3://shared"]}
    assert cluster.post("/api/v2/dags", json=dag("ml-load", tasks=[load]), headers=ADMIN).status_code == 201
    for dag_id, uri in (("data-report", "s3://shared"), ("ml-report", "s3://shared"), ("ml-only", "s3://ml")):
        answer = cluster.post("/api/v2/dags", json=dag(dag_id, schedule={"datasets": {"any": [uri]}}), headers=ADMIN)
        assert answer.status_code == 201, answer.text
    for uri in ("s3://shared", "s3://ml", "s3://nobody"):
        assert cluster.post("/api/v2/datasets/events", json={"uri": uri}, headers=ADMIN).status_code == 201
    viewer = _token(cluster, "viewer", "data")
    [shared] = cluster.get("/api/v2/datasets", headers=viewer).json()["items"]
    assert shared["uri"] == "s3://shared" and shared["consumers"] == ["data-report"]
    assert shared["producers"] == [] and shared["no_producer"] is False  # produced, by a DAG it may not see
    assert [q["dag_id"] for q in shared["queued"]] == ["data-report"]
    for uri in ("s3://ml", "s3://nobody"):  # named by no DAG it reads, or by none at all
        assert cluster.get("/api/v2/datasets", params={"uri": uri}, headers=viewer).json()["items"] == []
    every = cluster.get("/api/v2/datasets", headers=READ).json()["items"]
    assert [(d["uri"], d["consumers"]) for d in every] == [("s3://ml", ["ml-only"]),
                                                          ("s3://shared", ["data-report", "ml-report"])]
    ml = _token(cluster, "viewer", "ml")
    assert [d["uri"] for d in cluster.get("/api/v2/datasets", headers=ml).json()["items"]] == ["s3://ml", "s3://shared"]
