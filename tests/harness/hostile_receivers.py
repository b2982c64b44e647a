"""Webhook receivers that fight back, for the deliverer's tests and the poison benchmark.

Each is a real HTTP server on 127.0.0.1 in a thread of the calling process:

- :class:`SlowDrip` answers ``200`` with a large ``Content-Length`` and then one byte every
  ``every`` seconds: a per-read timeout never fires, only a total deadline ends it. It records
  how long each connection lasted before the client hung up.
- :class:`HugeBody` answers ``200`` with a ``size``-byte body streamed in 64 KiB chunks and
  counts how many bytes it managed to send before the client hung up.

Both stop on their own (``stop`` event, or ``max_seconds``) so a test never leaves a thread
writing forever.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_CHUNK = b"\0" * 65536


@dataclass
class _Receiver:
    url: str = ""
    requests: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def serving(self) -> Iterator[Any]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.requests += 1
                with contextlib.suppress(OSError):
                    receiver.answer(self)
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, name=type(self).__name__, daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        try:
            yield self
        finally:
            self.stop.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


@dataclass
class SlowDrip(_Receiver):
    every: float = 2.0
    max_seconds: float = 120.0
    #: Seconds each connection lasted until the client hung up (or ``max_seconds``).
    held: list[float] = field(default_factory=list)

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        started = time.monotonic()
        try:
            handler.send_response(200)
            handler.send_header("Content-Length", "10000000")
            handler.end_headers()
            handler.wfile.flush()
            while not self.stop.is_set() and time.monotonic() - started < self.max_seconds:
                handler.wfile.write(b"x")
                handler.wfile.flush()
                self.stop.wait(self.every)
        finally:
            with self._lock:
                self.held.append(time.monotonic() - started)


@dataclass
class HugeBody(_Receiver):
    size: int = 200 * 1024 * 1024
    #: Body bytes written to each connection before the client hung up.
    sent: list[int] = field(default_factory=list)

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        written = 0
        try:
            handler.send_response(200)
            handler.send_header("Content-Length", str(self.size))
            handler.end_headers()
            while written < self.size and not self.stop.is_set():
                handler.wfile.write(_CHUNK)
                written += len(_CHUNK)
        finally:
            with self._lock:
                self.sent.append(written)
