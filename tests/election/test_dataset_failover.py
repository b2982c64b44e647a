"""Datasets across leader crashes, with replicas as real ``leoflow serve`` processes (memory executor).

The promise under test (ADR 0018, decisions 2 and 4): an event triggers each consuming DAG once —
none lost, none counted twice — whenever the leader dies. Two ways:

1. **Between the producer's success and the consumer's run**, deterministically: the consumer is
   paused, so the leader records the producer's event and queues it but may not start the run;
   the leader is killed (SIGKILL); the consumer is unpaused through another replica; the next
   leader starts exactly one run carrying that event.
2. **At random moments**: producers' runs and outside events (sent to every replica) keep
   arriving while the leader is killed three times; once everything settles, for every consumer
   the events of its URIs equal the events its runs consumed plus those still queued, and no
   two of its runs consumed the same event.
"""

from __future__ import annotations

import itertools
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.election.cluster import Cluster, ReplicaProcess, wait_for

pytestmark = pytest.mark.slow

U1, U2 = "s3://lake/orders", "s3://lake/customers"


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """Replicas running ``leoflow serve`` itself: the production leader services, the scheduler among them."""
    c = Cluster(database_url, tmp_path, probe=False)
    try:
        yield c
    finally:
        c.stop_all()


def task(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": task_id, "image": "busybox", "command": ["true"], **fields}


def post(replica: ReplicaProcess, path: str, body: dict[str, Any], ok: tuple[int, ...] = (200, 201)) -> Any:
    answer = httpx.post(replica.url + path, json=body, timeout=30)
    assert answer.status_code in ok, answer.text
    return answer.json()


def alive(cluster: Cluster) -> list[ReplicaProcess]:
    return [r for r in cluster.replicas.values() if r.alive()]


def dataset_runs(db: psycopg.Connection[Any], dag_id: str) -> list[tuple[str, Any]]:
    return db.execute("SELECT run_id, triggering_events FROM dag_runs WHERE dag_id = %s AND run_type = 'dataset' "
                      "ORDER BY id", (dag_id,)).fetchall()


def kill_leader(cluster: Cluster) -> str:
    leader, term = cluster.wait_leader()
    cluster.replicas[leader].signal(signal.SIGKILL)
    cluster.replicas[leader].proc.wait(timeout=10)
    cluster.wait_leader(not_node=leader, min_term=term, timeout=60)
    return leader


def test_a_leader_killed_between_the_producers_success_and_the_consumers_run(cluster: Cluster) -> None:
    for node in ("r1", "r2", "r3"):
        cluster.start(node, wait=False)
    for r in cluster.replicas.values():
        cluster.wait_healthy(r)
    cluster.wait_leader()
    entry = cluster.replicas["r1"]
    post(entry, "/api/v2/dags", {"dag_id": "ingest", "tasks": [task("load", produces=[U1])]})
    post(entry, "/api/v2/dags", {"dag_id": "report", "paused": True,
                                 "schedule": {"datasets": {"all": [U1]}}, "tasks": [task("r")]})
    run_id = post(entry, "/api/v2/dags/ingest/runs", {})["run_id"]
    with psycopg.connect(cluster.database_url, autocommit=True) as db:
        wait_for(lambda: db.execute("SELECT events FROM dataset_queue WHERE dag_id = 'report'").fetchone(), 60,
                 "the producer's event queued for the paused consumer")
        assert dataset_runs(db, "report") == []
        killed = kill_leader(cluster)
        survivor = next(r for r in alive(cluster) if r.node != killed)
        answer = httpx.patch(survivor.url + "/api/v2/dags/report", json={"paused": False}, timeout=30)
        assert answer.status_code == 200, answer.text
        wait_for(lambda: dataset_runs(db, "report"), 60, "the consumer's run under the next leader")
        time.sleep(1.5)  # several ticks of the new leader: nothing more may come
        [(_, events)] = dataset_runs(db, "report")
        assert [(e["uri"], e["events"], e["run_id"]) for e in events] == [(U1, 1, run_id)]
        assert db.execute("SELECT count(*) FROM dataset_queue").fetchone() == (0,)


def test_every_event_counts_once_while_the_leader_keeps_dying(cluster: Cluster) -> None:
    for node in ("r1", "r2", "r3"):
        cluster.start(node, wait=False)
    for r in cluster.replicas.values():
        cluster.wait_healthy(r)
    cluster.wait_leader()
    entry = cluster.replicas["r1"]
    post(entry, "/api/v2/dags", {"dag_id": "ingest", "tasks": [task("load", produces=[U1])]})
    consumers = {"report-all": {"all": [U1, U2]}, "report-any": {"any": [U1, U2]}, "audit": {"any": [U2]}}
    for dag_id, condition in consumers.items():
        post(entry, "/api/v2/dags", {"dag_id": dag_id, "schedule": {"datasets": condition}, "tasks": [task("r")]})
    rng = random.Random(40)
    for round_ in range(3):
        deadline = time.monotonic() + rng.uniform(0.3, 1.5)
        while time.monotonic() < deadline:  # events and producer runs, through every live replica
            for replica in alive(cluster):
                try:
                    post(replica, "/api/v2/datasets/events", {"uri": U2, "extra": {"round": round_}}, ok=(201,))
                    post(replica, "/api/v2/dags/ingest/runs", {}, ok=(201,))
                except (httpx.HTTPError, AssertionError):
                    pass  # the replica being killed: an event it did not confirm may or may not be recorded
        killed = kill_leader(cluster)
        cluster.start(f"{killed}-{round_}", wait=True)
    # Producers' tries the dead leaders ran end when the next leader finds them gone, possibly
    # later; the count holds at any instant (an event and its queue entries commit together, a run
    # and the deletion of what it consumed too), so it is read from one snapshot.
    time.sleep(2.0)
    with psycopg.connect(cluster.database_url) as db:
        db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        recorded = dict(db.execute("SELECT uri, count(*) FROM dataset_events GROUP BY uri").fetchall())
        assert recorded.get(U1, 0) > 3 and recorded.get(U2, 0) > 3, recorded
        for dag_id, condition in consumers.items():
            uris = next(iter(condition.values()))
            consumed: dict[str, int] = dict.fromkeys(uris, 0)
            ranges: dict[str, list[tuple[int, int]]] = {u: [] for u in uris}
            runs = dataset_runs(db, dag_id)
            assert runs, f"{dag_id} never started"
            for _, events in runs:
                for e in events:
                    consumed[e["uri"]] += e["events"]
                    ranges[e["uri"]].append((e["first_event_id"], e["last_event_id"]))
            for uri, waiting in db.execute("SELECT uri, events FROM dataset_queue WHERE dag_id = %s",
                                           (dag_id,)).fetchall():
                consumed[uri] += waiting
            assert consumed == {u: recorded.get(u, 0) for u in uris}, (dag_id, consumed, recorded)
            for spans in ranges.values():  # no event in two runs
                spans.sort()
                assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), (dag_id, spans)


def test_a_cron_and_datasets_slot_runs_once_when_the_leader_dies_as_its_data_arrives(cluster: Cluster) -> None:
    """``combine: and``: the slot made pending by one leader, its event posted and that leader SIGKILLed at
    once — the slot gets exactly one run (the slot's scheduled run, carrying the event), under whichever
    leader creates it."""
    for node in ("r1", "r2", "r3"):
        cluster.start(node, wait=False)
    for r in cluster.replicas.values():
        cluster.wait_healthy(r)
    cluster.wait_leader()
    entry = cluster.replicas["r1"]
    post(entry, "/api/v2/dags", {"dag_id": "daily", "start_date": "2026-01-01T00:00:00Z",
                                 "schedule": {"cron": "* * * * *", "datasets": {"all": [U1]}, "combine": "and"},
                                 "tasks": [task("r")]})
    with psycopg.connect(cluster.database_url, autocommit=True) as db:
        wait_for(lambda: db.execute("SELECT pending_slot_at FROM dags WHERE dag_id = 'daily'").fetchone()[0], 60,
                 "the latest slot pending")
        leader, _ = cluster.wait_leader()
        poster = next(r for r in alive(cluster) if r.node != leader)
        post(poster, "/api/v2/datasets/events", {"uri": U1}, ok=(201,))
        kill_leader(cluster)

        def runs() -> list[tuple[str, str, Any]]:
            return db.execute("SELECT run_id, run_type, triggering_events FROM dag_runs WHERE dag_id = 'daily'"
                              ).fetchall()

        wait_for(runs, 60, "the slot's run")
        time.sleep(1.5)  # several ticks of the new leader: nothing more may come
        [(run_id, run_type, events)] = runs()
        assert run_id.startswith("scheduled__") and run_type == "scheduled"
        assert [(e["uri"], e["events"]) for e in events] == [(U1, 1)]
        assert db.execute("SELECT count(*) FROM dataset_queue").fetchone() == (0,)
