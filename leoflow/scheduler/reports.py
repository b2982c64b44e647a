"""Executor reports → task transitions, inside a scheduler step.

Reports are folded per task instance (:func:`~leoflow.scheduler.transitions.fold_reports`) and
applied with one batched compare-and-set. Fast path: tries this term queued are remembered
(``inflight``: bounded by the parallelism) with the state the scheduler last gave them, so their
reports need no lookup. The CAS still guards them: if the row moved (cancelled, timed out), the
miss is re-done on the slow path, which locks and re-reads the rows, so nothing is lost.

Containment: folding one task instance's reports runs in a boundary of its own (a report that
makes the state machine raise — a timeout beyond the calendar, a bug — fails that task instance
with the reason, never the batch). Text from executors (reasons, references) is cleaned of what
PostgreSQL cannot store before it reaches a statement.

Outputs (ADR 0014, decision 1): a success of a task that declares outputs is checked here, by the
leader, against its DAG version's declarations (:func:`~leoflow.model.outputs.check_outputs`).
Passing, the values go into the statement that records the success (same fenced transaction as
the task instance's move to ``success``); rejected, the report becomes a failure with the
rejection as its reason, and retries apply. A success of any other task costs one lookup of its
version's flag, computed once per version (versions are immutable).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Sequence

from leoflow import tracing
from leoflow.db.stores.task_instances import transitions as ti_store
from leoflow.db.stores.task_instances.transitions import LiveTaskInstance, Transition, TryChange
from leoflow.model.outputs import CheckedOutputs, OutputsRejected, check_outputs
from leoflow.model.spec.graph import DagGraph
from leoflow.model.tries import StatusUpdate, TryKey, try_key
from leoflow.scheduler.containment import clean_text
from leoflow.scheduler.step import Step
from leoflow.scheduler.transitions import InFlightTry, TryFacts, fold_reports, fold_try_facts, skipped_by_exit_code

log = logging.getLogger(__name__)
#: Versions whose "declares outputs" flag is remembered (a bool each; cleared when full).
_DECLARING_CACHE = 10_000


def cleaned(update: StatusUpdate) -> StatusUpdate:
    """The report with its text fields storable (no NUL; bounded)."""
    reason = None if update.reason is None else clean_text(update.reason)
    ref = None if update.executor_ref is None else clean_text(update.executor_ref, 253)
    if reason == update.reason and ref == update.executor_ref:
        return update
    return update._replace(reason=reason, executor_ref=ref)


class ReportApplier:
    """Applies batches of executor reports for one term (see the module docstring)."""

    def __init__(self, inflight: dict[TryKey, InFlightTry], *, max_retry_delay: float,
                 termination_message: bool = False) -> None:
        self.inflight = inflight
        self.max_retry_delay = max_retry_delay
        #: Outputs arrive as Kubernetes termination messages (the size reason says so).
        self.termination_message = termination_message
        #: Whether any task of a DAG version declares outputs, by version id (immutable, so never stale).
        self._declaring: dict[int, bool] = {}

    async def apply(self, step: Step, batch: Sequence[StatusUpdate]) -> None:
        batch = [cleaned(u) for u in batch]
        fast = [u for u in batch if u.key in self.inflight]
        slow_keys = [u.key for u in batch if u.key not in self.inflight]
        rows = [self.inflight[u.key].row() for u in fast]
        if slow_keys:
            rows.extend(await ti_store.lock_task_instances(step.conn, slow_keys))
        missed = await self._fold_and_apply(step, batch, rows)
        if missed:
            for key in missed:
                self.inflight.pop(key, None)
            fresh = await ti_store.lock_task_instances(step.conn, missed)
            retry = [u for u in batch if u.key in set(missed)]
            await self._fold_and_apply(step, retry, fresh, record_tries=False)

    async def _fold_and_apply(self, step: Step, batch: Sequence[StatusUpdate], rows: Sequence[LiveTaskInstance], *,
                              record_tries: bool = True) -> list[TryKey]:
        """Fold reports per task instance and CAS them; returns the in-flight keys whose CAS missed."""
        graphs = await step.graphs.load(step.conn, {r.version_id for r in rows})
        rows = step.usable(rows, graphs)
        by_key = {(r.dag_id, r.run_id, r.task_id, r.map_index): r for r in rows}
        updates: dict[int, list[StatusUpdate]] = defaultdict(list)
        facts: dict[tuple[int, int], TryFacts] = {}
        outputs: dict[tuple[int, int], CheckedOutputs] = {}
        for update in batch:
            row = by_key.get((update.key.dag_id, update.key.run_id, update.key.task_id, update.key.map_index))
            if row is None:
                log.debug("report for an unknown task instance", extra={"try": str(update.key)})
                continue
            if update.state == "success" and self._declares_outputs(row.version_id, graphs):
                update = self._checked(update, row, graphs, outputs)
            if update.state == "failed":
                update = skipped_by_exit_code(update, graphs[row.version_id].task(row.task_id))
            updates[row.id].append(update)
            fold_try_facts(facts, row.id, update)
        rows_by_id = {r.id: r for r in rows}
        transitions: list[Transition] = []
        for ti_id, ups in updates.items():
            row = rows_by_id[ti_id]
            try:
                folded = fold_reports(row, ups, graphs[row.version_id].task(row.task_id),
                                      max_retry_delay=self.max_retry_delay)
            except Exception as exc:  # containment: this task instance's reports, whatever they make us do
                step.fail("task", ti_id, exc)
                continue
            if folded is not None:
                transitions.append(folded)
        try_changes = [self._try_change(key, f, outputs) for key, f in facts.items()] if record_tries else []
        applied = await ti_store.apply_transitions(step.conn, transitions, step.now, step.term, try_changes=try_changes)
        if tracing.enabled():  # once per try: only the reports whose transition was applied
            self._trace_ended([(u, r) for u in batch if (r := by_key.get(
                (u.key.dag_id, u.key.run_id, u.key.task_id, u.key.map_index))) is not None and r.id in applied])
        await step.after_transitions([t for t in transitions if t.ti_id in applied], rows_by_id, graphs)
        missed: list[TryKey] = []
        for t in transitions:
            row = rows_by_id[t.ti_id]
            key = try_key(row.dag_id, row.run_id, row.task_id, row.try_number, row.map_index, row.id)
            entry = self.inflight.get(key)
            if t.ti_id not in applied:
                if entry is not None:
                    missed.append(key)
            elif t.new_state == "running" and entry is not None:
                entry.state, entry.started_at = "running", t.started_at
            else:
                self.inflight.pop(key, None)
        return missed

    def _trace_ended(self, batch: Sequence[tuple[StatusUpdate, LiveTaskInstance]]) -> None:
        """The ended tries' spans (leoflow.tracing), started when they started running: a
        ``running`` report in the same batch, what this leader saw, else what the row says (a try
        adopted from an earlier leader, whose ``running`` report this one never saw)."""
        began = {u.key: u.at for u, _ in batch if u.state == "running"}
        for update, row in batch:
            if update.state == "running":
                continue
            entry = self.inflight.get(update.key)
            started = began.get(update.key) or (entry.started_at if entry is not None else None) or row.started_at
            tracing.try_ended(update.key, update.state, started, update.at, exit_code=update.exit_code,
                              reason=update.reason)

    def _declares_outputs(self, version_id: int, graphs: dict[int, DagGraph]) -> bool:
        declaring = self._declaring.get(version_id)
        if declaring is None:
            if len(self._declaring) >= _DECLARING_CACHE:
                self._declaring.clear()
            declaring = self._declaring[version_id] = any(t.outputs for t in graphs[version_id].tasks.values())
        return declaring

    def _checked(self, update: StatusUpdate, row: LiveTaskInstance, graphs: dict[int, DagGraph],
                 outputs: dict[tuple[int, int], CheckedOutputs]) -> StatusUpdate:
        """A success as it counts: checked against the task's declared outputs (see the module docstring)."""
        task = graphs[row.version_id].task(row.task_id)
        if task is None or not task.outputs:
            return update
        try:
            checked = check_outputs(update.outputs or b"", task.outputs, termination_message=self.termination_message)
        except OutputsRejected as rejected:
            return update._replace(state="failed", reason=rejected.reason, outputs=None)
        outputs[(row.id, update.key.try_number)] = checked
        return update

    @staticmethod
    def _try_change(key: tuple[int, int], f: TryFacts, outputs: dict[tuple[int, int], CheckedOutputs]) -> TryChange:
        change = TryChange(key[0], key[1], f.state, f.started_at, f.ended_at, f.exit_code, f.reason, f.executor_ref)
        checked = outputs.get(key) if f.state == "success" else None
        if checked is not None:
            change.outputs = json.dumps(checked.values, ensure_ascii=False, separators=(",", ":"))
            change.outputs_bytes = checked.size
        return change
