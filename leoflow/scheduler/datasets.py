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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from leoflow.db.stores.datasets import slots as slot_store
from leoflow.db.stores.datasets import triggers
from leoflow.db.stores.datasets.triggers import DatasetRun, LockedDag
from leoflow.errors import ValidationFailed
from leoflow.model.run_ids import scheduled_run_id
from leoflow.model.spec.datasets import DatasetCondition, dataset_run_id, parse_dataset_schedule
from leoflow.model.spec.schedules.forms import decode
from leoflow.model.spec.timetable import RunPlan, stored_bounds
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
    awaiting: list[tuple[LockedDag, DatasetCondition]] = []
    for dag in await triggers.lock_queues(step.conn, dag_ids):
        try:
            condition = condition_of(dag)
        except ValidationFailed as exc:
            step.fail("dag", dag.dag_id, exc, reason=f"dataset schedule unreadable: {exc}")
            continue
        names = set(condition.uris) if condition is not None else set()
        dropped += [(dag.dag_id, uri) for uri in dag.queued if uri not in names]
        if condition is not None and awaits_slot(dag):  # combine: and — the slot's run, not a dataset run
            awaiting.append((dag, condition))
            continue
        if condition is None or not condition.met_by(dag.queued.keys()):
            continue
        consumed = [dag.queued[uri] for uri in condition.uris if uri in dag.queued]
        run_id = dataset_run_id(step.now, max(q.last_event_id for q in consumed))
        runs.append(DatasetRun(dag.dag_id, dag.version_id, run_id, consumed))
    created = await triggers.create_dataset_runs(step.conn, runs, now=step.now, term=step.term, dropped=dropped)
    created += await start_pending_slots(step, awaiting)
    if runs:
        log.info("dataset-triggered runs created", extra={"runs": created, "dag_ids": [r.dag_id for r in runs][:20]})
    step.dataset_runs += created
    step.dataset_runs_by_dag.update(r.dag_id for r in runs)
    return created


def awaits_slot(dag: LockedDag) -> bool:
    """Is the DAG's schedule a cron whose slots wait for its datasets (``combine: and``)?"""
    return isinstance(dag.schedule, dict) and dag.schedule.get("combine") == "and"


async def start_pending_slots(step: Step, awaiting: Sequence[tuple[LockedDag, DatasetCondition]]) -> int:
    """``combine: and``: the run of each pending slot whose condition the DAG's queue meets.

    A slot past ``starting_deadline_seconds`` is dropped instead (its events stay queued for the
    next slot); a DAG with no pending slot keeps its events (the scan does not pick it; this is a
    slot the step that planned it has not written, or one a re-apply cleared). The run is the
    slot's scheduled run (:mod:`leoflow.db.stores.datasets.slots`); returns the runs created.
    """
    if not awaiting:
        return 0
    pending = await slot_store.pending_slots(step.conn, [dag.dag_id for dag, _ in awaiting])
    runs: list[slot_store.SlotRun] = []
    expired: list[tuple[str, datetime]] = []
    for dag, condition in awaiting:
        slot = pending.get(dag.dag_id)
        if slot is None or slot.logical_date is None:
            continue
        try:
            _, deadline = stored_bounds(None, slot.deadline)
        except ValueError as exc:
            step.fail("dag", dag.dag_id, exc, reason=f"dataset schedule unreadable: {exc}")
            continue
        if deadline is not None and (step.now - slot.logical_date).total_seconds() > deadline:
            expired.append((dag.dag_id, slot.logical_date))
            continue
        if not condition.met_by(dag.queued.keys()):
            continue
        consumed = [dag.queued[uri] for uri in condition.uris if uri in dag.queued]
        runs.append(slot_store.SlotRun(dag.dag_id, dag.version_id, scheduled_run_id(slot.logical_date),
                                       slot.logical_date, slot.interval_start or slot.logical_date, consumed))
    await slot_store.clear_slots(step.conn, expired)
    for dag_id, at in expired:
        log.info("pending slot dropped: its datasets did not arrive within starting_deadline_seconds",
                 extra={"dag_id": dag_id, "slot": at.isoformat()})
    created = await slot_store.create_slot_runs(step.conn, runs, now=step.now, term=step.term)
    step.dataset_runs_by_dag.update(r.dag_id for r in runs)  # data started them: counted per DAG too
    if runs:
        log.info("pending slots started: their datasets arrived", extra={
            "runs": created, "dag_ids": [r.dag_id for r in runs][:20]})
    return created


def pending_slot(dag_id: str, schedule: str, plan: RunPlan, slots: dict[str, tuple[datetime, datetime]]) -> RunPlan:
    """``combine: and``: the plan's latest slot becomes the DAG's pending slot (into ``slots``) instead of a
    run; the plan keeps its ``next_run_at``, so the due scan's compare-and-set still moves the DAG on."""
    if not decode(schedule).awaits_datasets:
        return plan
    if plan.logical_dates:
        slots[dag_id] = (plan.logical_dates[-1], plan.interval_starts[-1])
    return replace(plan, logical_dates=(), interval_starts=())


async def record_slots(step: Step, slots: dict[str, tuple[datetime, datetime]], advanced: Mapping[str, int]) -> None:
    """Write the pending slots of the DAGs whose ``next_run_at`` this step moved (the others were
    re-applied, paused or deleted since the scan, and are planned again)."""
    taken = [(d, at, start) for d, (at, start) in slots.items() if d in advanced]
    replaced = await slot_store.set_slots(step.conn, taken)
    for dag_id, old in replaced.items():
        log.info("pending slot replaced by a newer one before its datasets arrived",
                 extra={"dag_id": dag_id, "skipped_slot": old.isoformat(), "slot": slots[dag_id][0].isoformat()})
