"""Stored DAGs: the SQL for the ``dags`` table (today: the data side of a DAG sync).

:func:`sync_dags` applies a set of DAGs as one all-or-nothing operation, inside one transaction
the caller owns, so either every change of the plan commits or none does. It locks and reads the
DAG rows the sync may touch, and :func:`leoflow.model.dag_sync.plan_sync` decides what to create,
change, adopt, refuse and prune (the rules are that module's docstring); this module writes it —
each apply through :func:`leoflow.db.dag_store.apply_dag` (the semantics of a hand apply), each
prune through :func:`~leoflow.db.dag_store.delete_dag` (a soft delete that cancels the DAG's
active runs).

Syncs are serialised by a transaction-level advisory lock (:data:`SYNC_LOCK`), so a leader's
sync and a CLI sync never interleave (and cannot deadlock on each other's rows); the lock goes
with the transaction. A dry run computes the same plan and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.clock import Clock
from leoflow.db import dag_store
from leoflow.errors import DagOwnershipConflict
from leoflow.model.dag_files import LocatedDag
from leoflow.model.dag_sync import DagChange, StoredDag, SyncOptions, SyncPlan, plan_sync

#: ``pg_advisory_xact_lock`` key of DAG syncs: ASCII 'LEOF', 'SYNC' (the migrations use 'LEOF', 'MIGR').
SYNC_LOCK = (0x4C454F46, 0x53594E43)

_LOCK = text("SELECT pg_advisory_xact_lock(:a, :b)")
_EXISTING = text("""
    SELECT d.dag_id, d.deleted, d.source, v.version, v.spec_hash
    FROM dags d LEFT JOIN dag_versions v ON v.id = d.current_version_id
    WHERE d.dag_id = ANY(:ids)
       OR (NOT d.deleted AND (d.source = :source OR (CAST(:unlabeled AS boolean) AND d.source IS NULL)))
    ORDER BY d.dag_id
    FOR UPDATE OF d
""")
_LABEL = text("""
    UPDATE dags SET source = :source, updated_at = now()
    WHERE dag_id = ANY(:ids) AND source IS DISTINCT FROM :source
""")


async def sync_dags(conn: AsyncConnection, dags: Sequence[LocatedDag], options: SyncOptions, *,
                    clock: Clock) -> SyncPlan:
    """Plan and (unless ``options.dry_run``) apply the sync of ``dags``; see the module docstring.

    Raises DagOwnershipConflict, listing every DAG of the set that another source owns, before
    writing anything.
    """
    await conn.execute(_LOCK, {"a": SYNC_LOCK[0], "b": SYNC_LOCK[1]})
    result = await conn.execute(_EXISTING, {"ids": sorted(d.spec.dag_id for d in dags), "source": options.source,
                                            "unlabeled": options.prune_unlabeled})
    stored = {r.dag_id: StoredDag(r.dag_id, r.deleted, r.source, r.version, r.spec_hash) for r in result}
    decision = plan_sync(dags, stored, options)
    if decision.conflicts:
        raise DagOwnershipConflict(f"{len(decision.conflicts)} DAG(s) belong to another sync source; "
                                   "nothing was applied", list(decision.conflicts))
    changes: list[DagChange] = []
    for planned in decision.applies:
        dag, version = planned.dag, planned.version
        if planned.action != "unchanged" and not options.dry_run:
            version = (await dag_store.apply_dag(conn, dag.spec, clock=clock)).version
        changes.append(DagChange(dag.spec.dag_id, planned.action, dag.file, dag.document, version, planned.adopted))
    if not options.dry_run and decision.applies:
        await conn.execute(_LABEL, {"source": options.source, "ids": [p.dag.spec.dag_id for p in decision.applies]})
    for dag_id in decision.deletions:
        if not options.dry_run:
            await dag_store.delete_dag(conn, dag_id)
        changes.append(DagChange(dag_id, "deleted"))
    return SyncPlan(options, tuple(changes), decision.missing)
