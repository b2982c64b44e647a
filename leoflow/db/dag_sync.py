"""A set of DAGs applied as one all-or-nothing operation: the data side of a DAG sync.

``leoflow dags sync DIR`` (through ``POST /api/v2/dags:sync``) and the leader's sync of
``LEOFLOW_DAGS_DIR`` both end here with DAG specs that already validated
(:func:`leoflow.model.dag_files.parse_dag_files`). :func:`sync_dags` runs inside one
transaction the caller owns, so either every change of the plan commits or none does:

- each DAG of the set is **created** (new, or re-created after a delete), **changed** (a new
  version) or **unchanged** (same canonical hash: nothing is written), through
  :func:`leoflow.db.dag_store.apply_dag` — the same semantics as a hand apply (runs keep their
  version, ``paused`` only applies on creation);
- every DAG of the set then carries the sync's **source label** (``dags.source``). A DAG
  applied by hand (no label) is adopted by the first sync that defines it; a DAG another
  source owns is a conflict (:class:`~leoflow.errors.DagOwnershipConflict`, nothing written):
  two directories must not fight over one DAG;
- with ``prune``, live DAGs of the **same source** that the set no longer defines are
  **deleted** (:func:`~leoflow.db.dag_store.delete_dag`: a soft delete that cancels their
  active runs). DAGs without a label are deleted only with ``prune_unlabeled``; DAGs of other
  sources never.

Syncs are serialised by a transaction-level advisory lock (:data:`SYNC_LOCK`), so a leader's
sync and a CLI sync never interleave (and cannot deadlock on each other's rows); the lock goes
with the transaction. A dry run computes the same plan and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.clock import Clock
from leoflow.db import dag_store
from leoflow.errors import DagOwnershipConflict
from leoflow.model.dag_files import LocatedDag

#: ``pg_advisory_xact_lock`` key of DAG syncs: ASCII 'LEOF', 'SYNC' (the migrations use 'LEOF', 'MIGR').
SYNC_LOCK = (0x4C454F46, 0x53594E43)

Action = Literal["created", "changed", "unchanged", "deleted"]
ACTIONS: tuple[Action, ...] = ("created", "changed", "unchanged", "deleted")


@dataclass(frozen=True)
class SyncOptions:
    source: str
    prune: bool = False
    prune_unlabeled: bool = False
    dry_run: bool = False


@dataclass(frozen=True)
class DagChange:
    """What the sync does (or, in a dry run, would do) to one DAG."""

    dag_id: str
    action: Action
    file: str | None = None
    document: int | None = None
    #: The DAG's version after the sync (None for a deletion, and for a dry run's new versions).
    version: int | None = None
    #: A DAG applied by hand that this sync now owns.
    adopted: bool = False


@dataclass(frozen=True)
class SyncPlan:
    options: SyncOptions
    changes: tuple[DagChange, ...]
    #: Live DAGs of this source the files no longer define, left alone because prune was off.
    missing: tuple[str, ...]

    def count(self, action: Action) -> int:
        return sum(1 for c in self.changes if c.action == action)


@dataclass(frozen=True)
class _Existing:
    """A DAG row the sync may touch (locked for the transaction)."""

    dag_id: str
    deleted: bool
    source: str | None
    version: int | None
    spec_hash: str | None


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
    wanted = sorted(dags, key=lambda d: d.spec.dag_id)
    result = await conn.execute(_EXISTING, {"ids": [d.spec.dag_id for d in wanted], "source": options.source,
                                            "unlabeled": options.prune_unlabeled})
    rows = {r.dag_id: _Existing(r.dag_id, r.deleted, r.source, r.version, r.spec_hash) for r in result}

    conflicts = [d.problem("dag_id", f"DAG {d.spec.dag_id!r} belongs to sync source {row.source!r}, not "
                                     f"{options.source!r}; delete it or sync it from its own source")
                 for d in wanted
                 if (row := rows.get(d.spec.dag_id)) is not None and not row.deleted
                 and row.source is not None and row.source != options.source]
    if conflicts:
        raise DagOwnershipConflict(f"{len(conflicts)} DAG(s) belong to another sync source; nothing was applied",
                                   conflicts)

    defined = {d.spec.dag_id for d in wanted}
    stale = sorted(dag_id for dag_id, row in rows.items()
                   if dag_id not in defined and not row.deleted
                   and (row.source == options.source or (row.source is None and options.prune_unlabeled)))
    changes: list[DagChange] = []
    for dag in wanted:
        row = rows.get(dag.spec.dag_id)
        changes.append(await _apply_one(conn, dag, row, options, clock))
    if not options.dry_run and wanted:
        await conn.execute(_LABEL, {"source": options.source, "ids": sorted(defined)})
    if options.prune:
        for dag_id in stale:
            if not options.dry_run:
                await dag_store.delete_dag(conn, dag_id)
            changes.append(DagChange(dag_id, "deleted"))
    # Without prune, only this source's own DAGs are worth mentioning (unlabeled ones are not its).
    missing = () if options.prune else tuple(d for d in stale if rows[d].source == options.source)
    return SyncPlan(options, tuple(changes), missing)


async def _apply_one(conn: AsyncConnection, dag: LocatedDag, row: _Existing | None, options: SyncOptions,
                     clock: Clock) -> DagChange:
    spec = dag.spec
    live = row is not None and not row.deleted
    adopted = row is not None and live and row.source is None
    if row is not None and live and row.spec_hash == spec.spec_hash():
        return DagChange(spec.dag_id, "unchanged", dag.file, dag.document, row.version, adopted)
    action: Action = "changed" if live else "created"
    version = None if options.dry_run else (await dag_store.apply_dag(conn, spec, clock=clock)).version
    return DagChange(spec.dag_id, action, dag.file, dag.document, version, adopted)
