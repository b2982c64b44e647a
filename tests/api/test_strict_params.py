"""Small hostile inputs in paths, query strings and YAML bodies: a 4xx naming the parameter, never a 500.

Issue 44, item 13: each of these answered 500 (``isdigit()`` accepting ``'²'``, a cursor that made
``json.loads`` recurse or carried a lone surrogate to PostgreSQL, a backfill in year 1 overflowing
``datetime``, a YAML ``1: x`` key meeting ``sorted()``). :mod:`leoflow.api.url_params` parses every path
and query parameter; YAML bodies must have string keys as JSON does.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest

from leoflow.api.app import create_app
from tests.api.conftest import ADMIN, api_settings
from tests.api.live import client_for
from tests.harness.postgres import PostgresServer

YAML = {**ADMIN, "Content-Type": "application/yaml"}
DAG = "hourly"
DAG_PATH = f"/api/v2/dags/{DAG}"


def cursor_of(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.fixture(scope="module")
def api(pg_server: PostgresServer) -> Iterator[tuple[httpx.Client, str]]:
    """A live app with a scheduled DAG and one run of it (``r1``)."""
    url = pg_server.create_database()
    try:
        with client_for(create_app(api_settings(url))) as client:
            spec = {"dag_id": DAG, "schedule": "@hourly", "start_date": "2026-01-01T00:00:00Z", "paused": True,
                    "tasks": [{"id": "a", "image": "busybox", "command": ["true"]}]}
            assert client.post("/api/v2/dags", json=spec, headers=ADMIN).status_code == 201
            assert client.post(f"{DAG_PATH}/runs", json={"run_id": "r1"}, headers=ADMIN).status_code == 201
            yield client, url
    finally:
        pg_server.drop_database(url)


def assert_names(answer: httpx.Response, status: int, field: str) -> None:
    assert answer.status_code == status, answer.text[:500]
    error = answer.json()["error"]
    assert error["details"]["field"] == field, error
    assert len(error["message"]) < 2_000


CURSOR_LISTS = ["/api/v2/dags", f"{DAG_PATH}/runs", f"{DAG_PATH}/versions", f"{DAG_PATH}/backfills",
                f"{DAG_PATH}/runs/r1/tasks", "/api/v2/notifications", "/api/v2/audit", "/api/v2/cluster/events"]
BAD_CURSORS = {
    "2,000 nested [": cursor_of(b"[" * 2_000),
    "700 nested [ (within the length bound)": cursor_of(b"[" * 700),
    "a lone surrogate": cursor_of(b'["dags","\\ud800"]'),
    "a lone surrogate (tasks)": cursor_of(b'["tasks","\\udfff"]'),
    "an object": cursor_of(b'{"a": ["dags", "x"]}'),
    "not base64": "%C2%B2",
}


@pytest.mark.parametrize("path", CURSOR_LISTS)
@pytest.mark.parametrize("cursor", BAD_CURSORS.values(), ids=BAD_CURSORS.keys())
def test_a_hostile_cursor_is_a_400_naming_it(api: tuple[httpx.Client, str], path: str, cursor: str) -> None:
    client, _ = api
    assert_names(client.get(f"{path}?cursor={cursor}", headers=ADMIN), 400, "cursor")


def test_cursors_this_api_issues_still_page(api: tuple[httpx.Client, str]) -> None:
    client, _ = api
    assert client.post("/api/v2/dags", json={"dag_id": "other", "tasks": [{"id": "a", "kind": "empty"}]},
                       headers=ADMIN).status_code == 201
    first = client.get("/api/v2/dags?limit=1", headers=ADMIN).json()
    second = client.get(f"/api/v2/dags?limit=1&cursor={first['next_cursor']}", headers=ADMIN)
    assert second.status_code == 200, second.text
    assert [d["dag_id"] for d in first["items"] + second.json()["items"]] == sorted([DAG, "other"])


@pytest.mark.parametrize(("method", "path", "field"), [
    ("GET", f"{DAG_PATH}/versions/%C2%B2", "version"),
    ("GET", f"{DAG_PATH}/versions/%D9%A3", "version"),
    ("GET", f"{DAG_PATH}/versions/99999999999", "version"),
    ("GET", f"{DAG_PATH}/backfills/%C2%B2", "backfill_id"),
    ("POST", f"{DAG_PATH}/backfills/%C2%B2/cancel", "backfill_id"),
    ("POST", "/api/v2/notifications/%C2%B2/retry", "notification_id"),
    ("POST", "/api/v2/notifications/%D9%A3/retry", "notification_id"),
])
def test_a_unicode_digit_in_a_path_id_is_not_found_naming_it(api: tuple[httpx.Client, str], method: str, path: str,
                                                             field: str) -> None:
    client, _ = api
    assert_names(client.request(method, path, headers=ADMIN), 404, field)


@pytest.mark.parametrize(("query", "field"), [
    ("limit=%C2%B2", "limit"), ("limit=%D9%A3", "limit"), ("limit=+5", "limit"), ("limit=1_0", "limit"),
])
def test_a_query_integer_is_ascii_digits(api: tuple[httpx.Client, str], query: str, field: str) -> None:
    client, _ = api
    assert_names(client.get(f"/api/v2/dags?{query}", headers=ADMIN), 400, field)


@pytest.mark.parametrize(("query", "field"), [
    ("try=%C2%B2", "try"), ("try=%D9%A3", "try"), ("since=b%C2%B2", "since"), ("since=b%D9%A3", "since"),
    ("since=t%D9%A3%D9%A3%D9%A3%D9%A3-01-01T00:00:00Z", "since"),
])
def test_log_parameters_are_ascii(api: tuple[httpx.Client, str], query: str, field: str) -> None:
    client, _ = api
    assert_names(client.get(f"{DAG_PATH}/runs/r1/tasks/a/logs?{query}", headers=ADMIN), 400, field)


@pytest.mark.parametrize("wait", ["%D9%A3", "1e1", "nan", "+1"])
def test_wait_is_a_plain_ascii_number(api: tuple[httpx.Client, str], wait: str) -> None:
    client, _ = api
    assert_names(client.get(f"{DAG_PATH}/runs/r1?wait={wait}", headers=ADMIN), 400, "wait")


@pytest.mark.parametrize("actor", ["%00", "a%0Ab", "x" * 101])
def test_the_audit_actor_is_printable_and_bounded(api: tuple[httpx.Client, str], actor: str) -> None:
    client, _ = api
    assert_names(client.get(f"/api/v2/audit?actor={actor}", headers=ADMIN), 400, "actor")


@pytest.mark.parametrize(("start", "end", "status", "field"), [
    ("0001-01-01", "2026-01-02", 422, "start"),
    ("0001-01-01T00:00:00+14:00", "2026-01-02", 422, "start"),
    ("2026-01-01", "9999-12-31T23:59:59-12:00", 422, "end"),
    ("1969-12-31T23:59:59Z", "1970-01-01T03:00:00Z", 422, "start"),
    # The first moment the range allows: its slots are backfilled.
    ("1970-01-01T00:00:00Z", "1970-01-01T03:00:00Z", 201, ""),
])
def test_a_backfill_is_dated_within_the_range_cron_arithmetic_handles(
        api: tuple[httpx.Client, str], start: str, end: str, status: int, field: str) -> None:
    client, _ = api
    answer = client.post(f"{DAG_PATH}/backfill", json={"start": start, "end": end}, headers=ADMIN)
    if status == 201:
        assert answer.status_code == 201, answer.text
        assert answer.json()["slots_total"] == 3
        assert client.post(f"{DAG_PATH}/backfills/{answer.json()['id']}/cancel", headers=ADMIN).status_code == 200
    else:
        assert_names(answer, status, field)


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("PATCH", DAG_PATH, "paused: true\n1: x\n", "1"),
    ("PATCH", DAG_PATH, "true: x\npaused: true\n", "true"),
    ("PATCH", DAG_PATH, "~: x\npaused: true\n", "null"),
    ("POST", f"{DAG_PATH}/runs", "conf: {a: 1, 1: x}\n", "conf.1"),
    ("POST", f"{DAG_PATH}/runs/r1/clear", "tasks: [a]\n1: x\n", "1"),
    ("POST", f"{DAG_PATH}/runs/r1/mark", "state: failed\n2026-01-01: x\n", "2026-01-01"),
    ("POST", f"{DAG_PATH}/runs/r1/tasks/a/mark", "state: failed\n1.5: x\n", "1.5"),
    ("POST", "/api/v2/dags:sync", "source: s\n1: x\nfiles: []\n", "1"),
    ("POST", "/api/v2/pools", "name: p\nslots: 1\n1: x\n", "1"),
    ("POST", "/api/v2/dags", "dag_id: d\ntasks: [{id: a, kind: empty, 1: x}]\n", "tasks[0].1"),
])
def test_a_yaml_body_with_a_key_that_is_no_string_is_422_naming_its_path(
        api: tuple[httpx.Client, str], method: str, path: str, body: str, field: str) -> None:
    client, _ = api
    assert_names(client.request(method, path, content=body.encode(), headers=YAML), 422, field)


def test_a_synced_file_with_a_key_that_is_no_string_names_the_file_and_path(api: tuple[httpx.Client, str]) -> None:
    client, _ = api
    content = "dag_id: synced\ntasks:\n  - id: a\n    kind: empty\n1: x\n"
    answer = client.post("/api/v2/dags:sync", json={"source": "s", "files": [{"name": "a.yaml", "content": content}]},
                         headers=ADMIN)
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["error"]["details"]["errors"]
    assert (problem["file"], problem["path"], problem["line"]) == ("a.yaml", "1", 5), problem
