"""Which team a DAG's ``team:`` field names: what authorization asks of the DAG store.

A DAG is owned by the team its current version's spec names (``team:``), else by its DAG-id
prefix (decided in memory, :meth:`leoflow.model.access.teams.Teams.team_of`). The API asks this for
the DAGs a request touches, a few at a time (a route's one DAG, a list's page), and caches the
answers for a second (:class:`leoflow.api.access.DagOwners`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


async def named_teams(conn: AsyncConnection, dag_ids: Sequence[str]) -> dict[str, str | None]:
    """``{dag_id: team}`` for each stored DAG of ``dag_ids`` (None: its spec names no team)."""
    if not dag_ids:
        return {}
    rows = await conn.execute(text("""
        SELECT d.dag_id, v.spec->>'team' AS team
        FROM dags d JOIN dag_versions v ON v.id = d.current_version_id
        WHERE d.dag_id = ANY(CAST(:ids AS text[]))
    """), {"ids": list(dag_ids)})
    return {r.dag_id: r.team for r in rows}
