"""ASGI middleware of the API: request metrics by route template, and the hot routes' shortcut.

Pure ASGI rather than ``BaseHTTPMiddleware``: it adds no task or queue per request (the API's
hot path is small and measured by ``bench/api.py``). The route template is read from
``scope["route"]``, which Starlette's router sets on the shared scope once a route matches.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from starlette.routing import Match, Route
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


class HotRoutes:
    """Hands the hottest GET routes straight to their endpoint, past the rest of the stack.

    Below this sit Starlette's exception middleware and router; for a route whose app is an
    :class:`~leoflow.api.endpoint.Endpoint` (which answers every ``Exception`` itself) they only
    add wrappers and ``send`` layers per request. Matching is the route's own ``matches`` (the
    router's regex, convertors and ``root_path`` handling) and sets the scope the router would
    (``route``, ``endpoint``, ``path_params``); anything else goes on down the stack unchanged,
    HEAD included (issue 21, ``bench/api.py``).
    """

    def __init__(self, app: ASGIApp, routes: Sequence[Route]) -> None:
        self.app = app
        assert all(route.methods == {"GET", "HEAD"} for route in routes), "GET routes only"
        self.routes = tuple(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            for route in self.routes:
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    scope["route"] = route
                    scope.update(child_scope)
                    await route.app(scope, receive, send)
                    return
        await self.app(scope, receive, send)
