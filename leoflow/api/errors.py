"""The API's error envelope and the translation of every failure into it.

Every error answer has the same shape, ``{"error": {"code", "message", "details"}}``, so clients
(the CLI, the dashboard, scripts) parse one format. Translation happens at one boundary,
:func:`translate`, called by the endpoint wrapper in :mod:`leoflow.api.endpoint`:

- Leoflow's own errors map by type: ``NotFound`` → 404, ``Conflict`` → 409,
  ``ValidationFailed`` → 422 with ``details.field`` naming the offending path,
  ``ValueRejected`` → 400; a rejected set of DAG files → 422 (or 409 when the DAGs belong to
  another sync source) with ``details.errors`` listing every problem.
- A database that cannot be reached, a pool that stays exhausted, a statement, lock or request
  timeout, a schema older than this build → 503 with ``Retry-After``: the client should retry,
  possibly on another replica. (Driver errors never get here raw: :mod:`leoflow.db.connection.driver_errors`
  translates them at the data layer's boundary.)
- Anything else is a bug in Leoflow, never the client's fault: 500 with a generic message (the
  traceback goes to the log, not to the client).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.jsonresp import JsonResponse
from leoflow.errors import (
    Conflict,
    DagFilesRejected,
    DagOwnershipConflict,
    DatabaseUnavailable,
    LockTimeout,
    NotFound,
    SchemaNotCurrent,
    ValidationFailed,
    ValueRejected,
)

logger = logging.getLogger(__name__)

#: Seconds a client is told to wait after a 503; short, because a restarted database or a
#: failed-over load balancer target is usually back within seconds.
RETRY_AFTER_SECONDS = 5
#: How much of a request's path an error message repeats (paths of real routes are shorter).
_SHOWN_PATH = 300

_HTTP_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
    415: "unsupported_media_type", 422: "validation_failed", 500: "internal_error",
    503: "database_unavailable",
}


class ApiError(Exception):
    """An error answer decided by a route (bad parameter, missing token, ...)."""

    def __init__(self, status: int, message: str, *, code: str | None = None, details: Any = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _HTTP_CODES.get(status, "error")
        self.message = message
        self.details = details
        self.headers = headers or {}


def bad_field(field: str, problem: str, *, status: int = 400) -> ApiError:
    """A 400/422 naming the offending field (query parameter or body path)."""
    return ApiError(status, f"{field}: {problem}" if field else problem, details={"field": field})


def error_response(error: ApiError) -> Response:
    body = {"error": {"code": error.code, "message": error.message, "details": error.details}}
    return JsonResponse(body, status_code=error.status, headers=error.headers)


def unavailable(message: str) -> ApiError:
    return ApiError(503, message, code="database_unavailable",
                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def translate(exc: BaseException) -> ApiError:
    """Map any exception raised while serving a request to the answer the client gets."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ValidationFailed):
        error = bad_field(exc.path, exc.problem, status=422)
        if exc.also:  # every problem found, the first one again at the head: ``details.field`` stays the first's
            error.details["errors"] = [{"field": e.path, "message": e.problem} for e in (exc, *exc.also)]
        return error
    if isinstance(exc, DagFilesRejected):
        return ApiError(409 if isinstance(exc, DagOwnershipConflict) else 422, str(exc),
                        details={"errors": exc.problems})
    if isinstance(exc, NotFound):
        return ApiError(404, str(exc))
    if isinstance(exc, Conflict):
        return ApiError(409, str(exc))
    if isinstance(exc, ValueRejected):
        return ApiError(400, "a value in the request is not acceptable to the database")
    if isinstance(exc, SchemaNotCurrent):
        logger.error("database schema is not at head while serving a request")
        return unavailable("the database schema is not current; run `leoflow db upgrade`")
    if isinstance(exc, DatabaseUnavailable | LockTimeout):
        logger.warning("database unavailable while serving a request", extra={"error": str(exc)[:200]})
        return unavailable(str(exc))
    if isinstance(exc, TimeoutError):
        return unavailable("the database did not answer in time")
    logger.error("unexpected error while serving a request", exc_info=exc)
    return ApiError(500, "internal error (the server log has details)")


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route) and 405 (wrong method) in the envelope."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    path = request.url.path  # the client's own text, so cut to a readable length like every echoed value
    path = path if len(path) <= _SHOWN_PATH else path[:_SHOWN_PATH] + "..."
    message = {404: f"no route for {path}", 405: f"method {request.method} not allowed on {path}"}.get(
        exc.status_code, str(exc.detail))
    return error_response(ApiError(exc.status_code, message, headers=headers))
