"""Pools through the API and the CLI: create, resize, list, delete; every bad body is a 4xx naming
the field; the default pool is built in; pools that tasks name but nobody created are listed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from leoflow.api.app import create_app
from leoflow.cli.main import main
from tests.api.conftest import ADMIN, ADMIN_TOKEN, READ, api_settings
from tests.api.live import client_for, serve
from tests.day2.pool_usage import seed_pool_usage


@pytest.fixture
def client(database_url: str) -> Iterator[httpx.Client]:
    with client_for(create_app(api_settings(database_url, LEOFLOW_PARALLELISM="7"))) as api:
        yield api


def pools(client: httpx.Client) -> dict[str, dict[str, Any]]:
    answer = client.get("/api/v2/pools", headers=READ)
    assert answer.status_code == 200, answer.text
    return {p["name"]: p for p in answer.json()["items"]}


def test_create_resize_list_and_delete_a_pool(client: httpx.Client, database_url: str) -> None:
    assert list(pools(client)) == ["default"]
    assert pools(client)["default"]["slots"] == 7 and pools(client)["default"]["builtin"]

    created = client.post("/api/v2/pools", json={"name": "gpu", "slots": 2, "description": "A100 nodes"},
                          headers=ADMIN)
    assert created.status_code == 201, created.text
    assert created.json() | {"created_at": None, "updated_at": None} == {
        "name": "gpu", "slots": 2, "description": "A100 nodes", "builtin": False, "missing": False,
        "occupied_slots": 0, "queued_slots": 0, "running_slots": 0, "open_slots": 2, "waiting_tasks": 0,
        "created_at": None, "updated_at": None}
    again = client.post("/api/v2/pools", json={"name": "gpu", "slots": 5}, headers=ADMIN)
    assert again.status_code == 409 and "already exists" in again.json()["error"]["message"]

    # Usage: two gpu tasks running, one waiting, one ready task in a pool nobody created.
    seed_pool_usage(client, database_url)
    listed = pools(client)
    assert list(listed) == ["default", "gpu", "later"]
    gpu = listed["gpu"]
    assert (gpu["occupied_slots"], gpu["running_slots"], gpu["queued_slots"], gpu["open_slots"],
            gpu["waiting_tasks"]) == (2, 1, 1, 0, 1)
    assert listed["later"]["missing"] and listed["later"]["slots"] == 0 and listed["later"]["waiting_tasks"] == 1
    assert listed["default"]["running_slots"] == 1

    resized = client.patch("/api/v2/pools/gpu", json={"slots": 1}, headers=ADMIN)
    assert resized.status_code == 200, resized.text
    pool = resized.json()
    assert (pool["slots"], pool["open_slots"], pool["description"]) == (1, 0, "A100 nodes")
    cleared = client.patch("/api/v2/pools/gpu", json={"description": None}, headers=ADMIN)
    assert cleared.json()["description"] is None and cleared.json()["slots"] == 1
    assert client.get("/api/v2/pools/gpu", headers=READ).json()["slots"] == 1

    assert client.delete("/api/v2/pools/gpu", headers=ADMIN).status_code == 204
    assert client.delete("/api/v2/pools/gpu", headers=ADMIN).status_code == 404
    gone = client.get("/api/v2/pools/gpu", headers=READ).json()  # its waiting task still names it
    assert (gone["missing"], gone["slots"], gone["waiting_tasks"]) == (True, 0, 1)
    assert client.get("/api/v2/pools/nothing-names-it", headers=READ).status_code == 404

    with psycopg.connect(database_url) as conn:
        audited = conn.execute("SELECT method, status FROM audit_events WHERE path LIKE '/api/v2/pools%%' "
                               "ORDER BY id").fetchall()
    assert audited == [("POST", 201), ("POST", 409), ("PATCH", 200), ("PATCH", 200), ("DELETE", 204),
                       ("DELETE", 404)]


def test_the_default_pool_is_built_in(client: httpx.Client) -> None:
    for answer in (client.patch("/api/v2/pools/default", json={"slots": 3}, headers=ADMIN),
                   client.delete("/api/v2/pools/default", headers=ADMIN)):
        assert answer.status_code == 409 and "LEOFLOW_PARALLELISM" in answer.json()["error"]["message"]
    answer = client.post("/api/v2/pools", json={"name": "default", "slots": 3}, headers=ADMIN)
    assert answer.status_code == 422 and answer.json()["error"]["details"]["field"] == "name"
    assert client.post("/api/v2/pools", json={"name": "gpu", "slots": 1}, headers=READ).status_code == 403


POISON = [
    ({"slots": 1}, "name"), ({"name": "gpu"}, "slots"), ({"name": "GPU", "slots": 1}, "name"),
    ({"name": "x" * 51, "slots": 1}, "name"), ({"name": 5, "slots": 1}, "name"), ({"name": "", "slots": 1}, "name"),
    ({"name": "gpu", "slots": -1}, "slots"), ({"name": "gpu", "slots": 100_001}, "slots"),
    ({"name": "gpu", "slots": 10**40}, "slots"), ({"name": "gpu", "slots": 1.5}, "slots"),
    ({"name": "gpu", "slots": True}, "slots"), ({"name": "gpu", "slots": "2"}, "slots"),
    ({"name": "gpu", "slots": 1, "description": "x" * 501}, "description"),
    ({"name": "gpu", "slots": 1, "description": 3}, "description"),
    ({"name": "gpu", "slots": 1, "colour": "red"}, "colour"),
]


@pytest.mark.parametrize(("body", "field"), POISON, ids=[f"{b}"[:50] for b, _ in POISON])
def test_bad_pool_bodies_are_422_naming_the_field(client: httpx.Client, body: dict[str, Any], field: str) -> None:
    answer = client.post("/api/v2/pools", json=body, headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field
    assert list(pools(client)) == ["default"]


def test_bad_resize_bodies_and_paths(client: httpx.Client) -> None:
    assert client.post("/api/v2/pools", json={"name": "gpu", "slots": 1}, headers=ADMIN).status_code == 201
    for body, field in (({}, "slots"), ({"slots": -5}, "slots"), ({"name": "cpu"}, "name"), ([1], "body")):
        answer = client.patch("/api/v2/pools/gpu", json=body, headers=ADMIN)
        assert answer.status_code == 422 and answer.json()["error"]["details"]["field"] == field, answer.text
    assert client.patch("/api/v2/pools/nope", json={"slots": 1}, headers=ADMIN).status_code == 404
    assert client.get("/api/v2/pools/Not%20A%20Pool", headers=READ).status_code == 404
    assert client.get("/api/v2/pools/gpu", headers=READ).json()["slots"] == 1


def test_cli_pool_verbs(database_url: str, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        assert main(["pools", "create", "gpu", "--slots", "2", "--description", "A100 nodes"]) == 0
        assert "created gpu: 0/2 slots in use" in capsys.readouterr().out
        assert main(["pools", "resize", "gpu", "--slots", "4"]) == 0
        assert "resized gpu: 0/4 slots in use" in capsys.readouterr().out
        assert main(["pools", "list"]) == 0
        out = capsys.readouterr().out
        assert "default" in out and "built in" in out and "A100 nodes" in out
        assert main(["pools", "show", "gpu", "-o", "json"]) == 0
        assert '"slots": 4' in capsys.readouterr().out
        assert main(["pools", "create", "bad", "--slots", "-1"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "slots" in err and "Traceback" not in err
        assert main(["pools", "delete", "default"]) == 1
        assert "LEOFLOW_PARALLELISM" in capsys.readouterr().err
        assert main(["pools", "delete", "gpu"]) == 0
        assert main(["pools", "show", "gpu"]) == 1
