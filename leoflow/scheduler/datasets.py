"""Dataset-triggered runs, a periodic part of the leader's step.

Which DAGs wait, the locks, the statement and the exactly-once argument are
:mod:`leoflow.db.stores.datasets.triggers`; this module decides, per locked DAG, whether its
condition is met (:class:`~leoflow.model.spec.datasets.DatasetCondition`) and which queue rows the
run consumes: every queued URI of the condition (``all``: all of them, by definition; ``any``: every
one that has events, so a burst across several URIs makes one run, not one per URI).

Containment: a DAG whose stored schedule cannot be read as a dataset condition (a poisoned or
hand-edited version) has its schedule stopped with the reason, like a cron that cannot be
planned; its queue rows stay for a re-apply. Queue rows of URIs its condition does not name (left
by a version written before, or by hand) are deleted, never read as events. A step that fails as
a whole is bisected by DAG (:class:`~leoflow.scheduler.periodic.Part`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from leoflow.db.stores.datasets import triggers
from leoflow.db.stores.datasets.triggers import DatasetRun, LockedDag
from leoflow.errors import ValidationFailed
from leoflow.model.spec.datasets import DatasetCondition, dataset_run_id, parse_dataset_schedule
from leoflow.scheduler.step import Step

log = logging.getLogger(__name__)


def condition_of(dag: LockedDag) -> DatasetCondition | None:
    """The condition of the DAG's current version; None if it has none (its queue rows are stale).

    A cron with datasets (``{cron, datasets}``) runs on both, independently: its cron's runs are the
    scheduled path's, its dataset runs are made here like any dataset schedule's.
    """
    if not isinstance(dag.schedule, dict):
        return None
    if "cron" in dag.schedule:
        return parse_dataset_schedule({"datasets": dag.schedule.get("datasets")})
    return parse_dataset_schedule(dag.schedule)


async def trigger_dataset_runs(step: Step, dag_ids: Sequence[str]) -> int:
    """Lock ``dag_ids``, start a run for each whose condition is met; returns the runs created."""
    runs: list[DatasetRun] = []
    dropped: list[tuple[str, str]] = []
    for dag in await triggers.lock_queues(step.conn, dag_ids):
        try:
            condition = condition_of(dag)
        except ValidationFailed as exc:
            step.fail("dag", dag.dag_id, exc, reason=f"dataset schedule unreadable: {exc}")
            continue
        names = set(condition.uris) if condition is not None else set()
        dropped += [(dag.dag_id, uri) for uri in dag.queued if uri not in names]
        if condition is None or not condition.met_by(dag.queued.keys()):
            continue
        consumed = [dag.queued[uri] for uri in condition.uris if uri in dag.queued]
        run_id = dataset_run_id(step.now, max(q.last_event_id for q in consumed))
        runs.append(DatasetRun(dag.dag_id, dag.version_id, run_id, consumed))
    created = await triggers.create_dataset_runs(step.conn, runs, now=step.now, term=step.term, dropped=dropped)
    if runs:
        log.info("dataset-triggered runs created", extra={"runs": created, "dag_ids": [r.dag_id for r in runs][:20]})
    step.dataset_runs += created
    step.dataset_runs_by_dag.update(r.dag_id for r in runs)
    return created
