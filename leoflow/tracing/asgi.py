"""A span per API request (pure ASGI; added to the app only when tracing is on).

The span is emitted when the response has been sent, named ``HTTP <METHOD> <route template>``
(``/api/v2/dags/{dag_id}/runs/{run_id}``, never the raw path: one name per route, so a tracing
tool's index stays small; the raw path is the ``url.path`` attribute). Its parent, in order:

1. the caller's W3C ``traceparent`` header, when it is valid (the request joins the caller's
   trace; a link points at the run's span when the request names a run);
2. else the span of the run the request names (path parameters ``dag_id`` and ``run_id``, or the
   run a trigger just created, :func:`request_names_run`): requests about a run join its trace;
3. else none (a trace of its own).

Liveness and readiness probes and metric scrapes (:data:`UNTRACED_PATHS`) are not traced.
"""

from __future__ import annotations

import contextvars
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from leoflow.tracing import _emit, enabled, ids

#: Probes and scrapes: a span every few seconds per replica that says nothing about any run.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

#: The run the current request created or addressed, for endpoints whose path does not name it.
_NAMED_RUN: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar("leoflow_request_run",
                                                                                         default=None)


def request_names_run(dag_id: str, run_id: str) -> None:
    """Tell the request's span which run it is about (the trigger endpoint: the run it created)."""
    named = _NAMED_RUN.get()
    if named is not None:
        named.append((dag_id, run_id))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


class RequestSpans:
    """Emits one server span per HTTP request (see the module docstring for its parent)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not enabled() or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        start = time.time_ns()
        status = 500
        named: list[tuple[str, str]] = []
        token = _NAMED_RUN.set(named)

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            _NAMED_RUN.reset(token)
            self._emit(scope, start, status, named)

    @staticmethod
    def _emit(scope: Scope, start: int, status: int, named: list[tuple[str, str]]) -> None:
        template = getattr(scope.get("route"), "path", None) or "(unmatched)"
        params = scope.get("path_params") or {}
        run = named[-1] if named else (
            (str(params["dag_id"]), str(params["run_id"])) if "dag_id" in params and "run_id" in params else None)
        incoming = ids.parse_traceparent(_header(scope, b"traceparent") or "")
        attributes: dict[str, str | int] = {"http.request.method": scope["method"], "http.route": template,
                                            "url.path": scope["path"][:512], "http.response.status_code": status}
        links: list[tuple[int, int]] = []
        if run is not None:
            attributes["leoflow.dag_id"], attributes["leoflow.run_id"] = run
            run_span = (ids.run_trace_id(*run), ids.run_span_id(*run))
        if incoming is not None:
            trace_id, parent = incoming[0], incoming[1]
            if run is not None:
                links.append(run_span)
        elif run is not None:
            trace_id, parent = run_span
        else:
            trace_id, parent = 0, None
        _emit(f"HTTP {scope['method']} {template}", trace_id=trace_id, span_id=0, parent_span_id=parent,
              start_ns=start, end_ns=time.time_ns(), attributes=attributes, kind="server",
              error=f"HTTP {status}" if status >= 500 else None, links=links)
