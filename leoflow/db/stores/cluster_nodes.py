"""Cluster membership: the ``cluster_nodes`` rows each replica heartbeats, and who is listed up.

Failure semantics: driver exceptions propagate unchanged; the membership loop
(:mod:`leoflow.election.membership`) retries on its next beat.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.stores import cluster_events


async def list_nodes(conn: AsyncConnection, cluster: str) -> list[dict[str, Any]]:
    rows = (await conn.execute(text(
        "SELECT node_id, api_url, version, started_at, last_seen, is_leader, state FROM cluster_nodes"
        " WHERE cluster = :cluster ORDER BY node_id"), {"cluster": cluster})).all()
    return [{"node_id": r.node_id, "api_url": r.api_url, "version": r.version,
             "started_at": cluster_events.isoformat(r.started_at), "last_seen": cluster_events.isoformat(r.last_seen),
             "is_leader": bool(r.is_leader), "state": r.state} for r in rows]


async def heartbeat(conn: AsyncConnection, cluster: str, node_id: str, *, api_url: str, version: str,
                    is_leader: bool) -> bool:
    """Upsert this replica's membership row; True when it (re)joined (new row or was down)."""
    previous = (await conn.execute(text(
        "SELECT state FROM cluster_nodes WHERE cluster = :cluster AND node_id = :node FOR UPDATE"),
        {"cluster": cluster, "node": node_id})).scalar()
    params = {"cluster": cluster, "node": node_id, "url": api_url, "version": version, "leader": is_leader}
    if previous is None:
        await conn.execute(text(
            "INSERT INTO cluster_nodes (cluster, node_id, api_url, version, started_at, last_seen,"
            " is_leader, state) VALUES (:cluster, :node, :url, :version, now(), now(), :leader, 'up')"
            " ON CONFLICT (cluster, node_id) DO UPDATE SET last_seen = now(), is_leader = :leader,"
            " state = 'up', api_url = :url, version = :version"), params)
    else:
        await conn.execute(text(
            "UPDATE cluster_nodes SET last_seen = now(), is_leader = :leader, state = 'up', api_url = :url,"
            " version = :version WHERE cluster = :cluster AND node_id = :node"), params)
    joined = previous is None or previous == "down"
    if joined:
        await cluster_events.record_event_async(conn, cluster, "node_joined", node_id, None,
                                                {"api_url": api_url, "version": version})
    return joined


async def restart_membership(conn: AsyncConnection, cluster: str, node_id: str) -> None:
    """A process (re)starting under a node id: new ``started_at``."""
    await conn.execute(text("UPDATE cluster_nodes SET started_at = now() WHERE cluster = :cluster"
                            " AND node_id = :node"), {"cluster": cluster, "node": node_id})


async def mark_down(conn: AsyncConnection, cluster: str, silent_for: float) -> list[str]:
    """Mark replicas unseen for ``silent_for`` seconds down and log ``node_left`` for each."""
    rows = (await conn.execute(text(
        "UPDATE cluster_nodes SET state = 'down', is_leader = false WHERE cluster = :cluster"
        " AND state = 'up' AND last_seen < now() - make_interval(secs => :secs) RETURNING node_id"),
        {"cluster": cluster, "secs": silent_for})).all()
    left = [r.node_id for r in rows]
    for node in left:
        await cluster_events.record_event_async(conn, cluster, "node_left", node, None, {"reason": "heartbeat timeout"})
    return left


async def leave(conn: AsyncConnection, cluster: str, node_id: str) -> None:
    """Graceful exit: mark this replica down at once."""
    rows = (await conn.execute(text(
        "UPDATE cluster_nodes SET state = 'down', is_leader = false WHERE cluster = :cluster"
        " AND node_id = :node AND state = 'up' RETURNING node_id"), {"cluster": cluster, "node": node_id})).all()
    if rows:
        await cluster_events.record_event_async(conn, cluster, "node_left", node_id, None, {"reason": "shutdown"})
