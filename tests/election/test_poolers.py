"""Replicas behind a real PgBouncer (issue 17 §5): session mode works end to end; transaction mode —
from the start or switched to at run time (edit + reload) — is refused with one clear line, never
lets two replicas lead at once, and the API keeps answering (no prepared statements behind a
pooler) while ``/readyz`` says why the replica is not ready.

Stock configuration: no ``ignore_startup_parameters``, so the pooler refuses the startup
parameter ``options`` the way Debian's PgBouncer does; Leoflow sets its timeouts after connecting.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from leoflow.db import migrations
from tests.election.cluster import Cluster, ReplicaProcess, wait_for
from tests.harness.pgbouncer import PGBOUNCER, PgBouncer
from tests.harness.postgres import PostgresServer

pytestmark = pytest.mark.skipif(PGBOUNCER is None, reason="pgbouncer is not installed (apt-get install pgbouncer)")

POOLER_LINE = "transaction-mode pooler"
REFUSAL = "refusing to elect a leader"


def leoflow(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    env["LEOFLOW_DATABASE_URL"] = url
    return subprocess.run([sys.executable, "-m", "leoflow", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def leadership_intervals(replica: ReplicaProcess) -> list[tuple[datetime, datetime | None]]:
    """[acquired, lost) per term from the replica's own JSON log (one host, one clock)."""
    spans: list[tuple[datetime, datetime | None]] = []
    for line in replica.log().splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        ts = datetime.fromisoformat(record["ts"])
        if record["message"] == "acquired leadership":
            spans.append((ts, None))
        elif (record["message"].startswith(("lost leadership", "released leadership"))
              and spans and spans[-1][1] is None):
            spans[-1] = (spans[-1][0], ts)
    return spans


def never_two_leaders(replicas: list[ReplicaProcess]) -> None:
    spans = sorted((start, end or datetime.max.replace(tzinfo=start.tzinfo), r.node)
                   for r in replicas for start, end in leadership_intervals(r))
    for (_s1, e1, n1), (s2, _e2, n2) in itertools.pairwise(spans):
        assert e1 <= s2, f"{n1} still led until {e1} when {n2} began leading at {s2}"


def api_reads_answer(replica: ReplicaProcess, count: int = 30) -> None:
    for _ in range(count):
        answer = replica.get("/api/v2/dags")
        assert answer.status_code == 200, answer.text
    assert "Traceback" not in replica.log() and "prepared statement" not in replica.log()


def test_session_pooler_works_and_transaction_mode_is_refused(
        cluster: Cluster, pg_server: PostgresServer, tmp_path: Path) -> None:
    bouncer = PgBouncer(pg_server.admin_url, tmp_path, pool_mode="session").start()
    try:
        pooled = bouncer.url(cluster.database_url)
        # Migrations through the stock pooler apply, and the command says so with exit 0.
        upgrade = leoflow("db", "upgrade", url=pooled)
        assert upgrade.returncode == 0 and f"schema at {migrations.head_revision()}" in upgrade.stdout, upgrade.stderr
        replicas = [cluster.start(node, database_url=pooled, wait=False) for node in ("a", "b")]
        for r in replicas:
            cluster.wait_healthy(r)
        leader, _term = cluster.wait_leader()
        for r in replicas:
            ready = wait_for(lambda r=r: r.get("/readyz").status_code == 200 and r.get("/readyz"), 30, "ready")
            assert ready.json()["pooler"] is True
        api_reads_answer(replicas[0])

        # The operator switches the pool to transaction mode and reloads, replicas running.
        bouncer.switch("transaction")
        # Wait for the refusal itself: the pooler's reason may reach the log first in another line
        # (the leader losing its lock session), and the refusal a moment later.
        refused = wait_for(lambda: [r for r in replicas if REFUSAL in r.log()], 60, "a refusal")
        for r in refused:
            lines = [line for line in r.log().splitlines() if REFUSAL in line]
            assert len(lines) == 1 and "session-mode pooler" in lines[0] and "LEOFLOW_DATABASE_URL" in lines[0]
            answer = wait_for(lambda r=r: r.get("/readyz").status_code == 503 and r.get("/readyz"), 30, "unready")
            assert POOLER_LINE in answer.json()["error"]["message"]
        api_reads_answer(replicas[1])
        # A replica started in transaction mode refuses at once, with the same line.
        late = cluster.start("c", database_url=pooled)
        wait_for(lambda: POOLER_LINE in late.log(), 30, "the late replica's refusal")
        assert late.leader_gauge() == 0
        api_reads_answer(late)
        assert leoflow("db", "upgrade", url=pooled).returncode == 0
        never_two_leaders([*replicas, late])
        del leader
    finally:
        bouncer.stop()
