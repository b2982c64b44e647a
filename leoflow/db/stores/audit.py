"""The audit log: one row per API write (who, what, when, from where, with which outcome).

Rows are written by the API (:mod:`leoflow.api.audit`): inside the write's own transaction when
the route commits one (the record and the change commit together, or neither does), else in a
short transaction of its own right after the answer is decided (refused writes: 4xx, a 503).
Refused writes (403: a read token on a write route) are *counted*, not recorded one by one
(:func:`record_denial`): one row per token, method, route, status and :data:`DENIAL_WINDOW`, its
``count`` raised by an upsert, so a read token hammering write routes adds at most one row per
route an hour however many requests it sends (the rows are bounded by the configured tokens and
the route table: unknown tokens are never recorded) — and no refusal goes uncounted.

Nothing here holds request bodies: ``details`` carries ids and counts chosen by the route,
never a run's ``conf`` or a spec (they may hold data the reader of the audit log should not
see).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass(frozen=True)
class AuditRecord:
    actor: str
    scope: str
    method: str
    route: str
    path: str
    status: int
    remote_addr: str | None = None
    forwarded_for: str | None = None
    user_agent: str | None = None
    dag_id: str | None = None
    run_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    #: How the writer proved who it is (static, token, oidc, anonymous), a stable id for it (a
    #: token's id, an OIDC ``sub``) and the team the write concerned.
    actor_kind: str | None = None
    actor_subject: str | None = None
    team: str | None = None


#: Seconds of refusals one counted row holds: an hour keeps a year of a token hammering a write
#: route to 8,760 rows, while ``ts``/``last_ts`` still bound each burst within its hour.
DENIAL_WINDOW = 3600


def _clip(value: str | None, size: int) -> str | None:
    return None if value is None else value[:size]


def _values(entry: AuditRecord) -> dict[str, Any]:
    return {"actor": entry.actor[:100], "scope": entry.scope[:10], "method": entry.method[:10],
            "route": entry.route[:200], "path": entry.path[:1000], "status": entry.status,
            "remote_addr": _clip(entry.remote_addr, 100), "forwarded_for": _clip(entry.forwarded_for, 300),
            "user_agent": _clip(entry.user_agent, 300), "dag_id": _clip(entry.dag_id, 50),
            "run_id": _clip(entry.run_id, 250), "details": json.dumps(entry.details, default=str),
            "actor_kind": _clip(entry.actor_kind, 10), "actor_subject": _clip(entry.actor_subject, 200),
            "team": _clip(entry.team, 50)}


async def record(conn: AsyncConnection, entry: AuditRecord) -> None:
    await conn.execute(text("""
        INSERT INTO audit_events (actor, scope, method, route, path, status, remote_addr, forwarded_for, user_agent,
                                  dag_id, run_id, details, actor_kind, actor_subject, team)
        VALUES (:actor, :scope, :method, :route, :path, :status, :remote_addr, :forwarded_for, :user_agent,
                :dag_id, :run_id, CAST(:details AS jsonb), :actor_kind, :actor_subject, :team)
    """), _values(entry))


_MANY = text("""
    INSERT INTO audit_events (actor, scope, method, route, path, status, remote_addr, forwarded_for, user_agent,
                              dag_id, run_id, details, actor_kind, actor_subject, team)
    SELECT actor, scope, method, route, path, status, remote_addr, forwarded_for, user_agent,
           dag_id, run_id, details, actor_kind, actor_subject, team
    FROM ROWS FROM (jsonb_to_recordset(CAST(:rows AS jsonb)) AS (
        actor text, scope text, method text, route text, path text, status int, remote_addr text,
        forwarded_for text, user_agent text, dag_id text, run_id text, details jsonb, actor_kind text,
        actor_subject text, team text)) WITH ORDINALITY AS r(
        actor, scope, method, route, path, status, remote_addr, forwarded_for, user_agent, dag_id, run_id,
        details, actor_kind, actor_subject, team, n)
    ORDER BY n
""")


async def record_many(conn: AsyncConnection, requests: Sequence[tuple[AuditRecord, Sequence[dict[str, Any]]]]) -> None:
    """One statement for several requests' rows: per ``(entry, details_list)``, one row of
    ``entry`` for each ``details`` in turn (in order: ids follow the list).

    Why: a group commit of a thousand dataset events wrote a thousand single-row inserts, a round
    trip each — most of the batch's time under load, longer than its commit; and a request's
    common columns are clipped once, not once per row.
    """
    rows = []
    for entry, each in requests:
        values = _values(entry)
        rows += [{**values, "details": details} for details in each]
    if rows:
        await conn.execute(_MANY, {"rows": json.dumps(rows, default=str)})


# The window is cut from the database's clock (every replica counts into the same row); the
# row keeps the first refusal's path, target and client, and counts the others.
_DENIAL = text("""
    WITH now AS (SELECT clock_timestamp() AS at)
    INSERT INTO audit_events (actor, scope, method, route, path, status, remote_addr, forwarded_for, user_agent,
                              dag_id, run_id, details, actor_kind, actor_subject, team, ts, last_ts, denial_window)
    SELECT :actor, :scope, :method, :route, :path, :status, :remote_addr, :forwarded_for, :user_agent,
           :dag_id, :run_id, CAST(:details AS jsonb), :actor_kind, :actor_subject, :team, at, at,
           to_timestamp(floor(extract(epoch FROM at) / :window) * :window)
    FROM now
    ON CONFLICT (actor, method, route, status, denial_window) WHERE denial_window IS NOT NULL
    DO UPDATE SET count = audit_events.count + 1, last_ts = excluded.last_ts
""")


async def record_denial(conn: AsyncConnection, entry: AuditRecord, *, window: int = DENIAL_WINDOW) -> None:
    """Count a refused write in its token's row for this route and window (created by the first)."""
    await conn.execute(_DENIAL, {**_values(entry), "window": window})


async def list_events(conn: AsyncConnection, *, before_id: int | None, limit: int, actor: str | None,
                      dag_id: str | None) -> list[dict[str, Any]]:
    """Newest first, up to ``limit + 1`` older than ``before_id``."""
    rows = await conn.execute(text("""
        SELECT id, ts, actor, scope, method, route, path, status, remote_addr, forwarded_for, user_agent, dag_id,
               run_id, details, count, last_ts, actor_kind, actor_subject, team
        FROM audit_events
        WHERE (CAST(:before AS bigint) IS NULL OR id < :before)
          AND (CAST(:actor AS text) IS NULL OR actor = :actor)
          AND (CAST(:dag_id AS text) IS NULL OR dag_id = :dag_id)
        ORDER BY id DESC LIMIT :limit
    """), {"before": before_id, "limit": limit + 1, "actor": actor, "dag_id": dag_id})
    return [dict(r._mapping) for r in rows]
