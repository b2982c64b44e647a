"""The API's error envelope and the translation of every failure into it.

Every error answer has the same shape, ``{"error": {"code", "message", "details"}}``, so clients
(the CLI, the dashboard, scripts) parse one format. Translation happens at one boundary,
:func:`translate`, called by the endpoint wrapper in :mod:`leoflow.api.endpoint`:

- Leoflow's own errors map by type: ``NotFound`` → 404, ``Conflict`` → 409,
  ``ValidationFailed`` → 422 with ``details.field`` naming the offending path,
  ``DatabaseUnavailable`` → 503.
- A database that cannot be reached, a pool that stays exhausted, a statement or request
  timeout → 503 with ``Retry-After``: the client should retry, possibly on another replica.
- Anything else is a bug in Leoflow, never the client's fault: 500 with a generic message (the
  traceback goes to the log, not to the client).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg.errors
import psycopg_pool
import sqlalchemy.exc
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.jsonresp import JsonResponse
from leoflow.errors import Conflict, DatabaseUnavailable, NotFound, SchemaNotCurrent, ValidationFailed

logger = logging.getLogger(__name__)

#: Seconds a client is told to wait after a 503; short, because a restarted database or a
#: failed-over load balancer target is usually back within seconds.
RETRY_AFTER_SECONDS = 5

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


def _is_unreachable(exc: BaseException) -> bool:
    """True for errors that mean "the database is not answering", not "the SQL is wrong".

    Covers both SQLAlchemy's wrapped errors and raw psycopg/psycopg_pool ones (hot reads run on
    psycopg directly): a lost or refused connection, a pool timeout, a cancelled statement.
    """
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError
                      | psycopg.OperationalError | psycopg.InterfaceError)


def translate(exc: BaseException) -> ApiError:
    """Map any exception raised while serving a request to the answer the client gets."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ValidationFailed):
        return bad_field(exc.path, exc.problem, status=422)
    if isinstance(exc, NotFound):
        return ApiError(404, str(exc))
    if isinstance(exc, Conflict):
        return ApiError(409, str(exc))
    if isinstance(exc, DatabaseUnavailable | SchemaNotCurrent):
        return unavailable(str(exc))
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return unavailable("the database did not answer in time")
    # SQLAlchemy wraps what psycopg raised in ``.orig``; hot reads raise psycopg's errors bare.
    driver_error = getattr(exc, "orig", None) or exc
    if isinstance(exc, sqlalchemy.exc.TimeoutError) or isinstance(driver_error, psycopg_pool.PoolTimeout):
        return unavailable("no database connection became free in time (pool exhausted or database down)")
    if isinstance(driver_error, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        logger.error("database schema is not at head while serving a request")
        return unavailable("the database schema is not current; run `leoflow db upgrade`")
    if _is_unreachable(exc):
        logger.warning("database unavailable while serving a request",
                       extra={"error": type(driver_error).__name__})
        return unavailable("the database is unavailable")
    if isinstance(exc, sqlalchemy.exc.DataError | psycopg.DataError):
        return ApiError(400, "a value in the request is not acceptable to the database")
    if isinstance(exc, sqlalchemy.exc.IntegrityError | psycopg.IntegrityError):
        return ApiError(409, "the request conflicts with existing state")
    logger.error("unexpected error while serving a request", exc_info=exc)
    return ApiError(500, "internal error (the server log has details)")


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route) and 405 (wrong method) in the envelope."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    message = {404: f"no route for {request.url.path}",
               405: f"method {request.method} not allowed on {request.url.path}"}.get(
        exc.status_code, str(exc.detail))
    return error_response(ApiError(exc.status_code, message, headers=headers))
