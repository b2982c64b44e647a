"""``GET /api/v2/dags`` at scale: filters (paused, id prefix, last run state), keyset pages that
neither skip nor repeat while DAGs are added, strict parameters, and plans served by indexes at
100,000 DAGs.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import text

from leoflow.api.app import create_app
from leoflow.cli.main import main
from leoflow.db.stores import dags as dag_store
from tests.api.conftest import ADMIN, READ, READ_TOKEN, api_settings, spec
from tests.api.live import serve


def seed_dags(database_url: str, ids: list[str], *, paused: tuple[str, ...] = ()) -> None:
    """DAG rows as ``apply_dag`` writes them, set-based (one version each)."""
    with psycopg.connect(database_url, autocommit=True) as db, db.transaction():
        db.execute("INSERT INTO dags (dag_id, paused) SELECT d, d = ANY(%s) FROM unnest(%s::text[]) AS d",
                   (list(paused), ids))
        db.execute("INSERT INTO dag_versions (dag_id, version, spec, spec_hash) "
                   "SELECT d, 1, '{}'::jsonb, 'h' FROM unnest(%s::text[]) AS d", (ids,))
        db.execute("UPDATE dags d SET current_version_id = v.id FROM dag_versions v WHERE v.dag_id = d.dag_id")


def seed_run(database_url: str, dag_id: str, run_id: str, state: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as db:
        db.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state) "
                   "SELECT %s, %s, current_version_id, 'manual', %s FROM dags WHERE dag_id = %s",
                   (dag_id, run_id, state, dag_id))


def listed(client: httpx.Client, **params: Any) -> list[str]:
    """Every DAG id the list gives for ``params``, following cursors; the answers' pages must be in order."""
    ids: list[str] = []
    cursor = None
    for _ in range(1_000):
        body = client.get("/api/v2/dags", params={**params, **({"cursor": cursor} if cursor else {})},
                          headers=READ)
        assert body.status_code == 200, body.text
        ids += [d["dag_id"] for d in body.json()["items"]]
        cursor = body.json()["next_cursor"]
        if cursor is None:
            assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
            return ids
    raise AssertionError("the cursor never ended")


@pytest.fixture
def fleet(api_client: httpx.Client, database_url: str) -> httpx.Client:
    """Ten DAGs: two paused, runs in every state, two that never ran, ids that share prefixes."""
    seed_dags(database_url, ["etl-a", "etl-b", "etl-c", "etlx", "ml-1", "ml-2", "ml-3", "web", "web-2", "zz"],
              paused=("etl-b", "ml-3"))
    for dag_id, runs in {"etl-a": ["failed", "success"], "etl-b": ["success", "failed"], "etl-c": ["running"],
                         "etlx": ["queued"], "ml-1": ["cancelled"], "ml-2": ["success"], "web": ["failed"],
                         "web-2": ["success", "success", "queued"]}.items():
        for n, state in enumerate(runs):
            seed_run(database_url, dag_id, f"r{n}", state)
    return api_client


def test_each_filter(fleet: httpx.Client) -> None:
    assert listed(fleet, paused="true") == ["etl-b", "ml-3"]
    assert listed(fleet, paused="false") == ["etl-a", "etl-c", "etlx", "ml-1", "ml-2", "web", "web-2", "zz"]
    assert listed(fleet, prefix="etl") == ["etl-a", "etl-b", "etl-c", "etlx"]
    assert listed(fleet, prefix="etl-") == ["etl-a", "etl-b", "etl-c"]
    assert listed(fleet, prefix="web-2") == ["web-2"]
    assert listed(fleet, prefix="nothing") == []
    # The last run is the one created last, whatever came before it.
    assert listed(fleet, state="success") == ["etl-a", "ml-2"]
    assert listed(fleet, state="failed") == ["etl-b", "web"]
    assert listed(fleet, state="running") == ["etl-c"]
    assert listed(fleet, state="queued") == ["etlx", "web-2"]
    assert listed(fleet, state="cancelled") == ["ml-1"]
    assert listed(fleet, state="none") == ["ml-3", "zz"]
    assert listed(fleet, state="failed", paused="false", prefix="w") == ["web"]
    assert listed(fleet, state="success", paused="true") == []
    # The older spelling still works and must agree with paused when both are given.
    assert listed(fleet, state="paused") == listed(fleet, paused="true", state="paused")
    assert listed(fleet, state="active") == listed(fleet, paused="false")
    assert len(listed(fleet)) == 10


def test_items_carry_the_last_run(fleet: httpx.Client) -> None:
    items = {d["dag_id"]: d for d in fleet.get("/api/v2/dags", headers=READ).json()["items"]}
    assert (items["web-2"]["last_run_id"], items["web-2"]["last_run_state"]) == ("r2", "queued")
    assert (items["zz"]["last_run_id"], items["zz"]["last_run_state"]) == (None, None)
    assert items["etl-b"]["paused"] is True and items["etl-b"]["version"] == 1


def test_prefix_wildcards_are_data(api_client: httpx.Client, database_url: str) -> None:
    seed_dags(database_url, ["ab", "abc", "abc-d", "xbc"])
    for literal in ("a_c", "_", "%", "a%", "%b", "\\", "a\\"):
        assert listed(api_client, prefix=literal) == [], literal
    assert listed(api_client, prefix="ab") == ["ab", "abc", "abc-d"]


def test_prefix_ranges_and_patterns() -> None:
    assert [dag_store.prefix_end(p) for p in ("a", "az", "a-", "a9", "dag-05", "zz")] == [
        "b", "b", "a0", "aa", "dag-06", None]
    assert dag_store.like_prefix("a_b%c\\") == "a\\_b\\%c\\\\%"


def test_prefix_without_a_bytewise_order_walks_within_the_budget(
        fleet: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ids sharing a prefix are no range (glibc's en_US), the LIKE decides alone: same answers."""
    expected = {p: listed(fleet, prefix=p) for p in ("etl", "etl-", "w", "zz", "ml-3")}
    monkeypatch.setattr(dag_store, "_ORDERS_IDS_BYTEWISE", text("SELECT false"))
    monkeypatch.setattr(dag_store, "LIST_SCAN_BUDGET", 2)
    assert {p: listed(fleet, prefix=p, limit=1) for p in expected} == expected
    assert expected["etl"] == ["etl-a", "etl-b", "etl-c", "etlx"] and expected["zz"] == ["zz"]


def test_a_deleted_dag_is_not_listed(api_client: httpx.Client) -> None:
    for name in ("keep", "gone"):
        assert api_client.post("/api/v2/dags", json=spec(name), headers=ADMIN).status_code == 201
    assert api_client.delete("/api/v2/dags/gone", headers=ADMIN).status_code == 204
    assert listed(api_client) == ["keep"]
    assert listed(api_client, state="none") == ["keep"]


@pytest.mark.parametrize(("params", "field"), [
    ({"paused": "yes"}, "paused"),
    ({"paused": "True"}, "paused"),
    ({"paused": "1"}, "paused"),
    ({"state": "succeeded"}, "state"),
    ({"state": "NONE"}, "state"),
    ({"state": "paused", "paused": "false"}, "state"),
    ({"prefix": "a" * 51}, "prefix"),
    ({"prefix": "etl\x00"}, "prefix"),
    ({"prefix": "etl\n"}, "prefix"),
    ({"limit": "0"}, "limit"),
    ({"cursor": "not-a-cursor"}, "cursor"),
])
def test_bad_values_name_the_parameter(api_client: httpx.Client, params: dict[str, str], field: str) -> None:
    answer = api_client.get("/api/v2/dags", params=params, headers=READ)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["details"]["field"] == field


def test_a_sparse_filter_answers_short_pages_and_finds_everything(
        fleet: httpx.Client, database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the scan budget at 3, a filter that keeps few DAGs answers pages of fewer than
    ``limit`` items (some empty) with a cursor, and following it finds each match once."""
    monkeypatch.setattr(dag_store, "LIST_SCAN_BUDGET", 3)
    first = fleet.get("/api/v2/dags", params={"state": "none", "limit": 2}, headers=READ).json()
    assert first["items"] == [] and first["next_cursor"] is not None
    assert listed(fleet, state="none", limit=2) == ["ml-3", "zz"]
    assert listed(fleet, paused="true", limit=1) == ["etl-b", "ml-3"]
    assert listed(fleet, prefix="w", limit=1) == ["web", "web-2"]
    assert len(listed(fleet, limit=3)) == 10  # unfiltered pages are never short


def test_pages_neither_skip_nor_repeat_while_dags_are_added(api_client: httpx.Client, database_url: str) -> None:
    """Keyset pages: DAGs added between (and during) page reads never shift the ones already there."""
    before = [f"d-{i:04d}" for i in range(0, 600, 2)]
    seed_dags(database_url, before)
    stop = threading.Event()
    added: list[str] = []

    def add() -> None:
        odd = iter(range(1, 600, 2))
        with psycopg.connect(database_url, autocommit=True) as db:
            while not stop.is_set():
                dag_id = f"d-{next(odd, 9999):04d}"
                if dag_id == "d-9999":
                    return
                db.execute("INSERT INTO dags (dag_id) VALUES (%s) ON CONFLICT DO NOTHING", (dag_id,))
                added.append(dag_id)

    thread = threading.Thread(target=add)
    thread.start()
    try:
        seen = listed(api_client, limit=7)
    finally:
        stop.set()
        thread.join()
    assert added, "no DAG was added while the pages were read"
    assert set(before) <= set(seen)
    assert set(seen) <= set(before) | set(added)


def test_cli_dags_list_filters_and_pages(database_url: str, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``leoflow dags list`` passes its filters and follows short pages to the end (or ``--limit``)."""
    seed_dags(database_url, [f"job-{i:02d}" for i in range(12)] + ["other"], paused=("job-03", "job-09"))
    seed_run(database_url, "job-05", "r1", "failed")
    monkeypatch.setattr(dag_store, "LIST_SCAN_BUDGET", 2)
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", READ_TOKEN)

        def ids(*argv: str) -> list[str]:
            assert main(["dags", "list", "-o", "json", *argv]) == 0
            return [d["dag_id"] for d in json.loads(capsys.readouterr().out)]

        assert ids("--paused") == ["job-03", "job-09"]
        assert len(ids("--active")) == 11
        assert ids("--prefix", "job-1") == ["job-10", "job-11"]
        assert ids("--state", "failed") == ["job-05"]
        assert ids("--active", "--prefix", "job-0", "--limit", "3") == ["job-00", "job-01", "job-02"]
        assert main(["dags", "list"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split()[4:6] == ["LAST", "RUN"] and len(lines) == 14
        assert next(line for line in lines if line.startswith("job-05")).split()[4] == "failed"
        assert main(["dags", "list", "--state", "finished"]) != 0
        assert "state" in capsys.readouterr().err


# --------------------------------------------------------------------------- plans at 100,000 DAGs

FILTERS: dict[str, dag_store.DagListFilter] = {
    "first page": dag_store.DagListFilter(),
    "paused": dag_store.DagListFilter(paused=True),
    "prefix": dag_store.DagListFilter(prefix="dag-0999"),
    "failed": dag_store.DagListFilter(last_run_state="failed"),
    "never ran": dag_store.DagListFilter(last_run_state="none"),
    "all three": dag_store.DagListFilter(paused=False, prefix="dag-05", last_run_state="success"),
}


@pytest.fixture(scope="module")
def hundred_thousand(pg_server: Any) -> Iterator[str]:
    url = pg_server.create_database()
    try:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("INSERT INTO dags (dag_id, paused) SELECT 'dag-' || lpad(i::text, 6, '0'), i % 100 = 0 "
                       "FROM generate_series(0, 99999) AS i")
            db.execute("INSERT INTO dag_versions (dag_id, version, spec, spec_hash) "
                       "SELECT dag_id, 1, '{}', 'h' FROM dags")
            db.execute("UPDATE dags d SET current_version_id = v.id FROM dag_versions v WHERE v.dag_id = d.dag_id")
            db.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state) "
                       "SELECT d.dag_id, 'r' || i, d.current_version_id, 'manual', "
                       "CASE WHEN i % 7 = 0 THEN 'failed' ELSE 'success' END FROM generate_series(0, 149999) AS i "
                       "JOIN dags d ON d.dag_id = 'dag-' || lpad((i % 100000)::text, 6, '0')")
            db.execute("VACUUM ANALYZE dag_versions")
            db.execute("ANALYZE dags")
            db.execute("ANALYZE dag_runs")
        yield url
    finally:
        pg_server.drop_database(url)


def plan_of(url: str, where: dag_store.DagListFilter, after: str | None, *, window_end: bool = False
            ) -> dict[str, Any]:
    params: dict[str, Any] = {"after": after or "", "scan": dag_store.LIST_SCAN_BUDGET, "limit": 101,
                              "paused": where.paused, "prefix": where.prefix, "state": where.last_run_state,
                              "pattern": dag_store.like_prefix(where.prefix or "")}
    end = dag_store.prefix_end(where.prefix) if where.prefix else None
    params["end"] = end
    build = dag_store._window_end_sql if window_end else dag_store._list_sql
    sql = re.sub(r"(?<!:):([a-z]+)", r"%(\1)s", build(where, bounded=end is not None))
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
    assert row is not None
    plan: dict[str, Any] = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]["Plan"]
    return plan


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


@pytest.mark.parametrize("name", FILTERS)
@pytest.mark.parametrize("after", [None, "dag-050000"])
def test_every_list_query_is_served_by_an_index(hundred_thousand: str, name: str, after: str | None) -> None:
    found = list(nodes(plan_of(hundred_thousand, FILTERS[name], after)))
    scans = {(n["Node Type"], n.get("Relation Name"), n.get("Index Name")) for n in found
             if "Relation Name" in n}
    assert scans, found
    assert not [s for s in scans if s[0] == "Seq Scan"], scans
    assert ("Index Scan", "dags", "pk_dags") in scans, scans
    runs = [n for n in found if n.get("Relation Name") == "dag_runs"]
    assert [(n["Index Name"], n["Scan Direction"]) for n in runs] == [("ix_dag_runs_dag_id_id", "Backward")], runs
    # Where a short page's window ended: the primary key alone.
    window = [n for n in nodes(plan_of(hundred_thousand, FILTERS[name], after, window_end=True))
              if "Relation Name" in n]
    assert [(n["Node Type"], n["Index Name"]) for n in window] == [("Index Scan", "pk_dags")], window
