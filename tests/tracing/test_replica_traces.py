"""A run traced end to end on real ``leoflow serve`` processes (local executor, real PostgreSQL),
exporting over OTLP/HTTP to a collector the test runs: one trace across replicas and a leader
change, the task's ``TRACEPARENT`` in that trace, and a collector that hangs costing nothing."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from leoflow.model.tries import TryKey
from leoflow.tracing import ids
from tests.election.cluster import Cluster, wait_for
from tests.tracing.collector import Collector, ReceivedSpan

TRACE = f"{ids.run_trace_id('traced', 'r1'):032x}"
RUN_SPAN = f"{ids.run_span_id('traced', 'r1'):016x}"


def try_span(task_id: str, try_number: int) -> str:
    return f"{ids.try_span_id(TryKey('traced', 'r1', task_id, try_number)):016x}"


def _cluster(database_url: str, tmp_path: Path, endpoint: str) -> Cluster:
    return Cluster(database_url, tmp_path, name="traces", probe=False, env={
        "LEOFLOW_EXECUTOR": "local", "LEOFLOW_HOME": str(tmp_path / "home"),
        "LEOFLOW_LOG_ARCHIVE_URL": f"file://{tmp_path / 'archive'}", "LEOFLOW_LOG_ARCHIVE_FLUSH_INTERVAL": "0.2",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"})


@pytest.fixture
def cluster(database_url: str, tmp_path: Path, collector: Collector) -> Iterator[Cluster]:
    c = _cluster(database_url, tmp_path, collector.endpoint)
    try:
        yield c
    finally:
        c.stop_all()


def _state(api: httpx.Client, path: str) -> str:
    answer = api.get(path)
    return str(answer.json().get("state")) if answer.status_code == 200 else ""


def test_one_trace_across_replicas_a_leader_change_and_the_task(cluster: Cluster, collector: Collector,
                                                                tmp_path: Path) -> None:
    seen, marker = tmp_path / "traceparent.txt", tmp_path / "failed-once"
    spec: dict[str, Any] = {"dag_id": "traced", "tasks": [
        {"id": "first", "image": "busybox", "command": ["sh", "-c", f'echo "$TRACEPARENT" > {seen}; echo hello']},
        # Fails once; its retry is due after the old leader is gone, so the new one ends the run.
        {"id": "second", "image": "busybox", "depends_on": ["first"], "retries": 1, "retry_delay_seconds": 6,
         "command": ["sh", "-c", f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; exit 3"]}]}
    cluster.start("a")
    cluster.start("b")
    leader, _ = cluster.wait_leader()
    survivor = "b" if leader == "a" else "a"
    caller_trace, caller_span = "c" * 32, "d" * 16
    with httpx.Client(base_url=cluster.replicas[survivor].url, timeout=30) as api:
        assert api.post("/api/v2/dags", json=spec).status_code == 201
        answer = api.post("/api/v2/dags/traced/runs", json={"run_id": "r1"},
                          headers={"traceparent": f"00-{caller_trace}-{caller_span}-01"})
        assert answer.status_code == 201, answer.text
        # The first leader records the failed first try of `second` (and exports its span); then it dies.
        failed_once = collector.wait_for("leoflow.try", 90, **{"leoflow.task_id": "second", "leoflow.try_number": 1})
        cluster.replicas[leader].signal(signal.SIGKILL)
        wait_for(lambda: _state(api, "/api/v2/dags/traced/runs/r1") == "success", 120, "run r1 success",
                 interval=0.2)
        new_leader, _ = cluster.wait_leader(not_node=leader)
    run = collector.wait_for("leoflow.run")

    # One trace: the run's, computed by both leaders alike.
    assert run.trace_id == TRACE and (run.span_id, run.parent_span_id) == (RUN_SPAN, "")
    assert run.attributes["leoflow.state"] == "success"
    # The run span ends under the new leader; the tries it did not see were the old leader's.
    assert run.resource["service.instance.id"] == new_leader != leader
    first = collector.wait_for("leoflow.try", **{"leoflow.task_id": "first"})
    retried = collector.wait_for("leoflow.try", **{"leoflow.task_id": "second", "leoflow.try_number": 2})
    assert first.resource["service.instance.id"] == failed_once.resource["service.instance.id"] == leader
    assert retried.resource["service.instance.id"] == new_leader
    for span, task, number in ((first, "first", 1), (failed_once, "second", 1), (retried, "second", 2)):
        assert (span.trace_id, span.span_id, span.parent_span_id) == (TRACE, try_span(task, number), RUN_SPAN)
    assert failed_once.status_code == 2 and failed_once.attributes["process.exit.code"] == 3
    assert first.start_ns <= first.end_ns and run.start_ns <= first.start_ns and retried.end_ns <= run.end_ns

    # Each try's process launch, and the first try's log shipping, are children of that try.
    launches = {s.parent_span_id for s in collector.named("leoflow.process.launch") if s.trace_id == TRACE}
    assert launches >= {try_span("first", 1), try_span("second", 1), try_span("second", 2)}
    upload = collector.wait_for("leoflow.log_archive.upload", **{"leoflow.task_id": "first"})
    assert (upload.trace_id, upload.parent_span_id) == (TRACE, try_span("first", 1))

    # The task saw its try's span as TRACEPARENT (W3C): its own spans would join this trace.
    assert seen.read_text().strip() == f"00-{TRACE}-{try_span('first', 1)}-01"

    # API requests: the trigger joins its caller's trace and links to the run; reads of the run
    # (the polling above, on the surviving replica) are children of the run span.
    trigger = collector.wait_for("HTTP POST /api/v2/dags/{dag_id}/runs")
    assert (trigger.trace_id, trigger.parent_span_id, trigger.links) == (caller_trace, caller_span,
                                                                          ((TRACE, RUN_SPAN),))
    read: ReceivedSpan = collector.wait_for("HTTP GET /api/v2/dags/{dag_id}/runs/{run_id}")
    assert (read.trace_id, read.parent_span_id) == (TRACE, RUN_SPAN)
    assert read.resource["service.instance.id"] == survivor


def test_a_hanging_collector_never_slows_or_breaks_scheduling(database_url: str, tmp_path: Path) -> None:
    hanging = Collector(hang=True).start()
    cluster = _cluster(database_url, tmp_path, hanging.endpoint)
    chain = [{"id": f"t{i}", "image": "busybox", "command": ["sh", "-c", "echo step"],
              "depends_on": [f"t{i - 1}"] if i else []} for i in range(5)]
    try:
        replica = cluster.start("solo")
        cluster.wait_leader()
        with httpx.Client(base_url=replica.url, timeout=30) as api:
            assert api.post("/api/v2/dags", json={"dag_id": "traced", "tasks": chain}).status_code == 201
            for run_id in ("r1", "r2", "r3"):
                assert api.post("/api/v2/dags/traced/runs", json={"run_id": run_id}).status_code == 201
            for run_id in ("r1", "r2", "r3"):
                wait_for(lambda r=run_id: _state(api, f"/api/v2/dags/traced/runs/{r}") == "success", 120,
                         f"run {run_id} success", interval=0.2)
            assert api.get("/healthz").status_code == 200
        assert hanging.connections >= 1, "the replica never exported: the test proves nothing"
        assert hanging.requests == 0 and hanging.spans == []
        # Stopping is bounded too: the flush at exit is abandoned, the replica exits cleanly.
        replica.signal(signal.SIGTERM)
        assert replica.proc.wait(timeout=60) == 0
        assert "spans not exported at shutdown" in replica.log()
    finally:
        cluster.stop_all()
        hanging.stop()
