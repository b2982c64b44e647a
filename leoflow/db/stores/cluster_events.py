"""The cluster's event log (``cluster_events``): terms begun and ended, nodes joined and left.

Written by the election's lock session (synchronous psycopg: :func:`record_event`) and by the
asyncio side (:func:`record_event_async`); read by the API (:func:`list_events`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


def isoformat(value: datetime | None) -> str | None:
    """A stored time as the API shows it."""
    return value.isoformat() if value is not None else None


def record_event(conn: psycopg.Connection[Any], cluster: str, kind: str, node_id: str | None,
                 term: int | None, details: dict[str, Any], *, ts: datetime | None = None) -> None:
    """An event, at ``ts`` (the database's clock when None)."""
    conn.execute("INSERT INTO cluster_events (cluster, ts, kind, node_id, term, details)"
                 " VALUES (%s, coalesce(%s, clock_timestamp()), %s, %s, %s, %s::jsonb)",
                 (cluster, ts, kind, node_id, term, json.dumps(details)))


async def list_events(conn: AsyncConnection, cluster: str, limit: int,
                      before_id: int | None) -> list[dict[str, Any]]:
    rows = (await conn.execute(text(
        "SELECT id, ts, kind, node_id, term, details FROM cluster_events WHERE cluster = :cluster"
        " AND (CAST(:before AS bigint) IS NULL OR id < CAST(:before AS bigint))"
        " ORDER BY id DESC LIMIT :limit"), {"cluster": cluster, "before": before_id, "limit": limit})).all()
    return [{"id": int(r.id), "ts": isoformat(r.ts), "kind": r.kind, "node_id": r.node_id,
             "term": int(r.term) if r.term is not None else None, "details": r.details or {}} for r in rows]


async def record_event_async(conn: AsyncConnection, cluster: str, kind: str, node_id: str | None,
                             term: int | None, details: dict[str, Any]) -> None:
    await conn.execute(text(
        "INSERT INTO cluster_events (cluster, kind, node_id, term, details)"
        " VALUES (:cluster, :kind, :node, :term, CAST(:details AS jsonb))"),
        {"cluster": cluster, "kind": kind, "node": node_id, "term": term, "details": json.dumps(details)})
