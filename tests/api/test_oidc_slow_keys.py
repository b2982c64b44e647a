"""A slow JWKS endpoint does not stall the replica: a token whose keys must be fetched is verified off
the event loop, so ``/healthz`` (and every other caller) keeps answering while the provider dawdles.

Real uvicorn, real PostgreSQL; the provider is a loopback HTTP server whose JWKS answers after
:data:`JWKS_DELAY` seconds (under the fetch timeout, so the fetch does complete).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from leoflow.api.app import create_app
from tests.api.conftest import api_settings
from tests.api.live import client_for

#: Seconds the JWKS takes to answer (FETCH_TIMEOUT is 3 s).
JWKS_DELAY = 2.0


class SlowProvider(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.jwks_started: list[float] = []

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: SlowProvider

    def do_GET(self) -> None:  # the http.server protocol names it
        if self.path == "/.well-known/openid-configuration":
            body = {"issuer": self.server.issuer, "jwks_uri": self.server.issuer + "/jwks"}
        else:
            self.server.jwks_started.append(time.monotonic())
            time.sleep(JWKS_DELAY)
            body = {"keys": []}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_provider() -> Iterator[SlowProvider]:
    server = SlowProvider()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _jwt(kid: str) -> str:
    def part(doc: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'RS256', 'kid': kid, 'typ': 'JWT'})}.{part({'sub': 'x'})}.c2ln"


def test_a_slow_jwks_does_not_stall_healthz(database_url: str, slow_provider: SlowProvider) -> None:
    settings = api_settings(database_url, LEOFLOW_OIDC_ISSUER=slow_provider.issuer, LEOFLOW_OIDC_AUDIENCE="leoflow",
                            LEOFLOW_OIDC_KEYS_MIN_INTERVAL="0.1")
    with client_for(create_app(settings)) as client, ThreadPoolExecutor(2) as pool:
        assert client.get("/healthz").status_code == 200
        rounds = []
        for kid in ("first", "rotated"):  # the first fetch, then an unknown kid's refetch
            before = len(slow_provider.jwks_started)
            pending = pool.submit(client.get, "/api/v2/dags", headers={"Authorization": f"Bearer {_jwt(kid)}"})
            deadline = time.monotonic() + 5
            while len(slow_provider.jwks_started) == before:  # the fetch is under way
                assert time.monotonic() < deadline, "the JWKS was never fetched"
                time.sleep(0.01)
            slowest = 0.0
            while not pending.done():
                started = time.monotonic()
                assert client.get("/healthz").status_code == 200
                slowest = max(slowest, time.monotonic() - started)
                time.sleep(0.05)
            answer = pending.result()
            assert answer.status_code == 401  # no such key: refused, after the fetch
            assert time.monotonic() - slow_provider.jwks_started[-1] >= JWKS_DELAY * 0.9
            rounds.append(slowest)
        # Blocked, /healthz would wait the whole JWKS delay; off the loop it answers in milliseconds.
        assert max(rounds) < JWKS_DELAY / 4, rounds
        answer = httpx.get(client.base_url.join("/healthz"), timeout=5)
        assert answer.status_code == 200
