"""Task instances that hold or wait for pool slots, written straight into the database: the pool
tests need a pool's use at a known point, with no scheduler moving it meanwhile."""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import psycopg

from tests.api.conftest import ADMIN, spec

#: (task_id, state, pool): two gpu tasks holding slots (one running, one queued), one gpu task
#: waiting, one waiting for a pool nobody created, one running in the default pool.
USAGE = (("a", "running", "gpu"), ("b", "queued", "gpu"), ("c", "pending", "gpu"),
         ("d", "pending", "later"), ("e", "running", "default"))


def seed_pool_usage(client: httpx.Client, database_url: str, rows: Sequence[tuple[str, str, str]] = USAGE) -> None:
    """Apply the ``etl`` DAG through the API, then give one running run of it these task instances
    (``pending`` with no upstream left to wait for is a ready task waiting for a slot)."""
    assert client.post("/api/v2/dags", json=spec(), headers=ADMIN).status_code == 201
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state) "
                     "SELECT 'etl', 'r1', current_version_id, 'manual', 'running' FROM dags")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO task_instances (run_pk, task_id, state, pool) "
                            "SELECT id, %s, %s, %s FROM dag_runs WHERE run_id = 'r1'", list(rows))
