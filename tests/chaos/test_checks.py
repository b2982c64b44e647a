"""The soak's checker catches what it claims to: duplicate pods, stale pods, stale committed writes.

Without these, a soak that "passes" could be passing vacuously. The pod checks run on synthetic
request logs; the stale-write audit runs on a real private PostgreSQL with commit timestamps on.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.chaos import audit  # noqa: E402
from bench.chaos.checks import TermClock, Verdict, check_pods  # noqa: E402
from leoflow.db import migrations  # noqa: E402
from leoflow.db.connection.fencing import FENCED_TERM_SETTING  # noqa: E402
from leoflow.standalone.embedded import EmbeddedPostgres  # noqa: E402
from tests.harness.postgres import private_server  # noqa: E402

TRIES = {"p-1": {"state": "success", "exit_code": 0}, "p-2": {"state": "success", "exit_code": 0}}
# Term 1 committed at t=100, term 2 at t=200.
CLOCK = TermClock([(1, "a", 100.0), (2, "b", 200.0)])


def create(name: str, term: int | None, at: float, code: int = 201) -> dict[str, Any]:
    return {"verb": "create", "name": name, "code": code, "time": at, "cluster": "c",
            "term": None if term is None else str(term)}


def test_clean_log_passes() -> None:
    verdict = Verdict()
    check_pods(verdict, [create("p-1", 1, 150), create("p-1", 1, 151, 409), create("p-2", 2, 250)],
               CLOCK, "c", TRIES)
    assert verdict.ok, verdict.details
    assert verdict.details["one_pod_per_try"]["conflicts_409"] == 1


def test_second_201_for_a_try_is_a_duplicate() -> None:
    verdict = Verdict()
    check_pods(verdict, [create("p-1", 1, 150), create("p-1", 2, 250), create("p-2", 2, 260)], CLOCK, "c", TRIES)
    assert verdict.checks["one_pod_per_try"] is False
    assert verdict.details["one_pod_per_try"]["duplicates"] == ["p-1"]


def test_pod_from_an_older_term_after_a_newer_one_committed_is_stale() -> None:
    verdict = Verdict()
    check_pods(verdict, [create("p-1", 1, 150), create("p-2", 1, 200.5)], CLOCK, "c", TRIES)
    assert verdict.checks["no_pod_from_stale_term"] is False
    assert verdict.details["no_pod_from_stale_term"]["stale"][0]["pod"] == "p-2"


def test_unlabelled_pod_and_finished_try_without_pod_fail() -> None:
    verdict = Verdict()
    check_pods(verdict, [create("p-1", None, 150)], CLOCK, "c", TRIES)
    assert verdict.checks["no_pod_from_stale_term"] is False
    assert verdict.checks["pods_match_tries"] is False
    assert verdict.details["pods_match_tries"]["finished_tries_without_pod"] == ["p-2"]


@pytest.fixture(scope="module")
def audited_db() -> Iterator[str]:
    with private_server() as pg:
        enable_and_restart(pg)
        pg.create_database("audited")
        url = pg.url("audited")
        migrations.upgrade(url)
        with psycopg.connect(url, autocommit=True) as conn:
            audit.install(conn)
        yield url


def enable_and_restart(pg: EmbeddedPostgres) -> None:
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        audit.enable_commit_timestamps(conn)
    pg.stop("fast")
    pg.start()
    pg.wait_ready()


def new_term(conn: psycopg.Connection[Any], node: str) -> int:
    row = conn.execute("INSERT INTO leader_terms (cluster, node_id) VALUES ('c', %s) RETURNING term",
                       (node,)).fetchone()
    assert row is not None
    return int(row[0])


def first_term_and_run(conn: psycopg.Connection[Any], dag_id: str) -> tuple[int, int]:
    """An empty audit, a first term, and a run of a new DAG ``dag_id`` written under it."""
    conn.execute("DELETE FROM chaos_audit")
    term = new_term(conn, "a")
    conn.execute("INSERT INTO dags (dag_id) VALUES (%s)", (dag_id,))
    version = conn.execute("INSERT INTO dag_versions (dag_id, version, spec, spec_hash)"
                           " VALUES (%s, 1, '{}', 'h') RETURNING id", (dag_id,)).fetchone()
    assert version is not None
    run = conn.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, term)"
                       " VALUES (%s, 'r', %s, 'manual', %s) RETURNING id", (dag_id, version[0], term)).fetchone()
    assert run is not None
    return term, int(run[0])


def test_audit_flags_a_write_committed_by_an_older_term(audited_db: str) -> None:
    with psycopg.connect(audited_db, autocommit=True) as conn:
        t1, run = first_term_and_run(conn, "d")
        assert audit.stale_writes(conn) == []  # term 1 wrote while it was the newest

        t2 = new_term(conn, "b")
        conn.execute("UPDATE dag_runs SET state = 'running', term = %s WHERE id = %s", (t2, run))
        assert audit.stale_writes(conn) == []
        conn.execute("UPDATE dag_runs SET state = 'failed', term = %s WHERE id = %s", (t1, run))
        stale = audit.stale_writes(conn)
        assert [(s["table"], s["acting_term"], s["newest_term_then"]) for s in stale] == [("dag_runs", t1, t2)]
        assert [t for t, _node, _at in audit.term_commits(conn)] == [t1, t2]


def fenced_as(conn: psycopg.Connection[Any], term: int, sql: str, params: tuple[Any, ...]) -> None:
    """``sql`` in a transaction marked with ``term`` as the real fence marks it (leoflow.db.connection.fencing)."""
    with conn.transaction():
        conn.execute(f"SELECT set_config('{FENCED_TERM_SETTING}', %s, true)", (str(term),))
        conn.execute(sql, params)


def test_audit_judges_a_write_by_its_fence_not_by_the_row_it_writes(audited_db: str) -> None:
    """ADR 0013 step 2: a later term writes the row of a try an older term queued, keeping the
    row's (older) term. Judged by the row, that is stale; judged by the fence, it is not — and a
    write fenced under an older term is stale whatever term its row carries."""
    with psycopg.connect(audited_db, autocommit=True) as conn:
        t1, run = first_term_and_run(conn, "d2")
        tis = [conn.execute("INSERT INTO task_instances (run_pk, task_id, state, try_number, term)"
                            " VALUES (%s, %s, 'queued', 1, %s) RETURNING id", (run, task, t1)).fetchone()
               for task in ("a", "b", "c", "d")]
        assert all(tis)
        ti_a, ti_b, ti_c, ti_d = (int(t[0]) for t in tis if t is not None)
        t2 = new_term(conn, "b")
        insert_try = "INSERT INTO task_tries (task_instance_id, try_number, state, term) VALUES (%s, 1, %s, %s)"
        fenced_as(conn, t2, insert_try, (ti_a, "queued", t1))  # term 2's executor claims term 1's try
        conn.execute(insert_try, (ti_b, "cancelled", t1))  # a user's cancel through the API, unfenced
        assert audit.stale_writes(conn) == []
        assert audit.later_writers(conn) == 1
        fenced_as(conn, t1, insert_try, (ti_c, "queued", t1))  # term 1, fenced, after term 2: stale
        conn.execute(insert_try, (ti_d, "queued", t1))  # unfenced, judged by its row: stale
        stale = audit.stale_writes(conn)
        assert [(s["table"], s["acting_term"], s["row_term"], s["newest_term_then"]) for s in stale] == [
            ("task_tries", t1, t1, t2), ("task_tries", t1, t1, t2)]
        assert {t for t, _at in audit.term_acts(conn)} == {t1, t2}
