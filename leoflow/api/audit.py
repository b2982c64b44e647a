"""The audit log of API writes: every ``admin`` route call by a known token leaves one row.

Two ways a row is written (:mod:`leoflow.db.stores.audit`), so that no write goes unrecorded:

- **with the change**: a write route opens its transaction with :func:`audited_transaction`,
  which inserts the audit row in that same transaction — the change and its record commit
  together or not at all;
- **after the answer**: for every other outcome of an ``admin`` route — refused (403, 4xx),
  failed (503), or a route that writes through another path — :func:`record_outcome`, called by
  the endpoint wrapper once the answer is decided, writes the row in a short transaction of its
  own. If the database is down at that moment the row is lost (the write itself was not made,
  or was recorded in its transaction) and the failure is logged.

A refusal for scope (403: a read token on a write route) is *counted* rather than recorded
(:func:`~leoflow.db.stores.audit.record_denial`): one row per token, route and hour with a
``count``, so a read token cannot fill the audit log by hammering write routes, and the answer
``GET /api/v2/audit`` gives still says how many refusals there were.

Who: the token's *name* (never the token). From where: the peer address of the connection
and, as given (untrusted, clipped), ``X-Forwarded-For`` and ``User-Agent``. Requests without a
valid token are not recorded (they changed nothing, and recording them would let anyone fill
the table); they are counted in ``leoflow_http_requests_total``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from leoflow.api.auth import Principal
from leoflow.db.connection.api_pool import PooledDatabase
from leoflow.db.connection.database import Connection
from leoflow.db.stores import audit as audit_store
from leoflow.db.stores.audit import AuditRecord
from leoflow.errors import DatabaseError

log = logging.getLogger(__name__)

#: Seconds the after-the-answer record may take: the client is waiting for its (decided) answer.
RECORD_TIMEOUT = 5.0


def _db(request: Request) -> PooledDatabase:
    db: PooledDatabase = request.app.state.api.db
    return db


def _entry(request: Request, status: int, *, dag_id: str | None = None, run_id: str | None = None,
           details: dict[str, Any] | None = None) -> AuditRecord | None:
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None:  # refused before it was set: a valid token with the wrong scope is still known
        principal = request.app.state.api.auth.identify(request.headers.get("authorization"))
    if principal is None:
        return None
    route = request.scope.get("route")
    params = request.path_params
    return AuditRecord(
        actor=principal.name, scope=principal.scope, method=request.method,
        route=getattr(route, "path", None) or request.url.path, path=request.url.path, status=status,
        remote_addr=request.client.host if request.client else None,
        forwarded_for=request.headers.get("x-forwarded-for"), user_agent=request.headers.get("user-agent"),
        dag_id=dag_id or params.get("dag_id"), run_id=run_id or params.get("run_id"), details=details or {},
        actor_kind=principal.kind, actor_subject=principal.subject or principal.name,
        team=getattr(request.state, "team", None) or principal.team)


@dataclass
class AuditedWrite:
    """The open transaction of a write and what its audit row will say (settable by the route)."""

    conn: Connection
    status: int
    details: dict[str, Any] = field(default_factory=dict)
    #: The run the write created or touched, when the path does not name it (a trigger).
    run_id: str | None = None


@asynccontextmanager
async def audited_transaction(request: Request, *, status: int = 200, dag_id: str | None = None,
                              run_id: str | None = None) -> AsyncIterator[AuditedWrite]:
    """A write transaction that records its audit row in itself, just before it commits.

    ``status`` is the answer the route gives on success; the block may change it and add
    ``details`` (ids and counts, never bodies) through the yielded :class:`AuditedWrite`.
    """
    async with _db(request).transaction() as conn:
        write = AuditedWrite(conn=conn, status=status, run_id=run_id)
        yield write
        entry = _entry(request, write.status, dag_id=dag_id, run_id=write.run_id, details=write.details)
        if entry is not None:
            await audit_store.record(conn, entry)
            request.state.audited = True


def entry_for(request: Request, status: int, details: dict[str, Any]) -> AuditRecord | None:
    """The audit row of a write that a shared transaction records with others (a batch of dataset
    events, :mod:`leoflow.api.event_batches`); set ``request.state.audited`` once it committed."""
    return _entry(request, status, details=details)


async def record_outcome(request: Request, status: int) -> None:
    """The row for a write whose transaction did not record one (see the module docstring)."""
    if getattr(request.state, "audited", False) and 200 <= status < 300:
        return
    entry = _entry(request, status)
    if entry is None:
        return
    try:
        async with asyncio.timeout(RECORD_TIMEOUT), _db(request).transaction() as conn:
            if status == 403:
                await audit_store.record_denial(conn, entry)
            else:
                await audit_store.record(conn, entry)
    except (DatabaseError, TimeoutError) as exc:
        log.error("audit event not recorded", extra={"actor": entry.actor, "route": entry.route,
                                                     "status": status, "error": str(exc)[:200]})
