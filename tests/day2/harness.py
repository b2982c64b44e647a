"""Helpers for the day-2 tests: a leader with the day-2 services, and a webhook receiver.

:func:`leader` runs the scheduler (with the executor the test chooses) *and* the backfill
service, the outcome observer and the webhook deliverer under one term, as a replica's leader
does. :class:`WebhookReceiver` is a real HTTP server in the test process that records every
delivery and can be told to fail the first N of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.aiotasks import cancel_and_wait, start_guarded
from leoflow.backfill.service import BackfillService
from leoflow.executor.base import Executor
from leoflow.notify.deliverer import WebhookDeliverer
from leoflow.notify.observer import OutcomeObserver
from leoflow.settings import Settings
from tests.scheduler.harness import RunningScheduler, running_scheduler

#: ``LEOFLOW_NOTIFY_ALLOWED_HOSTS`` of tests whose receivers listen on this machine (refused by default).
LOOPBACK = "public,127.0.0.1"


@contextlib.asynccontextmanager
async def leader(settings: Settings, executor: Executor, *, engine: AsyncEngine, term: int = 1,
                 services: tuple[str, ...] = ("backfill", "observer", "deliverer"),
                 interval: float = 0.05, deliverer: WebhookDeliverer | None = None) -> AsyncIterator[RunningScheduler]:
    """The scheduler plus the chosen day-2 services, polling every ``interval`` seconds."""
    async with running_scheduler(settings, executor, term=term, engine=engine) as sched:
        chosen: dict[str, BackfillService | OutcomeObserver | WebhookDeliverer] = {
            "backfill": BackfillService(interval=interval), "observer": OutcomeObserver(interval=interval),
            "deliverer": deliverer or WebhookDeliverer(interval=interval)}
        tasks = [start_guarded(chosen[name].run(sched.ctx), f"test-{name}") for name in services]
        try:
            yield sched
        finally:
            await cancel_and_wait(tasks)


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    """Records POSTs; answers ``fail_status`` to the first ``fail_first`` of them, 200 after."""

    fail_first: int = 0
    fail_status: int = 500
    deliveries: list[Delivery] = field(default_factory=list)
    attempts: int = 0
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def accepted(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    @contextlib.contextmanager
    def serving(self) -> Iterator[WebhookReceiver]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.attempts += 1
                    failing = receiver.attempts <= receiver.fail_first
                    if not failing:
                        receiver.deliveries.append(Delivery(self.path, dict(self.headers.items()), body))
                status = receiver.fail_status if failing else 200
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"nope" if failing else b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


async def wait_for(predicate: Any, *, timeout: float = 30.0, every: float = 0.05) -> None:
    """Poll a synchronous or async ``predicate()`` until it is true (fails after ``timeout``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if loop.time() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s")
        await asyncio.sleep(every)
