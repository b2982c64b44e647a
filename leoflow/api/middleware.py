"""ASGI middleware of the API: request metrics by route template.

Pure ASGI rather than ``BaseHTTPMiddleware``: it adds no task or queue per request (the API's
hot path is small and measured by ``bench/api.py``). The route template is read from
``scope["route"]``, which Starlette's router sets on the shared scope once a route matches.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from leoflow.metrics.http import UNMATCHED_ROUTE, observe_request


class RequestMetrics:
    """Counts and times every HTTP request by method, route template and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED_ROUTE
            observe_request(scope["method"], template, status, time.perf_counter() - started)
