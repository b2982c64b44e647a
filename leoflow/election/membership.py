"""Membership heartbeats: every replica upserts its row; silent replicas are marked down.

Every ``LEOFLOW_HEARTBEAT_INTERVAL`` seconds a replica writes ``(node_id, api_url, version,
last_seen, is_leader)`` into ``cluster_nodes`` (``node_joined`` when it is new or was down), and
marks every replica of its cluster unseen for ``LEOFLOW_NODE_DOWN_AFTER`` seconds ``down``
(``node_left``). ``is_leader`` is this replica's local view, for display only; who leads is
always answered from the lock (:func:`leoflow.db.stores.leader_terms.current_leader`).

Failure semantics: a database error skips one beat (logged once per outage); the loop never dies
because PostgreSQL is away. On graceful exit :func:`leave` marks the replica down at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from leoflow import __version__
from leoflow.db.connection.database import Database
from leoflow.db.stores import cluster_nodes
from leoflow.errors import DatabaseError
from leoflow.settings import Settings

log = logging.getLogger(__name__)


async def heartbeat_forever(settings: Settings, db: Database, is_leader: Callable[[], bool]) -> None:
    cluster, node = settings.cluster.name, settings.cluster.node_id
    failing = False
    first = True
    while True:
        try:
            async with db.transaction() as conn:
                if first:
                    await cluster_nodes.restart_membership(conn, cluster, node)
                await cluster_nodes.heartbeat(conn, cluster, node, api_url=settings.api_url, version=__version__,
                                      is_leader=is_leader())
                left = await cluster_nodes.mark_down(conn, cluster, settings.election.node_down_after)
            first = False
            for other in left:
                log.warning("replica marked down (no heartbeat)", extra={"cluster": cluster, "peer": other})
            if failing:
                log.info("membership heartbeats resumed", extra={"cluster": cluster})
            failing = False
        except DatabaseError as exc:
            if not failing:
                log.warning("membership heartbeat failed: %s", exc, extra={"cluster": cluster})
            failing = True
        await asyncio.sleep(settings.election.heartbeat_interval)


async def leave(settings: Settings, db: Database) -> None:
    """Mark this replica down (graceful shutdown); best effort, bounded by the caller."""
    async with db.transaction() as conn:
        await cluster_nodes.leave(conn, settings.cluster.name, settings.cluster.node_id)
