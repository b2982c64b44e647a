"""One fenced transaction of the scheduler, and what must be true before it commits.

Every scheduling write happens inside a :class:`Step`. Whatever the step did — reports applied,
tasks queued, timeouts, entities failed — it collects the consequences as it goes, and
:meth:`Step.settle` draws them before the commit:

- entities the step could not handle (:class:`~leoflow.scheduler.containment.Fault`) are failed
  durably: task instances ``failed`` (their downstream decided by their trigger rules), runs
  ``failed``, DAG schedules stopped;
- every run in which a task reached a final state (``touched``) is finished if nothing in it is
  still active, **in this same transaction** (issue 21: a run is terminal the moment its last
  task is, whatever the DAG's shape; the periodic sweep only repairs what a bug left behind) —
  or, if it has exit tasks (``on_exit``), its body is: the exit tasks are created then, in this
  transaction too, and become candidates (ADR 0014, decision 7).

Every task that reached a final state is counted on its direct downstream and their trigger
rules decided (:meth:`Step.propagate`, :mod:`leoflow.model.spec.trigger_rules`). Tasks that became
ready in the step (their rule says run, due retries, roots of started runs) are kept as
``candidates`` so the step can queue them without scanning for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar

from leoflow.db.connection.database import Connection
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.datasets import events as dataset_events
from leoflow.db.stores.datasets.events import Produced
from leoflow.db.stores.runs import endings as run_endings
from leoflow.db.stores.runs import exits as run_exits
from leoflow.db.stores.runs.endings import FinishedRun
from leoflow.db.stores.task_instances import downstream as ti_downstream
from leoflow.db.stores.task_instances import queueing as queue_store
from leoflow.db.stores.task_instances.downstream import Counted
from leoflow.db.stores.task_instances.queueing import QueuedTask, QueueRoom
from leoflow.db.stores.task_instances.transitions import ReadyTask, TaskInstanceRow, Transition
from leoflow.db.stores.tries import TryToKill
from leoflow.model.spec.graph import DagGraph
from leoflow.model.spec.trigger_rules import decide
from leoflow.model.tries import StatusUpdate, TaskLaunch
from leoflow.scheduler.containment import EntityKind, Fault, contained
from leoflow.scheduler.graphs import VersionGraphs
from leoflow.scheduler.rendering import Unrendered, render_launches


class OfRun(Protocol):
    """Anything that belongs to a run of a DAG version (a task instance row, a queued try)."""

    @property
    def run_pk(self) -> int: ...

    @property
    def version_id(self) -> int: ...


R = TypeVar("R", bound=OfRun)


class Launcher(Protocol):
    """Turns tries a step queued into launches (the scheduler's :class:`~leoflow.scheduler.queueing.Queuer`)."""

    def room(self) -> QueueRoom: ...

    def launch(self, step: Step, graphs: Mapping[int, DagGraph], queued: Sequence[QueuedTask]) -> None: ...

#: Final task states that end a task for good (``up_for_retry`` is not one: it will run again).
FINAL = ("success", "failed", "upstream_failed", "skipped", "cancelled")


@dataclass(slots=True)
class Ended:
    """A task instance that reached a final state in this step: its downstream must hear of it."""

    run_pk: int
    version_id: int
    task_id: str
    state: str


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
    #: Launches of tasks with ``{{ … }}`` references, rendered by :meth:`settle` (one read for all);
    #: ``failed`` reports of the tries whose references could not be resolved (to the inbox after the commit).
    unrendered: list[Unrendered] = field(default_factory=list)
    refused: list[StatusUpdate] = field(default_factory=list)
    finished: list[FinishedRun] = field(default_factory=list)
    #: Task transitions applied, by new state (metrics after the commit).
    transitions: Counter[str] = field(default_factory=Counter)
    #: DAGs found due, scheduled runs created, runs started, runs whose exit tasks were created.
    due: int = 0
    created: int = 0
    started: int = 0
    exits_started: int = 0
    #: Dataset events recorded by producing tasks' successes; runs dataset events triggered.
    dataset_events: int = 0
    dataset_runs: int = 0
    #: Consuming DAGs' queue rows those events went to (their runs can start in this very step).
    dataset_queued: int = 0
    #: The same by DAG: the producing DAG's events, the consuming DAG's runs (per-DAG metrics).
    dataset_events_by_dag: Counter[str] = field(default_factory=Counter)
    dataset_runs_by_dag: Counter[str] = field(default_factory=Counter)
    #: Look for tries to kill before the commit (timeouts, failed entities, the periodic check).
    kill_check: bool = False
    #: Queues the tasks an upstream's success makes ready in the write that counts it, when
    #: their pool has room (:func:`~leoflow.db.stores.task_instances.queueing.count_and_queue`). None: only count
    #: (the isolation of a failing step, which must blame each task instance on its own).
    launcher: Launcher | None = None

    def busy(self) -> bool:
        """Did the step change anything (the loop then ticks again at once)?"""
        return bool(self.transitions or self.launches or self.finished or self.faults or self.created
                    or self.started or self.due or self.refused or self.exits_started or self.dataset_runs)

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

    # ------------------------------------------------------------------ consequences of transitions

    async def after_transitions(self, applied: Sequence[Transition], rows: Mapping[int, TaskInstanceRow],
                                graphs: Mapping[int, DagGraph]) -> None:
        """What applied transitions do downstream: count outcomes, retry now, and touch their runs;
        a success of a task with ``produces`` records its dataset events in this transaction."""
        ended: list[Ended] = []
        produced: list[Produced] = []
        for t in applied:
            row = rows[t.ti_id]
            self.transitions[t.new_state] += 1
            if t.new_state == "success" and row.version_id in graphs:
                task = graphs[row.version_id].tasks.get(row.task_id)
                if task is not None and task.produces:
                    produced += [Produced(row.id, t.try_number, uri) for uri in task.produces]
                    self.dataset_events_by_dag[row.dag_id] += len(task.produces)
            if t.new_state in FINAL:
                self.touch([row.run_pk])
                ended.append(Ended(row.run_pk, row.version_id, row.task_id, t.new_state))
            else:
                self.active.add(row.run_pk)
            # A retry without delay is ready in this very step (the database sets next_try_at = now()).
            if t.new_state == "up_for_retry" and t.retry_after is not None and t.retry_after <= 0:
                self.candidates[row.id] = ReadyTask(
                    id=row.id, run_pk=row.run_pk, task_id=row.task_id, state="up_for_retry",
                    try_number=row.try_number, max_tries=row.max_tries, dag_id=row.dag_id, run_id=row.run_id,
                    version_id=row.version_id)
        if produced:
            recorded = await dataset_events.record_task_events(self.conn, produced, self.now)
            self.dataset_events += recorded.events
            self.dataset_queued += recorded.queued
        await self.propagate(ended)

    async def propagate(self, ended: Sequence[Ended]) -> None:
        """Count each task's final state on its direct downstream and decide their trigger rules,
        level by level, until no decision ends another task.

        A failure first dooms, in one statement, every descendant reached through rules that
        need success (:meth:`~leoflow.model.spec.graph.DagGraph.doomed_by`); only the edges leaving
        that closure are counted. So a DAG of default rules costs what it always did (one
        statement per success, one per failure) and other rules one statement per level.
        """
        while ended:
            graphs = await self.graphs.load(self.conn, {e.version_id for e in ended})
            versions = {e.run_pk: e.version_id for e in ended}
            outcomes: list[tuple[int, str, str]] = []
            doomed: list[tuple[int, str]] = []
            closures: dict[int, set[str]] = {}
            for e in ended:
                graph = graphs.get(e.version_id)
                if graph is None:
                    self.fail_run(e.run_pk, self.graphs.broken(e.version_id) or "scheduler error: DAG version missing")
                    continue
                try:
                    downstream = graph.downstream[e.task_id]
                    if e.state in ("failed", "upstream_failed"):
                        closure = graph.doomed_by(e.task_id)
                        closures.setdefault(e.run_pk, set()).update(closure)
                        doomed.extend((e.run_pk, d) for d in closure)
                        outcomes.extend((e.run_pk, d, e.state) for d in downstream if d not in closure)
                    elif e.state in ("success", "skipped"):
                        outcomes.extend((e.run_pk, d, e.state) for d in downstream)
                except Exception as exc:  # containment: the graph of this one task's version
                    self.fail("run", e.run_pk, exc)
            marked = await ti_downstream.mark_upstream_failed(self.conn, doomed, self.now, self.term)
            if marked:
                self.transitions["upstream_failed"] += len(marked)
                self.touch(m.run_pk for m in marked)
            for m in marked:  # the edges leaving the closure
                graph = graphs[versions[m.run_pk]]
                outcomes.extend((m.run_pk, d, m.state) for d in graph.downstream[m.task_id]
                                if d not in closures[m.run_pk])
            ended = await self._decide(await self._count(outcomes, graphs, versions))

    async def _count(self, outcomes: Sequence[tuple[int, str, str]], graphs: Mapping[int, DagGraph],
                     versions: Mapping[int, int]) -> list[Counted]:
        """Count outcomes on their task instances; with a launcher, queue in the same write those
        that become ready and fit their pool (their launches join the step's)."""
        if self.launcher is None or not outcomes:
            return await ti_downstream.count_outcomes(self.conn, outcomes, self.now)
        queueable = {run_pk: graphs[v].queued_on_success for run_pk, v in versions.items() if v in graphs}
        eligible = [outcome == "success" and task_id in queueable.get(run_pk, ())
                    for run_pk, task_id, outcome in outcomes]
        if not any(eligible):
            return await ti_downstream.count_outcomes(self.conn, outcomes, self.now)
        done = await queue_store.count_and_queue(self.conn, outcomes, eligible, self.now, self.term,
                                                 self.launcher.room())
        if done.queued:
            self.launcher.launch(self, graphs, done.queued)
        return done.counted

    async def counted(self, counted: Sequence[ti_downstream.Counted]) -> None:
        """Task instances whose upstream counters a statement changed: decide them and propagate."""
        await self.propagate(await self._decide(counted))

    async def decide_ready(self, decisions: Sequence[tuple[int, str]], rows: Mapping[int, ReadyTask], *,
                           reasons: Mapping[int, str] | None = None) -> None:
        """Ready task instances (id, ``upstream_failed`` | ``skipped``) their rule ends unrun, or (id,
        ``skipped`` | ``failed``) their ``when`` does, with ``reasons`` by id."""
        await self.propagate(await self._end_unrun(decisions, {rows[i].run_pk: rows[i].version_id
                                                               for i, _ in decisions}, reasons))

    async def _end_unrun(self, decisions: Sequence[tuple[int, str]], versions: Mapping[int, int],
                         reasons: Mapping[int, str] | None = None) -> list[Ended]:
        """Pending task instances (id, state) ended unrun; ``versions`` by run_pk."""
        decided = await ti_downstream.decide_pending(self.conn, decisions, self.now, self.term, reasons)
        for d in decided:
            self.transitions[d.state] += 1
        self.touch(d.run_pk for d in decided)
        return [Ended(d.run_pk, versions[d.run_pk], d.task_id, d.state) for d in decided]

    async def _decide(self, counted: Sequence[ti_downstream.Counted]) -> list[Ended]:
        """Apply the trigger rules to counted task instances; returns those the rules ended."""
        if not counted:
            return []
        graphs = await self.graphs.load(self.conn, {c.task.version_id for c in counted})
        early: dict[int, ReadyTask] = {}
        final: list[tuple[int, str]] = []
        versions: dict[int, int] = {}
        for c in counted:
            graph = graphs.get(c.task.version_id)
            task = graph.task(c.task.task_id) if graph is not None else None
            if task is None:
                self.fail("task", c.task.id, LookupError(f"task {c.task.task_id!r} is not in its DAG version"))
                continue
            decision = decide(task.trigger_rule, c.counts)
            if decision == "run" and c.counts.pending <= 0:
                self.add_candidates([c.task])
            elif decision == "run":
                early[c.task.id] = c.task
            elif decision == "wait":
                self.active.add(c.task.run_pk)
            else:
                final.append((c.task.id, decision))
                versions[c.task.run_pk] = c.task.version_id
        released = await ti_downstream.release_early(self.conn, list(early), self.now)
        self.add_candidates(early[i] for i in sorted(released))
        return await self._end_unrun(final, versions)

    # ------------------------------------------------------------------ before the commit

    async def settle(self) -> list[FinishedRun]:
        """Write the pending faults, then finish every touched run that is complete; returns those."""
        while self.pending_faults:
            await self._write_faults()
        runs, self.touched = sorted(self.touched - self.active), set()
        endings = await run_endings.finish_runs(self.conn, runs, self.now, self.term)
        finished = endings.finished
        self.finished.extend(finished)
        await self.start_exits(endings.bodies_ended)
        if self.unrendered:
            pending, self.unrendered = self.unrendered, []
            launches, refused = await render_launches(self.conn, pending, self.now)
            self.launches += launches
            self.refused += refused
        return finished

    async def start_exits(self, run_pks: Sequence[int]) -> None:
        """Runs whose body just ended: their exit tasks' rows, the ready ones candidates of this step."""
        if run_pks:
            self.add_candidates(await run_exits.create_exit_tasks(self.conn, run_pks, self.now, self.term))
            self.exits_started += len(run_pks)

    async def _write_faults(self) -> None:
        pending, self.pending_faults = self.pending_faults, []
        tasks = {f.entity: f.reason for f in pending if f.kind == "task"}
        runs = {f.entity: f.reason for f in pending if f.kind == "run"}
        dags = {f.entity: f.reason for f in pending if f.kind == "dag"}
        failed = await ti_downstream.fail_task_instances(
            self.conn, [(int(k), v) for k, v in tasks.items()], self.now, self.term)
        graphs = await self.graphs.load(self.conn, {f.version_id for f in failed})
        ended: list[Ended] = []
        for task in failed:
            self.touch([task.run_pk])
            if task.version_id in graphs:
                ended.append(Ended(task.run_pk, task.version_id, task.task_id, "failed"))
            else:  # no graph to follow: fail the task's whole run
                self.fail_run(task.run_pk, tasks[task.ti_id])
        await self.propagate(ended)
        self.transitions["failed"] += len(failed)
        self.finished.extend(await run_endings.fail_runs(
            self.conn, [(int(k), v) for k, v in runs.items()], self.now, self.term))
        await dag_store.stop_schedules(self.conn, [(str(k), v) for k, v in dags.items()], self.now)
        self.faults.extend(pending)
