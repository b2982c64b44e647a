"""A DAG's versions: the history behind ``dags versions`` and what a trigger validates against."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


async def list_versions(conn: AsyncConnection, dag_id: str, *, before: int | None, limit: int) -> list[dict[str, Any]]:
    """Versions newest first (without their specs), up to ``limit + 1`` older than version ``before``."""
    rows = await conn.execute(text("""
        SELECT v.version, v.spec_hash, v.created_at, (v.id = d.current_version_id) AS current,
               (SELECT count(*) FROM dag_runs r WHERE r.dag_version_id = v.id) AS runs
        FROM dag_versions v JOIN dags d ON d.dag_id = v.dag_id
        WHERE v.dag_id = :dag_id AND NOT d.deleted AND (CAST(:before AS int) IS NULL OR v.version < :before)
        ORDER BY v.version DESC LIMIT :limit
    """), {"dag_id": dag_id, "before": before, "limit": limit + 1})
    return [dict(r._mapping) for r in rows]


async def get_version(conn: AsyncConnection, dag_id: str, version: int) -> dict[str, Any] | None:
    row = (await conn.execute(text("""
        SELECT v.version, v.spec_hash, v.created_at, (v.id = d.current_version_id) AS current,
               (SELECT count(*) FROM dag_runs r WHERE r.dag_version_id = v.id) AS runs, v.spec
        FROM dag_versions v JOIN dags d ON d.dag_id = v.dag_id
        WHERE v.dag_id = :dag_id AND v.version = :version AND NOT d.deleted
    """), {"dag_id": dag_id, "version": version})).first()
    return dict(row._mapping) if row else None


@dataclass(frozen=True)
class TriggerTarget:
    """What a trigger is validated against: the current version's ``params`` (None: any conf)."""

    params: dict[str, Any] | None
    schedule: str | None
    timezone: str


async def trigger_target(conn: AsyncConnection, dag_id: str, *, lock: bool = False) -> TriggerTarget | None:
    """The live DAG's current params, schedule and zone (row-shared-locked with ``lock``: no apply races it)."""
    row = (await conn.execute(text(f"""
        SELECT v.spec->'params' AS params, d.schedule, coalesce(v.spec->>'timezone', 'UTC') AS timezone
        FROM dags d JOIN dag_versions v ON v.id = d.current_version_id
        WHERE d.dag_id = :dag_id AND NOT d.deleted
        {"FOR SHARE OF d" if lock else ""}
    """), {"dag_id": dag_id})).first()
    return TriggerTarget(**row._mapping) if row else None


async def load_specs(conn: AsyncConnection, version_ids: Sequence[int]) -> dict[int, str]:
    """Each version's spec as JSON text (the scheduler decodes and compiles it, one version at a time)."""
    rows = await conn.execute(text("SELECT id, spec::text AS spec FROM dag_versions "
                                   "WHERE id = ANY(CAST(:ids AS bigint[]))"), {"ids": list(version_ids)})
    return {int(r.id): str(r.spec) for r in rows}
