"""An idempotent call meets a 503 and is tried again, a bounded number of times; a POST never is.

A stand-in server (the standard library's, in a thread) answers a scripted list of statuses and
counts the requests, so the test sees exactly how many tries the client made and how long it
paused between them. The live server is not needed here: what is under test is the client's
policy, not the API.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from leoflow.client import ApiUnavailable, AsyncClient, Client, ClientError

HEALTHY = json.dumps({"status": "ok"}).encode()
UNAVAILABLE = json.dumps({"error": {"code": "unavailable", "message": "database restarting", "details": None}}).encode()


class Script:
    """The statuses the stand-in answers, in order (the last one repeats), and the requests it saw."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.seen: list[tuple[str, float]] = []

    def next_status(self, method: str) -> int:
        self.seen.append((method, time.monotonic()))
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]


@contextmanager
def stand_in(script: Script) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            status = script.next_status(self.command)
            body = HEALTHY if status < 300 else UNAVAILABLE
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_get_is_retried_through_503s_with_growing_pauses() -> None:
    script = Script(503, 503, 200)
    with stand_in(script) as url, Client(url, "t", backoff=0.05) as client:
        assert client.liveness().status == "ok"
    times = [t for _, t in script.seen]
    assert len(times) == 3
    first, second = times[1] - times[0], times[2] - times[1]
    assert first >= 0.035 and second >= 0.07  # 0.05 then 0.1, each ±25 % jitter


def test_the_retries_are_bounded() -> None:
    script = Script(503)
    with stand_in(script) as url, Client(url, "t", retries=2, backoff=0.01) as client, \
            pytest.raises(ApiUnavailable, match="database restarting"):
        client.liveness()
    assert len(script.seen) == 3  # the call and two retries


def test_a_post_is_never_repeated() -> None:
    """The first POST may have been applied before the 503 (a run triggered twice is two runs)."""
    script = Script(503, 200)
    with stand_in(script) as url, Client(url, "t", backoff=0.01) as client, pytest.raises(ApiUnavailable):
        client.trigger_run("etl")
    assert [m for m, _ in script.seen] == ["POST"]


def test_a_refused_first_connection_is_said_at_once() -> None:
    """Nothing listens there: a wrong LEOFLOW_URL, not an outage to wait out."""
    with stand_in(Script(200)) as url:
        pass  # the port is free again
    started = time.monotonic()
    with Client(url, "t", backoff=1.0) as client, pytest.raises(ApiUnavailable, match="connection refused"):
        client.liveness()
    assert time.monotonic() - started < 0.9


def test_the_async_client_retries_alike() -> None:
    script = Script(503, 503, 200, 503)

    async def scenario(url: str) -> None:
        async with AsyncClient(url, "t", backoff=0.01) as client:
            assert (await client.liveness()).status == "ok"
            with pytest.raises(ApiUnavailable):
                await client.trigger_run("etl")

    with stand_in(script) as url:
        asyncio.run(scenario(url))
    assert [m for m, _ in script.seen] == ["GET", "GET", "GET", "POST"]


def test_configuration_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    from leoflow.client.typed import DEFAULT_URL, endpoint_from_environment
    from leoflow.settings import declared

    assert declared.URL.default == DEFAULT_URL
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert endpoint_from_environment(env={}) == (DEFAULT_URL, None)
    assert endpoint_from_environment(env={"LEOFLOW_URL": "http://h:1", "LEOFLOW_TOKEN": "tok"}) == ("http://h:1", "tok")
    assert endpoint_from_environment("http://x:2", "given", env={"LEOFLOW_TOKEN": "tok"}) == ("http://x:2", "given")
    from leoflow.client import credentials

    credentials.save("http://h:1", {"bearer": "stored", "expires_at": time.time() + 3600})
    assert endpoint_from_environment(env={"LEOFLOW_URL": "http://h:1"}) == ("http://h:1", "stored")
    with pytest.raises(ClientError, match="LEOFLOW_URL"):
        Client("ftp://nowhere")


def test_a_body_json_cannot_carry_is_a_clear_error_before_any_request() -> None:
    script = Script(200)
    with stand_in(script) as url, Client(url, "t") as client:
        with pytest.raises(ClientError, match=r"trigger_run: the request body cannot be sent as JSON .*set"):
            client.trigger_run("etl", conf={"ids": {1, 2}})
        with pytest.raises(ClientError, match=r"cannot be sent as JSON \(Out of range float"):
            client.trigger_run("etl", run_timeout_seconds=float("nan"))
    assert script.seen == []
