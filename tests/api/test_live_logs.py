"""Live logs: the API reads a running pod's output from the (fake) Kubernetes API itself — bounded, followable.

The app here has no leader, no scheduler and no executor: only the live log reader the
composition root would hand it, and a task try row pointing at a pod.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from leoflow.api.app import create_app
from leoflow.api.routes import logs as routes_logs
from leoflow.cli.log_follow import follow, unseen
from leoflow.executor.kubernetes.live_logs import PodLiveLogs
from tests.api.conftest import ADMIN, READ, api_settings, seed_task, spec
from tests.api.live import client_for
from tests.harness.fake_k8s import FakeKubernetes, Fault

NAMESPACE = "tasks"
LOGS = "/api/v2/dags/etl/runs/r1/tasks/extract/logs"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKubernetes]:
    with FakeKubernetes(startup_delay=0.01) as k8s:
        monkeypatch.setenv("KUBECONFIG", str(k8s.write_kubeconfig(tmp_path / "kubeconfig", NAMESPACE)))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield k8s


@pytest.fixture
def client(database_url: str, fake: FakeKubernetes) -> Iterator[httpx.Client]:
    settings = api_settings(database_url, LEOFLOW_EXECUTOR="kubernetes")
    with client_for(create_app(settings, live_logs=PodLiveLogs(settings))) as http:
        http.post("/api/v2/dags", json=spec(), headers=ADMIN).raise_for_status()
        http.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).raise_for_status()
        yield http


def start_pod(fake: FakeKubernetes, script: str, name: str = "pod-extract-1") -> None:
    fake.store.create(NAMESPACE, {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "task", "image": "busybox", "command": ["sh", "-c", script]},
        {"name": "agent", "image": "agent", "command": ["sleep", "infinity"]}]}})


def wait_text(client: httpx.Client, predicate: Any, timeout: float = 30.0, **params: Any) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(LOGS, params=params, headers=READ)
        if predicate(answer):
            return answer
        assert time.monotonic() < deadline, f"timed out; last answer: {answer.status_code} {answer.text[-300:]}"
        time.sleep(0.05)


def finish_try(database_url: str, log: str) -> None:
    """What the executor and the shipper do when the try ends: end the row, store the log."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("UPDATE task_tries SET state = 'success', ended_at = now(), logs_shipped_at = now() "
                           "WHERE executor_ref = 'pod-extract-1' RETURNING id").fetchone()
        assert row is not None
        conn.execute("INSERT INTO task_logs (task_try_id, content, truncated, size_bytes) VALUES (%s, %s, false, %s)",
                     (row[0], log, len(log)))


def test_a_running_pods_output_is_read_live_by_the_api(client: httpx.Client, fake: FakeKubernetes,
                                                       database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="running", tries=[{"state": "running", "ended": False}])
    start_pod(fake, "echo first; sleep 0.3; echo second; sleep 3600")
    answer = wait_text(client, lambda a: "second" in a.text)
    assert answer.headers["X-Leoflow-Log-Source"] == "pod" and answer.headers["X-Leoflow-Log-Complete"] == "false"
    assert answer.text.startswith("first\nsecond\n") and "is running; this is its pod's live output" in answer.text
    reads = [r for r in fake.requests if r.get("verb") == "log"]
    assert reads and all(r["container"] == "task" and r["query"].get("tailLines") == str(
        routes_logs.LIVE_TAIL_LINES + 1) and r["query"].get("timestamps") == "true" for r in reads)
    # Once the try ended, the stored copy is what a reader gets (the pod may be gone by then).
    finish_try(database_url, "first\nsecond\nstored\n")
    final = client.get(LOGS, headers=READ)
    assert final.text == "first\nsecond\nstored\n" and final.headers["X-Leoflow-Log-Source"] == "stored"
    assert final.headers["X-Leoflow-Log-Complete"] == "true"


def test_the_live_tail_is_bounded(client: httpx.Client, fake: FakeKubernetes, database_url: str,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routes_logs, "LIVE_TAIL_LINES", 10)
    monkeypatch.setattr(routes_logs, "LIVE_TAIL_BYTES", 64)
    seed_task(database_url, "etl", "r1", "extract", state="running", tries=[{"state": "running", "ended": False}])
    start_pod(fake, "seq 5000; sleep 3600")
    answer = wait_text(client, lambda a: "5000" in a.text)
    lines = answer.text.splitlines()
    assert lines[0] == "[leoflow: showing the last 10 lines of the running pod's log]"
    body = lines[1:-1]
    assert body[-1] == "5000" and len(body) <= 10 and len("\n".join(body)) <= 64  # both bounds hold
    assert [r["query"]["tailLines"] for r in fake.requests if r.get("verb") == "log"][-1] == "11"


def test_following_returns_only_new_lines_then_the_end(client: httpx.Client, fake: FakeKubernetes,
                                                       database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="running", tries=[{"state": "running", "ended": False}])
    client.get(LOGS, headers=READ)  # connects the reader (no pod yet: the stored copy)
    start_pod(fake, "echo one; sleep 0.5; echo two; sleep 0.5; echo three; sleep 3600")
    first = wait_text(client, lambda a: a.text.startswith("one\n"), since="")
    assert first.headers["X-Leoflow-Log-Continues"] == "true"
    followed, cursors, last = first.text, [first.headers["X-Leoflow-Log-Cursor"]], first
    deadline = time.monotonic() + 30
    while followed != "one\ntwo\nthree\n":  # each read returns only lines after the cursor
        assert time.monotonic() < deadline and len(followed) < 15, followed
        last = client.get(LOGS, params={"since": cursors[-1]}, headers=READ)
        followed += last.text
        cursors.append(last.headers["X-Leoflow-Log-Cursor"])
        time.sleep(0.05)
    assert all(c.startswith("t") for c in cursors) and cursors == sorted(cursors)
    quiet = client.get(LOGS, params={"since": last.headers["X-Leoflow-Log-Cursor"]}, headers=READ)
    assert quiet.text == "" and quiet.headers["X-Leoflow-Log-Complete"] == "false"
    # The try ends while the pod still exists: a follower's last read comes from the pod, final.
    finish_try(database_url, "one\ntwo\nthree\n")
    end = client.get(LOGS, params={"since": last.headers["X-Leoflow-Log-Cursor"]}, headers=READ)
    assert (end.text, end.headers["X-Leoflow-Log-Source"], end.headers["X-Leoflow-Log-Complete"]) == (
        "", "pod", "true")
    # Gone pod: the stored copy, whole, flagged as not a continuation.
    fake.store.delete(NAMESPACE, "pod-extract-1", 0)
    gone = client.get(LOGS, params={"since": last.headers["X-Leoflow-Log-Cursor"]}, headers=READ)
    assert (gone.text, gone.headers["X-Leoflow-Log-Continues"]) == ("one\ntwo\nthree\n", "false")
    stored = client.get(LOGS, params={"since": "b4"}, headers=READ)
    assert stored.text == "two\nthree\n" and stored.headers["X-Leoflow-Log-Cursor"] == "b14"
    assert client.get(LOGS, params={"since": "yesterday"}, headers=READ).status_code == 400


def test_api_trouble_falls_back_to_the_stored_copy_and_says_why(client: httpx.Client, fake: FakeKubernetes,
                                                                 database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="running",
              tries=[{"state": "running", "ended": False, "log": "partial\n"}])
    start_pod(fake, "echo live; sleep 3600")
    fake.inject(Fault("log", code=500, times=1))
    answer = client.get(LOGS, headers=READ)
    assert answer.headers["X-Leoflow-Log-Source"] == "stored"
    assert answer.text.startswith("[leoflow: the pod's live log cannot be read (500 ")
    assert "partial\n" in answer.text
    assert "live" in wait_text(client, lambda a: "live" in a.text).text
    fake.store.delete(NAMESPACE, "pod-extract-1", 0)  # gone: the stored copy, no note
    assert client.get(LOGS, headers=READ).text.startswith("partial\n")


class _Api:
    """The CLI's Api over an httpx client (the follow loop only needs ``request``)."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def request(self, method: str, path: str, *, ok: tuple[int, ...] = (200,), **kw: Any) -> httpx.Response:
        answer = self.http.request(method, path, headers=READ, **kw)
        assert answer.status_code in ok, answer.text
        return answer


def test_cli_follow_prints_each_line_once_until_the_try_ends(client: httpx.Client, fake: FakeKubernetes,
                                                             database_url: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="running", tries=[{"state": "running", "ended": False}])
    start_pod(fake, "echo a; sleep 0.4; echo b; sleep 0.4; echo c; sleep 3600")
    out = io.StringIO()
    polls: list[str] = []

    def tick(_: float) -> None:
        polls.append(out.getvalue())
        if out.getvalue() == "a\nb\nc\n" and len(polls) > 2:
            finish_try(database_url, "a\nb\nc\n")
        time.sleep(0.1)

    assert follow(_Api(client), LOGS, None, out, outage_tolerance=5, sleep=tick) == 0
    assert out.getvalue() == "a\nb\nc\n"
    assert len(polls) >= 3  # it really followed (several reads), not one read at the end


def test_unseen_drops_what_was_printed() -> None:
    assert unseen(["a", "b"], "a\nb\nc\n") == "c\n"
    assert unseen([], "x\n") == "x\n"
    assert unseen(["q"], "a\nb\n").startswith("[leoflow: the pod is gone")
