"""What every API route shares: auth, the error boundary, timeouts and request parsing.

A route handler is a plain ``async def handler(request) -> Response``; :func:`endpoint` wraps
it so that the token is checked first (scope per route), the handler runs under a deadline
(a wedged database never pins a request forever), and every exception becomes the JSON error
envelope via :func:`leoflow.api.errors.translate`. Handlers therefore raise, never build
error responses themselves. Writes (``admin`` routes other than GET) are audited
(:mod:`leoflow.api.audit`): in the route's own transaction when it uses
:func:`~leoflow.api.audit.audited_transaction`, otherwise here once the answer is decided.

A handler makes its writes in one transaction. When PostgreSQL rolls that transaction back for
meeting a concurrent one (a deadlock with the leader's scheduler or executor on the same rows,
which row-lock in their own order), the handler runs again, up to :data:`WRITE_ATTEMPTS` times:
nothing of the failed attempt was kept, so the user gets the answer instead of a 503 for a
conflict the server can resolve by itself.

Parsing helpers raise :class:`~leoflow.api.errors.ApiError` naming the field: request bodies
(JSON, or YAML with ``Content-Type: application/yaml``) are read with a byte limit
(``LEOFLOW_MAX_BODY_BYTES`` → 413), and a YAML body must have string keys everywhere, as JSON
does (a ``1: x`` key is a 422 naming its path, not a ``TypeError`` where keys are sorted).
Path and query parameters are parsed by :mod:`leoflow.api.url_params`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import random
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Send
from starlette.types import Scope as AsgiScope

from leoflow.api.access import AccessControl
from leoflow.api.audit import record_outcome
from leoflow.api.auth import Authenticator, Scope
from leoflow.api.errors import ApiError, bad_field, error_response, translate
from leoflow.db.connection.api_pool import PooledDatabase
from leoflow.election.health import ElectionHealth
from leoflow.errors import ValidationFailed, WriteConflict
from leoflow.model.access.roles import Action
from leoflow.model.bounds import check_document_shape, check_string_keys
from leoflow.model.files.yaml_loader import YamlRejected, load_yaml
from leoflow.model.limits import DOCUMENT, PAGE_LIMIT
from leoflow.model.live_logs import LiveLogs
from leoflow.settings import Settings

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]

#: Runs of a handler whose transaction PostgreSQL rolled back for a concurrent one (then 503).
WRITE_ATTEMPTS = 3
#: Seconds before the second run; each later pause is twice the last, each with jitter.
WRITE_RETRY_PAUSE = 0.02

MAX_LIMIT = int(PAGE_LIMIT.maximum)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
JSON_TYPES = ("application/json", "")
#: Bodies up to this size are decoded on the event loop (a few milliseconds); larger ones on a
#: worker thread: bounded YAML reads about 2.5 MB/s on a loaded 2-core host, so a 1 MiB
#: body would otherwise stall every request of this replica for seconds.
INLINE_DECODE_BYTES = 16 * 1024


@dataclass(frozen=True)
class ApiState:
    """Per-app state the handlers need (held in ``app.state.api``)."""

    settings: Settings
    #: The API's connections (its share of LEOFLOW_DB_POOL_SIZE): ``db.transaction()`` for
    #: writes, ``db.connect()`` for reads, ``db.raw()`` for the hot read rendered by PostgreSQL.
    db: PooledDatabase
    auth: Authenticator
    #: Deadline for one request's database work: the statement timeout plus connect slack.
    request_timeout: float
    #: Why this replica's elector refuses to contend, if it does (None outside a replica).
    election_health: ElectionHealth | None = None
    #: Reads running pods' logs (None when the executor stores output as it grows).
    live_logs: LiveLogs | None = None
    #: Who may do what (teams and roles); None only in apps built without it (every caller admin).
    access: AccessControl | None = None


def api_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.api
    return state


class Endpoint:
    """A route's handler as the ASGI app Starlette calls: auth, the deadline, the error boundary.

    An ASGI app rather than a ``request -> response`` function, so Starlette's router calls it
    directly: its ``request_response`` adapter would add two closures, an exception-handler
    wrapper and one more ``send`` layer to every request, for exceptions that never get there
    (every ``Exception`` of a handler becomes an answer here). ``bench/api.py``, issue 21.
    """

    def __init__(self, handler: Handler, needed: Scope, action: Action | None = None) -> None:
        self.handler = handler
        self.needed = needed
        #: What the caller must be allowed (leoflow.api.access), decided before the handler runs.
        self.action = action

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        response = await self.answer(Request(scope, receive, send))
        await response(scope, receive, send)

    async def answer(self, request: Request) -> Response:
        """The handler's response, or the error envelope for whatever it raised."""
        needed = self.needed
        try:
            state = api_state(request)
            async with asyncio.timeout(state.request_timeout):
                # Authentication here (401); authorization by role and team below (403/404).
                principal = await state.auth.authenticate(request.headers.get("authorization"),
                                                          "read" if needed == "admin" else needed)
                request.state.principal = principal
                if self.action is not None and needed != "open" and state.access is not None:
                    await state.access.check(request, principal, self.action)
                response = await self._run(request)
        except Exception as exc:  # the one boundary where every failure becomes an answer
            response = error_response(translate(exc))
        if needed == "admin" and request.method not in ("GET", "HEAD"):
            await record_outcome(request, response.status_code)
        return response

    async def _run(self, request: Request) -> Response:
        """The handler, run again when its transaction met a concurrent one (see the module)."""
        for attempt in range(1, WRITE_ATTEMPTS):
            try:
                return await self.handler(request)
            except WriteConflict as exc:
                log.info("write met a concurrent one; running it again",
                         extra={"path": request.url.path, "attempt": attempt, "error": str(exc)[:200]})
                await asyncio.sleep(WRITE_RETRY_PAUSE * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))
        return await self.handler(request)  # the last attempt: what it raises is the answer


def endpoint(handler: Handler, needed: Scope, action: Action | None = None) -> Endpoint:
    """``handler`` with auth for scope ``needed``, authorization for ``action`` and the error boundary."""
    return Endpoint(handler, needed, action)


# --------------------------------------------------------------------------- bodies

def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _decode(raw: bytes, ctype: str, limit: int) -> Any:
    """Bytes to a document, bounded (see :mod:`leoflow.model.files.yaml_loader`); ApiError naming ``body``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_field("body", "is not valid UTF-8") from None
    if ctype in YAML_TYPES:
        try:
            document = load_yaml(text, max_bytes=limit)
        except YamlRejected as exc:
            where = {"line": exc.line, "column": exc.column} if exc.line is not None else {}
            if exc.too_large:
                raise ApiError(413, f"body: {exc} (LEOFLOW_MAX_BODY_BYTES)", details={"field": "body", **where}) \
                    from None
            raise ApiError(400, f"body: is not valid YAML ({exc})", details={"field": "body", **where}) from None
        check_string_keys(document, "")  # as JSON's: a 422 naming the key's path
        return document
    if ctype in JSON_TYPES or ctype.endswith("+json"):
        try:
            document = json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            raise ApiError(400, f"body: is not valid JSON ({exc})",
                           details={"field": "body", "line": exc.lineno, "column": exc.colno}) from None
        except ValueError as exc:
            raise bad_field("body", f"is not valid JSON ({exc})") from None
        except RecursionError:
            raise bad_field("body", f"is nested more than {DOCUMENT.max_depth} levels deep") from None
        try:
            check_document_shape(document, "body", DOCUMENT)
        except ValidationFailed as exc:
            raise bad_field("body", exc.problem) from None
        return document
    raise ApiError(415, f"Content-Type {ctype!r} is not supported; send application/json or application/yaml")


class _CollectorPause:
    """Pauses Python's cyclic garbage collector while large bodies are decoded (reentrant).

    Building a 1 MiB document allocates about a million objects; the collector's full passes
    over a heap growing that fast hold the GIL for 100-200 ms each, which is what the event
    loop then waits for (measured: 180 ms gaps with the collector, 30 ms without, and the
    decode itself 40% faster). Reference counting still frees everything; cycles wait the
    second or two until the collector resumes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._resume = False

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._resume:
                    gc.enable()


_COLLECTOR = _CollectorPause()


def _decode_large(raw: bytes, ctype: str, limit: int) -> Any:
    with _COLLECTOR.held():
        return _decode(raw, ctype, limit)


async def read_document(request: Request, *, limit: int | None = None,
                        setting: str = "LEOFLOW_MAX_BODY_BYTES") -> Any:
    """The request body parsed as JSON or YAML (None when empty); 400/413/415 on bad input.

    Bodies above :data:`INLINE_DECODE_BYTES` are decoded on a worker thread, so one large
    body does not stall every other request this replica serves (its /healthz included).
    ``limit`` (named by ``setting`` in the 413) replaces ``LEOFLOW_MAX_BODY_BYTES`` for a route
    whose body is legitimately larger than every other's: the DAG sync.
    """
    limit = api_state(request).settings.api.max_body_bytes if limit is None else limit
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            too_big = int(declared) > limit
        except ValueError:
            raise bad_field("Content-Length", "must be an integer") from None
        if too_big:
            raise ApiError(413, f"request body exceeds {limit} bytes ({setting})")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body exceeds {limit} bytes ({setting})")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return None
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if len(raw) <= INLINE_DECODE_BYTES:
        return _decode(raw, ctype, limit)
    return await run_in_threadpool(_decode_large, raw, ctype, limit)


def require_object(document: Any, field: str = "body") -> dict[str, Any]:
    if not isinstance(document, dict):
        raise bad_field(field, "must be an object", status=422)
    return document
