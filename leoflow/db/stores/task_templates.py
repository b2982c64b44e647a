"""Cluster templates: the statements of ``/api/v2/templates`` and of a DAG apply's template reads.

A template name's versions count from 1 (:class:`leoflow.db.tables.TaskTemplate`). ``put``
stores a new version only when the document differs from the newest live one (same hash: the
same version, so ``templates apply`` is idempotent); a delete marks every version of the name
``deleted`` and a later ``put`` continues after the highest, so ``cluster/etl@3`` never names two
documents. Two racing puts of one name meet at the primary key: the second waits for the first
to commit, then answers that version if it stored the same document, else raises
:class:`~leoflow.errors.Conflict` (409) and its client applies again.

:func:`find_templates` is what a DAG apply or sync reads: the versions the spec names (and the
newest live version for ``cluster/NAME``), in one statement, into the catalogue
:func:`leoflow.model.spec.dag.parse_dag_spec` inlines from. The scheduler never reads this table.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.errors import Conflict
from leoflow.model.spec.reuse import ClusterTemplate, check_template_count

_NEWEST = "SELECT version, spec_hash, deleted FROM task_templates WHERE name = :name ORDER BY version DESC LIMIT 1"
_LIVE_NAMES = "SELECT count(DISTINCT name) FROM task_templates WHERE NOT deleted"
_INSERT = """
    INSERT INTO task_templates (name, version, spec, spec_hash, created_by, created_at)
    VALUES (:name, :version, CAST(:spec AS jsonb), :spec_hash, :created_by, :now)
    ON CONFLICT (name, version) DO NOTHING RETURNING version
"""
_COLUMNS = "name, version, spec_hash, created_by, created_at"
_LIST = f"""
    SELECT DISTINCT ON (name) {_COLUMNS},
           (SELECT count(*) FROM task_templates v WHERE v.name = t.name AND NOT v.deleted) AS versions
    FROM task_templates t WHERE NOT deleted ORDER BY name, version DESC
"""
_GET = f"""
    SELECT {_COLUMNS}, spec FROM task_templates
    WHERE name = :name AND NOT deleted AND (CAST(:version AS integer) IS NULL OR version = :version)
    ORDER BY version DESC LIMIT 1
"""
_DELETE = "UPDATE task_templates SET deleted = true WHERE name = :name AND NOT deleted RETURNING version"
_FIND = """
    (SELECT DISTINCT ON (name) name, version, spec, true AS newest FROM task_templates
     WHERE name = ANY(CAST(:newest AS text[])) AND NOT deleted ORDER BY name, version DESC)
    UNION ALL
    (SELECT t.name, t.version, t.spec, false FROM task_templates t
     JOIN unnest(CAST(:names AS text[]), CAST(:versions AS integer[])) AS p(name, version)
       ON t.name = p.name AND t.version = p.version
     WHERE NOT t.deleted)
"""


def template_document(row: Any, *, spec: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": row.name, "version": int(row.version), "spec_hash": row.spec_hash,
                           "created_by": row.created_by, "created_at": row.created_at.isoformat()}
    if spec:
        doc["spec"] = row.spec
    return doc


async def put_template(conn: AsyncConnection, name: str, spec: dict[str, Any], spec_hash: str, *,
                       created_by: str, now: datetime) -> tuple[int, bool]:
    """Store ``spec`` as the newest version of ``name``; (version, created). Idempotent by hash."""
    newest = (await conn.execute(text(_NEWEST), {"name": name})).first()
    if newest is not None and not newest.deleted and newest.spec_hash == spec_hash:
        return int(newest.version), False
    if newest is None or newest.deleted:  # a name that comes (back) to life counts against the limit
        check_template_count(int((await conn.execute(text(_LIVE_NAMES))).scalar_one()) + 1)
    version = 1 if newest is None else int(newest.version) + 1
    inserted = await conn.execute(text(_INSERT), {"name": name, "version": version, "spec": _json(spec),
                                                  "spec_hash": spec_hash, "created_by": created_by[:100], "now": now})
    if inserted.first() is None:  # a concurrent put took this version first (we waited for its commit)
        newest = (await conn.execute(text(_NEWEST), {"name": name})).first()
        if newest is not None and not newest.deleted and newest.spec_hash == spec_hash:
            return int(newest.version), False  # it stored this very document: the same answer as a retry
        raise Conflict(f"template {name!r}: a concurrent write stored version {version} first; apply again")
    return version, True


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


async def list_templates(conn: AsyncConnection) -> list[dict[str, Any]]:
    """The newest live version of every template (at most ``limits.CLUSTER_TEMPLATE_NAMES``), by name."""
    rows = await conn.execute(text(_LIST))
    return [{**template_document(row), "versions": int(row.versions)} for row in rows]


async def get_template(conn: AsyncConnection, name: str, version: int | None = None) -> dict[str, Any] | None:
    """One live version (the newest without ``version``), with its document; None if there is none."""
    row = (await conn.execute(text(_GET), {"name": name, "version": version})).first()
    return None if row is None else template_document(row, spec=True)


async def delete_template(conn: AsyncConnection, name: str) -> bool:
    """Mark every version of ``name`` deleted; False when it had no live version."""
    return (await conn.execute(text(_DELETE), {"name": name})).first() is not None


async def find_templates(conn: AsyncConnection,
                         refs: Collection[tuple[str, int | None]]) -> dict[tuple[str, int | None], ClusterTemplate]:
    """The live templates ``refs`` name: (name, V) for version V, (name, None) for the newest."""
    if not refs:
        return {}
    pinned = sorted((n, v) for n, v in refs if v is not None)
    rows = await conn.execute(text(_FIND), {"newest": sorted({n for n, v in refs if v is None}),
                                            "names": [n for n, _ in pinned], "versions": [v for _, v in pinned]})
    found: dict[tuple[str, int | None], ClusterTemplate] = {}
    for row in rows:
        template = ClusterTemplate(row.name, int(row.version), row.spec)
        found[(row.name, None if row.newest else int(row.version))] = template
    return found
