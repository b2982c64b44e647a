"""The fake API server is only useful if it is faithful: check it with the official client."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from tests.harness import fake_k8s
from tests.harness.fake_k8s import FakeKubernetes, Fault
from tests.harness.fake_k8s_kubelet import interpret
from tests.harness.fake_k8s_remote import FakeKubernetesProcess
from tests.harness.fake_k8s_selectors import LabelSelector

NS = "fake"


def pod(name: str, labels: dict[str, str] | None = None, script: str = "true",
        image: str = "busybox") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "task", "image": image,
                                                                "command": ["sh", "-c", script]}]}}


@pytest.fixture
def core(tmp_path: Path) -> Iterator[tuple[client.CoreV1Api, FakeKubernetes]]:
    with FakeKubernetes(startup_delay=0.01, bookmark_interval=0.2) as fake:
        api = client.CoreV1Api(config.new_client_from_config(str(fake.write_kubeconfig(tmp_path / "kc", NS))))
        yield api, fake
        api.api_client.close()


def wait_phase(api: client.CoreV1Api, name: str, phases: set[str], timeout: float = 30) -> client.V1Pod:
    deadline = time.monotonic() + timeout
    while True:
        p = api.read_namespaced_pod(name, NS)
        if p.status.phase in phases:
            return p
        assert time.monotonic() < deadline, f"{name} stuck in {p.status.phase}"
        time.sleep(0.02)


def test_create_get_status_codes_and_server_fields(core: tuple[client.CoreV1Api, FakeKubernetes]) -> None:
    api, _ = core
    created = api.create_namespaced_pod(NS, pod("a", script="echo one; echo two; exit 2"))
    assert created.metadata.uid and created.metadata.creation_timestamp and created.status.phase == "Pending"
    assert created.metadata.namespace == NS and int(created.metadata.resource_version) > 0
    with pytest.raises(client.ApiException) as conflict:
        api.create_namespaced_pod(NS, pod("a"))
    body = json.loads(conflict.value.body)
    assert (conflict.value.status, body["kind"], body["reason"]) == (409, "Status", "AlreadyExists")
    with pytest.raises(client.ApiException) as missing:
        api.read_namespaced_pod("nope", NS)
    assert missing.value.status == 404 and json.loads(missing.value.body)["reason"] == "NotFound"
    with pytest.raises(client.ApiException) as invalid:
        api.create_namespaced_pod(NS, {"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "x"}]}})
    causes = {c["field"] for c in json.loads(invalid.value.body)["details"]["causes"]}
    assert invalid.value.status == 422 and causes == {"metadata.name", "spec.containers[0].image"}
    done = wait_phase(api, "a", {"Failed"})  # the official model deserialises every status field
    terminated = done.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 2 and done.status.container_statuses[0].image == "busybox"
    assert api.read_namespaced_pod_log("a", NS) == "one\ntwo\n"
    assert api.read_namespaced_pod_log("a", NS, tail_lines=1) == "two\n"


def test_label_selectors_and_pagination(core: tuple[client.CoreV1Api, FakeKubernetes]) -> None:
    api, _ = core
    for i, (env, tier) in enumerate([("prod", "web"), ("prod", "db"), ("dev", "web"), ("dev", None)]):
        labels = {"env": env, **({"tier": tier} if tier else {})}
        api.create_namespaced_pod(NS, pod(f"p{i}", labels))

    def names(selector: str) -> list[str]:
        return sorted(p.metadata.name for p in api.list_namespaced_pod(NS, label_selector=selector).items)

    assert names("env=prod") == ["p0", "p1"]
    assert names("env==prod,tier!=db") == ["p0"]
    assert names("tier in (web, db)") == ["p0", "p1", "p2"]
    assert names("tier notin (web)") == ["p1", "p3"]
    assert names("tier") == ["p0", "p1", "p2"] and names("!tier") == ["p3"]
    with pytest.raises(client.ApiException) as bad:
        api.list_namespaced_pod(NS, label_selector="env in prod")
    assert bad.value.status == 400
    first = api.list_namespaced_pod(NS, limit=3)
    rest = api.list_namespaced_pod(NS, limit=3, _continue=first.metadata._continue)
    assert len(first.items) == 3 and len(rest.items) == 1 and not rest.metadata._continue
    assert LabelSelector("a=1,b notin (2,3)").matches({"a": "1"})


def test_watch_bookmarks_timeout_and_410_gone(core: tuple[client.CoreV1Api, FakeKubernetes]) -> None:
    api, fake = core
    listed = api.list_namespaced_pod(NS)
    api.create_namespaced_pod(NS, pod("w", {"app": "x"}, script="sleep 0.2"))
    api.create_namespaced_pod(NS, pod("other", {"app": "y"}))
    started = time.monotonic()
    events = list(watch.Watch().stream(api.list_namespaced_pod, NS, label_selector="app=x",
                                       resource_version=listed.metadata.resource_version,
                                       allow_watch_bookmarks=True, timeout_seconds=2))
    assert 1.5 < time.monotonic() - started < 10  # the server ended the stream at its timeout
    kinds = [e["type"] for e in events]
    assert "BOOKMARK" in kinds and kinds[0] == "ADDED"
    phases = [e["object"].status.phase for e in events if e["type"] != "BOOKMARK"]
    assert phases[-1] == "Succeeded" and {e["object"].metadata.name for e in events if e["type"] != "BOOKMARK"} == {"w"}
    fake.store.compact()
    response = api.list_namespaced_pod(NS, watch=True, resource_version=listed.metadata.resource_version,
                                       timeout_seconds=2, _preload_content=False)
    error = json.loads(response.data.splitlines()[0])
    assert error["type"] == "ERROR" and error["object"]["code"] == 410 and error["object"]["reason"] == "Expired"


def test_kubelet_image_errors_deadline_and_graceful_delete(core: tuple[client.CoreV1Api, FakeKubernetes]) -> None:
    api, fake = core
    api.create_namespaced_pod(NS, pod("img", image="example/pull-error"))
    slow = pod("slow", script="sleep 30")
    slow["spec"]["activeDeadlineSeconds"] = 1
    api.create_namespaced_pod(NS, slow)
    api.create_namespaced_pod(NS, pod("gone", script="sleep 30"))
    deadline = time.monotonic() + 30
    reasons: set[str] = set()
    while not {"ErrImagePull", "ImagePullBackOff"} <= reasons:
        assert time.monotonic() < deadline, f"image errors seen: {reasons}"
        statuses = api.read_namespaced_pod("img", NS).status.container_statuses or []
        if statuses and statuses[0].state.waiting:
            reasons.add(statuses[0].state.waiting.reason)
        time.sleep(0.05)
    with pytest.raises(client.ApiException) as waiting:
        api.read_namespaced_pod_log("img", NS)
    assert waiting.value.status == 400
    assert wait_phase(api, "slow", {"Failed"}).status.reason == "DeadlineExceeded"
    wait_phase(api, "gone", {"Running"})
    deleted = api.delete_namespaced_pod("gone", NS)
    assert deleted.metadata.deletion_timestamp is not None
    deadline = time.monotonic() + 30
    while "gone" in {p["metadata"]["name"] for p in fake.pods(NS)}:
        assert time.monotonic() < deadline, "terminating pod never removed"
        time.sleep(0.02)


def test_faults_and_request_log(core: tuple[client.CoreV1Api, FakeKubernetes]) -> None:
    api, fake = core
    fake.inject(Fault("create", code=429, retry_after=3, times=2))
    for _ in range(2):
        with pytest.raises(client.ApiException) as throttled:
            api.create_namespaced_pod(NS, pod("f", {"leoflow.io/term": "7"}))
        assert throttled.value.status == 429 and throttled.value.headers["Retry-After"] == "3"
    api.create_namespaced_pod(NS, pod("f", {"leoflow.io/term": "7"}))
    assert [(r["code"], r["term"]) for r in fake.creates()] == [(429, "7"), (429, "7"), (201, "7")]


def _get(fake: FakeKubernetes, path: str) -> bytes:
    """One raw GET; whatever the server sends before it closes (b"" if it hung up at once)."""
    with socket.create_connection(("127.0.0.1", fake.port), timeout=10) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: fake\r\nConnection: close\r\n\r\n".encode())
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
        return received


def test_a_client_gone_before_an_error_answer_is_not_a_handler_error(monkeypatch: pytest.MonkeyPatch,
                                                                     capfd: pytest.CaptureFixture[str]) -> None:
    """CI once printed a handler traceback into another test's stderr: a log follow's 404 went to
    a client that had hung up, and the broken pipe escaped the handler."""
    send = fake_k8s._Handler._send

    def hung_up_on_errors(self: Any, code: int, *args: Any, **kwargs: Any) -> None:
        if code >= 400:
            raise BrokenPipeError(32, "Broken pipe")
        send(self, code, *args, **kwargs)

    monkeypatch.setattr(fake_k8s._Handler, "_send", hung_up_on_errors)
    with FakeKubernetes() as fake:
        assert _get(fake, f"/api/v1/namespaces/{NS}/pods/missing/log") == b""
        assert b"200 OK" in _get(fake, "/version")
        assert fake.server.errors == []
        assert [(r["verb"], r["code"]) for r in fake.requests] == [("log", 404)]
    assert "Traceback" not in capfd.readouterr().err


def test_an_unexpected_handler_error_fails_the_owner_of_the_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, *args: Any) -> None:
        raise KeyError("a bug in the fake")

    monkeypatch.setattr(fake_k8s._Handler, "_route", broken)
    with pytest.raises(AssertionError, match=r"handlers failed.*a bug in the fake"), FakeKubernetes() as fake:
        assert _get(fake, "/version") == b""
        assert len(fake.server.errors) == 1


def test_interpreter() -> None:
    program = interpret(["sh", "-c", "echo a b; sleep 1.5 && seq 3; exit 4; echo never"])
    assert (program.logs, program.duration, program.exit_code) == ("a b\n1\n2\n3\n", 1.5, 4)
    assert interpret(["false"]).exit_code == 1 and interpret(["python", "x.py"]).exit_code == 0


def test_runs_as_a_separate_process(tmp_path: Path) -> None:
    with FakeKubernetesProcess(tmp_path / "kc", namespace=NS) as fake:
        api = client.CoreV1Api(config.new_client_from_config(str(fake.kubeconfig)))
        fake.inject(Fault("create", code=500))
        with pytest.raises(client.ApiException):
            api.create_namespaced_pod(NS, pod("r"))
        api.create_namespaced_pod(NS, pod("r"))
        assert [r["code"] for r in fake.creates()] == [500, 201]
        assert [p["metadata"]["name"] for p in fake.pods()] == ["r"]
        api.api_client.close()
