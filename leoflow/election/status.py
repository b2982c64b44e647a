"""Who leads, who is a member, what happened: answered from the database, never from memory.

Any replica (leader or not) can serve these, because the truth lives in PostgreSQL:

- :func:`current_leader` — the session that holds the cluster's advisory lock (``pg_locks``,
  ``granted = true``; followers blocked in ``pg_advisory_lock`` show ``granted = false`` and are
  ignored) whose ``application_name`` is ``leoflow-lock:<node_id>``, joined with the newest
  fencing term *recorded by that same backend pid*. Between the moment a new holder is granted
  the lock and the moment it commits its term there is no leader (``None``): the API answers 503.
- :func:`list_nodes` — the membership heartbeat rows.
- :func:`list_events` — the cluster event log, newest first, paged by ``before_id``.

All values are JSON-ready (timestamps as ISO-8601 strings). Database errors propagate.
"""

from __future__ import annotations

from typing import Any

from leoflow.db.connection.database import Connection
from leoflow.db.stores import cluster_events, cluster_nodes, leader_terms


async def current_leader(conn: Connection, cluster: str) -> dict[str, Any] | None:
    """``{"node_id", "term", "since", "api_url"}`` of the live leader, or None when nobody leads."""
    return await leader_terms.current_leader(conn, cluster)


async def list_nodes(conn: Connection, cluster: str) -> list[dict[str, Any]]:
    """Every replica that ever heartbeated: ``node_id, api_url, version, started_at, last_seen,
    is_leader, state`` (``up``/``down``), ordered by node id."""
    return await cluster_nodes.list_nodes(conn, cluster)


async def list_events(conn: Connection, cluster: str, limit: int,
                      before_id: int | None = None) -> list[dict[str, Any]]:
    """Newest-first cluster events (``id, ts, kind, node_id, term, details``)."""
    return await cluster_events.list_events(conn, cluster, limit, before_id)
