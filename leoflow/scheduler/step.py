"""One fenced transaction of the scheduler, and what must be true before it commits.

Every scheduling write happens inside a :class:`Step`. Whatever the step did — reports applied,
tasks queued, timeouts, entities failed — it collects the consequences as it goes, and
:meth:`Step.settle` draws them before the commit:

- entities the step could not handle (:class:`~leoflow.scheduler.containment.Fault`) are failed
  durably: task instances ``failed`` (their descendants ``upstream_failed``), runs ``failed``,
  DAG schedules stopped;
- every run in which a task reached a final state (``touched``) is finished if nothing in it is
  still active, **in this same transaction** (issue 21: a run is terminal the moment its last
  task is, whatever the DAG's shape; the periodic sweep only repairs what a bug left behind).

Tasks that became ready in the step (released downstream, due retries, roots of started runs)
are kept as ``candidates`` so the step can queue them without scanning for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar

from leoflow.db import completion_store
from leoflow.db.completion_store import FinishedRun, TryToKill
from leoflow.db.database import Connection
from leoflow.db.scheduler_store import ReadyTask, TaskInstanceRow, Transition
from leoflow.model.graph import DagGraph
from leoflow.model.tries import TaskLaunch
from leoflow.scheduler.containment import EntityKind, Fault, contained
from leoflow.scheduler.graphs import VersionGraphs


class OfRun(Protocol):
    """Anything that belongs to a run of a DAG version (a task instance row, a queued try)."""

    @property
    def run_pk(self) -> int: ...

    @property
    def version_id(self) -> int: ...


R = TypeVar("R", bound=OfRun)

#: Final task states that end a task for good (``up_for_retry`` is not one: it will run again).
FINAL = ("success", "failed", "upstream_failed", "cancelled")


@dataclass
class Step:
    """The unit of work of one fenced transaction (see the module docstring)."""

    conn: Connection
    now: datetime
    term: int
    graphs: VersionGraphs
    max_retry_delay: float
    #: Runs in which a task reached a final state: finished before the commit if complete...
    touched: set[int] = field(default_factory=set)
    #: ...unless the step saw a task of theirs active after that (released, queued, running,
    #: up for retry): then they cannot be complete, and the check is skipped.
    active: set[int] = field(default_factory=set)
    #: Task instances that became ready in this step, by id.
    candidates: dict[int, ReadyTask] = field(default_factory=dict)
    #: Entities to fail before the commit, and those already written.
    pending_faults: list[Fault] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    #: Tries to hand to the executor after the commit; tries to kill after the commit.
    launches: list[TaskLaunch] = field(default_factory=list)
    kills: list[TryToKill] = field(default_factory=list)
    finished: list[FinishedRun] = field(default_factory=list)
    #: Task transitions applied, by new state (metrics after the commit).
    transitions: Counter[str] = field(default_factory=Counter)
    #: DAGs found due, scheduled runs created, runs started.
    due: int = 0
    created: int = 0
    started: int = 0
    #: Look for tries to kill before the commit (timeouts, failed entities, the periodic check).
    kill_check: bool = False

    def busy(self) -> bool:
        """Did the step change anything (the loop then ticks again at once)?"""
        return bool(self.transitions or self.launches or self.finished or self.faults or self.created
                    or self.started or self.due)

    # ------------------------------------------------------------------ recording

    def fail(self, kind: EntityKind, entity: int | str, exc: BaseException, *, reason: str | None = None) -> None:
        """Contain ``exc`` to ``entity``: it is failed before this step commits."""
        self.pending_faults.append(contained(kind, entity, exc, reason=reason))

    def fail_run(self, run_pk: int, reason: str) -> None:
        self.pending_faults.append(Fault("run", run_pk, reason))

    def usable(self, rows: Iterable[R], graphs: Mapping[int, DagGraph]) -> list[R]:
        """``rows`` whose version compiled; the runs of the others are failed with the version's reason."""
        out: list[R] = []
        for row in rows:
            if row.version_id in graphs:
                out.append(row)
            else:
                self.fail_run(row.run_pk, self.graphs.broken(row.version_id) or "scheduler error: DAG version missing")
        return out

    def add_candidates(self, rows: Iterable[ReadyTask]) -> None:
        for row in rows:
            self.candidates[row.id] = row
            self.active.add(row.run_pk)

    def touch(self, run_pks: Iterable[int]) -> None:
        """A task of each run reached a final state: the run may be complete now."""
        for run_pk in run_pks:
            self.touched.add(run_pk)
            self.active.discard(run_pk)

    def released(self, released: completion_store.Released) -> None:
        self.active.update(released.runs)
        self.add_candidates(released.ready)

    # ------------------------------------------------------------------ consequences of transitions

    async def after_transitions(self, applied: Sequence[Transition], rows: Mapping[int, TaskInstanceRow],
                                graphs: Mapping[int, DagGraph]) -> None:
        """What applied transitions do downstream: release, doom, retry now, and touch their runs."""
        release: list[tuple[int, str]] = []
        doomed: list[tuple[int, str]] = []
        for t in applied:
            row = rows[t.ti_id]
            self.transitions[t.new_state] += 1
            if t.new_state in FINAL:
                self.touch([row.run_pk])
            else:
                self.active.add(row.run_pk)
            try:
                graph = graphs[row.version_id]
                if t.new_state == "success":
                    release.extend((row.run_pk, d) for d in graph.downstream.get(row.task_id, ()))
                elif t.new_state == "failed":
                    doomed.extend((row.run_pk, d) for d in graph.descendants(row.task_id))
            except Exception as exc:  # containment: the graph of this one task's version
                self.fail("run", row.run_pk, exc)
                continue
            # A retry without delay is ready in this very step (the database sets next_try_at = now()).
            if t.new_state == "up_for_retry" and t.retry_after is not None and t.retry_after <= 0:
                self.candidates[row.id] = ReadyTask(
                    id=row.id, run_pk=row.run_pk, task_id=row.task_id, state="up_for_retry",
                    try_number=row.try_number, max_tries=row.max_tries, dag_id=row.dag_id, run_id=row.run_id,
                    version_id=row.version_id)
        self.released(await completion_store.release_downstream(self.conn, release, self.now))
        await self.doom(doomed)

    async def doom(self, pairs: Sequence[tuple[int, str]]) -> None:
        """Descendants (run_pk, task_id) of failed tasks → ``upstream_failed``."""
        marked = await completion_store.mark_upstream_failed(self.conn, pairs, self.now, self.term)
        if marked:
            self.transitions["upstream_failed"] += marked
            self.touch(run_pk for run_pk, _ in pairs)

    # ------------------------------------------------------------------ before the commit

    async def settle(self) -> list[FinishedRun]:
        """Write the pending faults, then finish every touched run that is complete; returns those."""
        while self.pending_faults:
            await self._write_faults()
        runs, self.touched = sorted(self.touched - self.active), set()
        finished = await completion_store.finish_runs(self.conn, runs, self.now, self.term)
        self.finished.extend(finished)
        return finished

    async def _write_faults(self) -> None:
        pending, self.pending_faults = self.pending_faults, []
        tasks = {f.entity: f.reason for f in pending if f.kind == "task"}
        runs = {f.entity: f.reason for f in pending if f.kind == "run"}
        dags = {f.entity: f.reason for f in pending if f.kind == "dag"}
        failed = await completion_store.fail_task_instances(
            self.conn, [(int(k), v) for k, v in tasks.items()], self.now, self.term)
        graphs = await self.graphs.load(self.conn, {f.version_id for f in failed})
        doomed: list[tuple[int, str]] = []
        for task in failed:
            self.touch([task.run_pk])
            try:
                doomed.extend((task.run_pk, d) for d in graphs[task.version_id].descendants(task.task_id))
            except Exception as exc:  # containment: no graph to follow: fail the task's whole run
                self.fail("run", task.run_pk, exc, reason=tasks[task.ti_id])
        await self.doom(doomed)
        self.transitions["failed"] += len(failed)
        self.finished.extend(await completion_store.fail_runs(
            self.conn, [(int(k), v) for k, v in runs.items()], self.now, self.term))
        await completion_store.stop_schedules(self.conn, [(str(k), v) for k, v in dags.items()], self.now)
        self.faults.extend(pending)
