"""Serve an app with a real uvicorn on a free loopback port, in a thread of the test process.

Real HTTP (headers, chunking, Content-Length limits) without a subprocess; the app's lifespan
runs exactly as under ``leoflow serve``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from starlette.applications import Starlette


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(app: Starlette) -> Iterator[str]:
    """Run ``app`` until the block ends; yields its base URL."""
    port = free_port()
    # proxy_headers off, as `leoflow serve` runs (X-Forwarded-For is data, never the peer).
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                            access_log=False, proxy_headers=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def client_for(app: Starlette) -> Iterator[httpx.Client]:
    with serve(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client
