"""Upgrading a database with history: old endings are never announced, the metrics start from them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import psycopg

from leoflow.db import migrations
from leoflow.model.dag_metrics import DURATION_BUCKETS, bin_index

ROOT = Path(__file__).resolve().parents[2]


def test_the_migrations_bucket_copy_is_the_codes() -> None:
    path = ROOT / "alembic/versions/0004_day2_operations.py"
    spec = importlib.util.spec_from_file_location("m0004", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.DURATION_BUCKETS == DURATION_BUCKETS


def test_history_is_marked_observed_and_seeds_the_metrics(empty_database_url: str) -> None:
    url = empty_database_url
    migrations.upgrade(url, "0001")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO dags (dag_id) VALUES ('etl')")
        vid = conn.execute("INSERT INTO dag_versions (dag_id, version, spec, spec_hash) "
                           "VALUES ('etl', 1, '{}', 'h') RETURNING id").fetchone()[0]  # type: ignore[index]
        for run_id, state, seconds in (("a", "success", 3), ("b", "success", 100), ("c", "failed", 7200),
                                       ("live", "running", None)):
            ended = "NULL" if seconds is None else "now()"
            started = "now()" if seconds is None else f"now() - interval '{seconds} seconds'"
            run_pk = conn.execute(
                f"INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, started_at, ended_at) "
                f"VALUES ('etl', %s, %s, 'manual', %s, {started}, {ended}) RETURNING id",
                (run_id, vid, state)).fetchone()[0]  # type: ignore[index]
            ti = conn.execute("INSERT INTO task_instances (run_pk, task_id, state) VALUES (%s, 't', %s) RETURNING id",
                              (run_pk, "running" if seconds is None else "failed")).fetchone()[0]  # type: ignore[index]
            try_state = "running" if seconds is None else "failed"
            conn.execute("INSERT INTO task_tries (task_instance_id, try_number, state, term) VALUES (%s, 1, %s, 1)",
                         (ti, try_state))
    migrations.upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        unobserved = conn.execute("SELECT run_id FROM dag_runs WHERE observed_at IS NULL").fetchall()
        assert unobserved == [("live",)]  # the run still going will be announced when it ends
        live_tries = conn.execute("SELECT count(*) FROM task_tries WHERE observed_at IS NULL").fetchone()
        assert live_tries == (1,)
        stats = {r[0]: r[1:] for r in conn.execute(
            "SELECT state, runs, round(duration_sum), bins, last_ended_at IS NOT NULL FROM dag_run_stats")}
        ok_bins = [0] * (len(DURATION_BUCKETS) + 1)
        ok_bins[bin_index(3)] += 1
        ok_bins[bin_index(100)] += 1
        assert (bin_index(3), bin_index(100), bin_index(7200)) == (1, 5, 10)  # (1, 5], (60, 120], (3600, 7200]
        assert stats["success"][:2] == (2, 103)
        assert stats["success"][2] == ok_bins
        assert stats["failed"][:2] == (1, 7200) and stats["failed"][2][bin_index(7200)] == 1
        assert conn.execute("SELECT dag_id, task_id, failures FROM task_failure_counts").fetchall() == [
            ("etl", "t", 3)]
