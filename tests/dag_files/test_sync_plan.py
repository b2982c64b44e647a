"""The sync plan alone (:func:`leoflow.model.files.dag_sync.plan_sync`): no database, the stored DAGs given.

tests/dag_files/test_sync.py holds the same rules end to end, through the store and the API.
"""

from __future__ import annotations

from leoflow.model.files.dag_files import DagFile, LocatedDag, parse_dag_files
from leoflow.model.files.dag_sync import StoredDag, SyncOptions, plan_sync


def located(*dag_ids: str) -> list[LocatedDag]:
    files = [DagFile(f"{d}.yaml", f"dag_id: {d}\ntasks:\n  - id: t\n    kind: empty\n") for d in dag_ids]
    dag_set = parse_dag_files(files)
    assert not dag_set.errors
    return list(dag_set.dags)


def stored(dag: str, *, source: str | None = "repo", deleted: bool = False, spec_hash: str = "old") -> StoredDag:
    return StoredDag(dag, deleted, source, 3, spec_hash)


def test_each_dag_is_created_changed_unchanged_or_adopted() -> None:
    a, b, c, d = located("a", "b", "c", "d")
    rows = {"b": stored("b"), "c": stored("c", spec_hash=c.spec.spec_hash()), "d": stored("d", source=None),
            "gone": stored("gone", deleted=True)}
    decision = plan_sync([d, c, b, a], rows, SyncOptions("repo"))
    assert not decision.conflicts
    assert [(p.dag.spec.dag_id, p.action, p.adopted, p.version) for p in decision.applies] == [
        ("a", "created", False, None), ("b", "changed", False, None), ("c", "unchanged", False, 3),
        ("d", "changed", True, None)]


def test_a_dag_another_source_owns_is_a_conflict() -> None:
    (a,) = located("a")
    decision = plan_sync([a], {"a": stored("a", source="other")}, SyncOptions("repo"))
    assert len(decision.conflicts) == 1 and "belongs to sync source 'other'" in str(decision.conflicts[0])
    # A deleted DAG of another source is free to take.
    assert not plan_sync([a], {"a": stored("a", source="other", deleted=True)}, SyncOptions("repo")).conflicts


def test_prune_deletes_this_sources_stale_dags_and_unlabeled_ones_only_when_asked() -> None:
    (a,) = located("a")
    rows = {"old": stored("old"), "hand": stored("hand", source=None), "gone": stored("gone", deleted=True)}
    kept = plan_sync([a], rows, SyncOptions("repo"))
    assert (kept.deletions, kept.missing) == ((), ("old",))
    pruned = plan_sync([a], rows, SyncOptions("repo", prune=True))
    assert (pruned.deletions, pruned.missing) == (("old",), ())
    everything = plan_sync([a], rows, SyncOptions("repo", prune=True, prune_unlabeled=True))
    assert everything.deletions == ("hand", "old")
