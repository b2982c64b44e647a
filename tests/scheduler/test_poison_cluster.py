"""Issue 16's poison corpus against a 2-replica cluster of real ``leoflow serve`` processes.

Each poison is thrown at the cluster next to a healthy DAG — through the API where the API
accepts it, and straight into the database where only an older release or a hand edit could
have put it. The healthy DAG's runs must succeed, the leader's term must not change (no replica
dies or steps down on one entity's data), and every poison must end either refused with a 422
(or a 400/413 for a body the parser bounds) naming the field or as a failed entity carrying its
reason (read back through the API and the CLI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.election.cluster import Cluster, ReplicaProcess, wait_for

HEALTHY = {"dag_id": "healthy", "tasks": [{"id": "a", "image": "busybox", "command": ["true"]},
                                          {"id": "b", "image": "busybox", "command": ["true"], "depends_on": ["a"]}]}


#: How the API refuses bad input: 422 for a field's value, 400/413 for a body it will not decode.
REFUSED = (400, 413, 422)


def task(task_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], **extra}


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(database_url, tmp_path, name="poison", probe=False)
    try:
        yield c
    finally:
        c.stop_all()


class Poisoner:
    def __init__(self, cluster: Cluster, api: httpx.Client) -> None:
        self.cluster = cluster
        self.api = api

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.cluster.database_url, autocommit=True) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def cli(self, *argv: str) -> str:
        """The CLI as an operator runs it against the leader; its stdout."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
        done = subprocess.run([str(Path(sys.executable).parent / "leoflow"), *argv], capture_output=True, text=True,
                              env={**env, "LEOFLOW_URL": str(self.api.base_url)}, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        answer = self.api.get(f"/api/v2/dags/{dag_id}/runs/{run_id}")
        answer.raise_for_status()
        return dict(answer.json())

    def ended(self, dag_id: str, run_id: str, timeout: float = 30) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def done() -> bool:
            found.update(self.run(dag_id, run_id))
            return found["state"] in ("success", "failed", "cancelled")
        wait_for(done, timeout, f"run {dag_id}/{run_id} to end", interval=0.05)
        return found

    def healthy_run_succeeds(self) -> None:
        answer = self.api.post("/api/v2/dags/healthy/runs", json={})
        assert answer.status_code == 201, answer.text
        assert self.ended("healthy", answer.json()["run_id"])["state"] == "success"

    def apply(self, spec: dict[str, Any]) -> httpx.Response:
        return self.api.post("/api/v2/dags", json=spec)

    def insert_version(self, dag_id: str, spec: dict[str, Any] | str) -> int:
        """A version as an older release or a hand edit could have stored it: no validation."""
        body = spec if isinstance(spec, str) else json.dumps(spec)
        self.sql("INSERT INTO dags (dag_id) VALUES (%s) ON CONFLICT DO NOTHING", (dag_id,))
        [(vid,)] = self.sql("INSERT INTO dag_versions (dag_id, version, spec, spec_hash) SELECT %s, "
                            "coalesce(max(version), 0) + 1, %s::jsonb, 'hand' FROM dag_versions WHERE dag_id = %s "
                            "RETURNING id", (dag_id, body, dag_id))
        self.sql("UPDATE dags SET current_version_id = %s WHERE dag_id = %s", (vid, dag_id))
        return int(vid)


def refused_or_failed(p: Poisoner, spec: dict[str, Any], field: str, conf: dict[str, Any] | None = None) -> str:
    """Apply (and trigger) a poison through the API: a 4xx naming ``field``, or a run failed with a reason."""
    applied = p.apply(spec)
    if applied.status_code in REFUSED:
        assert field in applied.text, applied.text
        return str(applied.status_code)
    assert applied.status_code in (200, 201), applied.text
    triggered = p.api.post(f"/api/v2/dags/{spec['dag_id']}/runs", json={"conf": conf or {}})
    if triggered.status_code in REFUSED:
        assert field in triggered.text, triggered.text
        return str(triggered.status_code)
    assert triggered.status_code == 201, triggered.text
    run = p.ended(spec["dag_id"], triggered.json()["run_id"])
    assert run["state"] == "failed" and "scheduler error: " in (run["reason"] or ""), run
    return "failed"


def test_poison_corpus_on_a_two_replica_cluster(cluster: Cluster) -> None:
    first = cluster.start("a")
    node, term = cluster.wait_leader()
    cluster.start("b")
    leader: ReplicaProcess = cluster.replicas[node]
    with httpx.Client(base_url=leader.url, timeout=30) as api:
        p = Poisoner(cluster, api)
        assert p.apply(HEALTHY).status_code == 201
        p.healthy_run_succeeds()
        outcomes: dict[str, str] = {}

        # Through the API (the input engineer's validation may refuse them first: either is fine).
        outcomes["timeout 1e12 (api)"] = refused_or_failed(
            p, {"dag_id": "huge-timeout", "tasks": [task("a", timeout_seconds=1_000_000_000_000)]}, "timeout_seconds")
        deep: dict[str, Any] = {}
        inner = deep
        for _ in range(200):
            inner["a"] = {}
            inner = inner["a"]
        assert p.apply({"dag_id": "deep-conf", "tasks": [task("a")]}).status_code == 201
        triggered = api.post("/api/v2/dags/deep-conf/runs", json={"conf": deep})
        if triggered.status_code in REFUSED:  # the body parser's depth bound names the body, not conf
            assert "nested" in triggered.text or "conf" in triggered.text, triggered.text
            outcomes["deep conf (api)"] = str(triggered.status_code)
        else:
            assert triggered.status_code == 201, triggered.text
            outcomes["deep conf (api)"] = p.ended("deep-conf", triggered.json()["run_id"])["state"]
            assert outcomes["deep conf (api)"] in ("success", "failed"), triggered.text
        p.healthy_run_succeeds()

        # Straight into the database.
        p.insert_version("old-timeout", {"dag_id": "old-timeout", "tasks": [task("a", timeout_seconds=1e12)]})
        p.insert_version("old-spec", {"dag_id": "old-spec", "tasks": "not a list"})
        runs = {dag: api.post(f"/api/v2/dags/{dag}/runs", json={}).json()["run_id"]
                for dag in ("old-timeout", "old-spec")}
        runs["deep-conf"] = "too-deep"
        p.sql("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, conf) SELECT dag_id, 'too-deep', "
              "current_version_id, 'manual', %s::jsonb FROM dags WHERE dag_id = 'deep-conf'",
              ('{"a":' * 3000 + "1" + "}" * 3000,))
        query = "SELECT state, reason FROM dag_runs WHERE run_id = %s AND state IN ('success', 'failed')"
        for dag, run_id in runs.items():  # read from the database: no JSON parser takes a 3,000-deep conf back
            [(state, reason)] = wait_for(lambda r=run_id: p.sql(query, (r,)), 30, f"run of {dag} to end")
            assert state == "failed" and "scheduler error: " in reason, (dag, state, reason)
            outcomes[f"{dag} (db)"] = "failed"
        shown = p.cli("runs", "show", "old-timeout", runs["old-timeout"])
        assert "state:    failed" in shown, shown
        assert "state:    failed (scheduler error: ValidationFailed: tasks[0].timeout_seconds: " in shown, shown
        assert p.apply({"dag_id": "never", "schedule": "@hourly", "tasks": [task("a")]}).status_code == 201
        p.sql("UPDATE dags SET schedule = '0 0 31 2 *', next_run_at = now() - interval '1 hour' "
              "WHERE dag_id = 'never'")
        wait_for(lambda: p.sql("SELECT schedule_error FROM dags WHERE dag_id = 'never'")[0][0], 30,
                 "the never-firing schedule to be stopped")
        [(error,)] = p.sql("SELECT schedule_error FROM dags WHERE dag_id = 'never'")
        assert error.startswith("scheduler error: CroniterBadDateError"), error
        listed = p.cli("dags", "list")
        assert "never: schedule stopped: scheduler error: CroniterBadDateError" in listed, listed
        outcomes["cron that never fires (db)"] = "failed"
        p.healthy_run_succeeds()

        # A row the database refuses to move (its try counter would overflow) among healthy ones.
        assert p.apply({"dag_id": "overflow", "tasks": [task("a"), task("b")]}).status_code == 201
        [(vid,)] = p.sql("SELECT current_version_id FROM dags WHERE dag_id = 'overflow'")
        [(run_pk,)] = p.sql("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, started_at) "
                            "VALUES ('overflow', 'r1', %s, 'manual', 'running', now()) RETURNING id", (vid,))
        p.sql("INSERT INTO task_instances (run_pk, task_id, state, try_number, max_tries) VALUES "
              "(%s, 'a', 'pending', 2147483647, 1), (%s, 'b', 'pending', 0, 1)", (run_pk, run_pk))
        run = p.ended("overflow", "r1")
        tasks = {t["task_id"]: t for t in run["tasks"]}
        assert tasks["b"]["state"] == "success" and tasks["a"]["state"] == "failed", tasks
        assert tasks["a"]["reason"].startswith("scheduler error: ValueRejected"), tasks
        outcomes["try counter overflow (db)"] = "failed"

        # 300 DAG versions in one batch (cache of 256): every run must succeed.
        started = time.monotonic()
        p.sql("INSERT INTO dags (dag_id) SELECT 'v' || g FROM generate_series(1, 300) g")
        p.sql("""
            WITH v AS (INSERT INTO dag_versions (dag_id, version, spec, spec_hash)
                       SELECT dag_id, 1, jsonb_build_object('dag_id', dag_id, 'tasks', jsonb_build_array(
                           jsonb_build_object('id', 'a', 'image', 'busybox', 'command', jsonb_build_array('true')))),
                           'h' FROM dags WHERE dag_id LIKE 'v%%' RETURNING id, dag_id),
                 u AS (UPDATE dags SET current_version_id = v.id FROM v WHERE dags.dag_id = v.dag_id)
            INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type) SELECT dag_id, 'r', id, 'manual' FROM v
        """)
        wait_for(lambda: p.sql("SELECT count(*) FROM dag_runs WHERE run_id = 'r' AND dag_id LIKE 'v%%' "
                               "AND state = 'success'")[0][0] == 300, 45, "300 runs of 300 versions")
        outcomes["300 versions in one batch"] = f"all succeeded in {time.monotonic() - started:.1f}s"
        p.healthy_run_succeeds()

        print(f"poison outcomes: {outcomes}")
        assert cluster.db_leader() == (node, term)
        assert [t["term"] for t in cluster.terms()] == [term]
        assert cluster.events(("leader_released", "leader_lost")) == []
        assert first.alive() and cluster.replicas["b"].alive()
        errors = leader.metrics()
        assert errors['leoflow_scheduler_entity_errors_total{kind="task"}'] >= 1
        assert errors['leoflow_scheduler_entity_errors_total{kind="dag"}'] == 1
