"""What a DAG sync does, decided without the database: given the files' DAGs and the stored ones.

``leoflow dags sync DIR`` (through ``POST /api/v2/dags:sync``) and the leader's sync of
``LEOFLOW_DAGS_DIR`` apply a set of DAGs as one all-or-nothing operation. The store
(:func:`leoflow.db.stores.dags.sync_dags`) locks and reads the DAG rows the sync may touch and
hands them to :func:`plan_sync`, which decides, purely:

- each DAG of the set is **created** (new, or re-created after a delete), **changed** (a new
  version) or **unchanged** (same canonical hash: nothing is written) — the same semantics as a
  hand apply (runs keep their version, ``paused`` only applies on creation);
- every DAG of the set then carries the sync's **source label**. A DAG applied by hand (no label)
  is *adopted* by the first sync that defines it; a DAG another source owns is a **conflict**
  (nothing may be written): two directories must not fight over one DAG;
- with ``prune``, live DAGs of the **same source** that the set no longer defines are
  **deleted**. DAGs without a label are deleted only with ``prune_unlabeled``; DAGs of other
  sources never. Without ``prune`` they are only reported (**missing**).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from leoflow.model.files.dag_files import LocatedDag

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
    """What a sync did (or would do): its answer to the caller."""

    options: SyncOptions
    changes: tuple[DagChange, ...]
    #: Live DAGs of this source the files no longer define, left alone because prune was off.
    missing: tuple[str, ...]

    def count(self, action: Action) -> int:
        return sum(1 for c in self.changes if c.action == action)


@dataclass(frozen=True)
class StoredDag:
    """A stored DAG the sync may touch: its row and current version as the store read them."""

    dag_id: str
    deleted: bool
    source: str | None
    version: int | None
    spec_hash: str | None


@dataclass(frozen=True)
class PlannedApply:
    """One DAG of the set: ``unchanged`` (nothing to write, ``version`` is the stored one) or to apply."""

    dag: LocatedDag
    action: Action
    adopted: bool
    version: int | None


@dataclass(frozen=True)
class SyncDecision:
    """:func:`plan_sync`'s answer: what to refuse, apply, delete and report."""

    #: Problems (:meth:`LocatedDag.problem`) of the DAGs another source owns: write nothing if any.
    conflicts: tuple[dict[str, object], ...]
    #: The set's DAGs in ``dag_id`` order.
    applies: tuple[PlannedApply, ...]
    #: DAGs to delete (only with ``prune``), in ``dag_id`` order.
    deletions: tuple[str, ...]
    missing: tuple[str, ...]


def plan_sync(dags: Sequence[LocatedDag], stored: Mapping[str, StoredDag], options: SyncOptions) -> SyncDecision:
    """Decide the sync of ``dags`` against ``stored`` (every stored DAG the set names, and the live
    ones of ``options.source`` — and, with ``prune_unlabeled``, the live unlabeled ones)."""
    wanted = sorted(dags, key=lambda d: d.spec.dag_id)
    conflicts = tuple(
        d.problem("dag_id", f"DAG {d.spec.dag_id!r} belongs to sync source {row.source!r}, not "
                            f"{options.source!r}; delete it or sync it from its own source")
        for d in wanted
        if (row := stored.get(d.spec.dag_id)) is not None and not row.deleted
        and row.source is not None and row.source != options.source)
    defined = {d.spec.dag_id for d in wanted}
    stale = sorted(dag_id for dag_id, row in stored.items()
                   if dag_id not in defined and not row.deleted
                   and (row.source == options.source or (row.source is None and options.prune_unlabeled)))
    applies = tuple(_planned(dag, stored.get(dag.spec.dag_id)) for dag in wanted)
    # Without prune, only this source's own DAGs are worth mentioning (unlabeled ones are not its).
    missing = () if options.prune else tuple(d for d in stale if stored[d].source == options.source)
    return SyncDecision(conflicts, applies, tuple(stale) if options.prune else (), missing)


def _planned(dag: LocatedDag, row: StoredDag | None) -> PlannedApply:
    live = row is not None and not row.deleted
    adopted = row is not None and live and row.source is None
    if row is not None and live and row.spec_hash == dag.spec.spec_hash():
        return PlannedApply(dag, "unchanged", adopted, row.version)
    return PlannedApply(dag, "changed" if live else "created", adopted, None)
