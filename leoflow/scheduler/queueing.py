"""Ready tasks → queued tries (or, for ``kind: empty`` tasks, success on the spot), inside a step.

Container tasks are queued by pool, priority and ``max_active_tasks``
(:mod:`leoflow.model.spec.fairness`): one read (:func:`leoflow.db.stores.task_instances.queueing.pick_ready`)
gives every pool's free slots to its best ready tasks, wherever they came from, so a task that
became ready in this step never jumps ahead of a better one that has waited for a slot. It runs
whenever slots may have been freed or tasks became ready — a step that applied transitions or
failed entities, a step with candidates, and every scan (the start of a term, once per interval,
after a NOTIFY, after a failed step, and while work is held back) — and reads only as many ready
rows as there are free slots, never the backlog.

Most tasks never wait for this round: when an upstream's success completes their counters and
their pool has room for all of them with nothing ready waiting in it, the step queues them in the
write that counts that success (:func:`leoflow.db.stores.task_instances.queueing.count_and_queue`, through
:meth:`Queuer.room` and :meth:`Queuer.launch`), one update per row instead of three statements.

Empty tasks take no slot and have no pool: the step's ``candidates`` (tasks its own transitions
made ready: released downstream, due retries, roots of runs it started) and, on a scan, the
ready rows without a pool resolve them; they succeed and release their own downstream in one
statement that returns what became ready (a chain of empty tasks resolves in one step, one round
trip per link). Rows without a pool that are container tasks were written by an older release:
they get their pool and priority from the spec and are queued like the others.

Containment: a task missing from its version, a run whose ``conf`` cannot be decoded, a launch
that cannot be built — each fails its own task or run (:class:`~leoflow.scheduler.step.Step`),
never the round.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from leoflow import tracing
from leoflow.db.stores.task_instances import downstream as ti_downstream
from leoflow.db.stores.task_instances import queueing as queue_store
from leoflow.db.stores.task_instances.queueing import QueuedTask, QueueRoom
from leoflow.db.stores.task_instances.transitions import ReadyTask
from leoflow.model.run_context import RunContext, task_environment
from leoflow.model.spec.dag import TaskSpec
from leoflow.model.spec.fairness import DEFAULT_POOL
from leoflow.model.spec.graph import DagGraph
from leoflow.model.spec.trigger_rules import UpstreamCounts, decide
from leoflow.model.tries import TaskLaunch, TryKey, try_key
from leoflow.scheduler.conditions import apply_conditions
from leoflow.scheduler.containment import EntityKind
from leoflow.scheduler.mapping import expand_mapped
from leoflow.scheduler.rendering import Unrendered
from leoflow.scheduler.step import Step
from leoflow.scheduler.transitions import InFlightTry
from leoflow.scheduler.waits import hold_waiting

#: Rounds per step while empty tasks keep making more tasks ready (a chain of empty tasks
#: resolves one link per round; each round is one statement), or while DAG limits hold tasks back
#: that other tasks of the same pool could replace.
MAX_ROUNDS = 200
#: Ready rows handled per step, in units of the batch size (bounds a step's transaction).
ROW_BUDGET = 5


@dataclass
class QueueOutcome:
    #: Ready tasks may remain that a free slot could take (budget spent, full scan, DAG limits).
    backlog: bool = False


def build_launch(task: TaskSpec, key: TryKey, task_try_id: int, term: int, run: RunContext) -> TaskLaunch:
    # Positional, in TaskLaunch's field order: a step builds hundreds, and by keyword each took twice as
    # long (0.95 against 0.48 µs).
    env = task_environment(key, run, task.env)
    tracing.add_traceparent(env, key)  # TRACEPARENT: the task's spans join its run's trace (when tracing is on)
    return TaskLaunch(key, task_try_id, term, task.image, task.command, task.args, env, task.resources,
                      task.timeout_seconds, task.pod, bool(task.outputs), task.artifacts or None)


def run_context(conf_json: str, logical_date: object, body_state: str | None = None,
                body_reason: str | None = None, triggering_events: str | None = None,
                interval: tuple[datetime | None, datetime | None] = (None, None)) -> RunContext:
    """A run's context from its stored ``conf`` text (raises if it cannot be decoded: the run's fault)
    and, while its exit tasks run, what its body decided."""
    conf = json.loads(conf_json) if conf_json else {}
    if not isinstance(conf, dict):
        raise ValueError(f"conf is a JSON {type(conf).__name__}, not an object")
    return RunContext(conf=conf, logical_date=logical_date,  # type: ignore[arg-type]
                      state=body_state, reason=body_reason, triggering_events=triggering_events,
                      data_interval_start=interval[0], data_interval_end=interval[1])


def _still_runnable(step: Step, ready: Sequence[ReadyTask], graphs: dict[int, DagGraph],
                    decided: list[tuple[int, str]]) -> list[tuple[ReadyTask, TaskSpec]]:
    """The ready rows to run, with their task's spec, after checking each one's trigger rule again.

    A writer that reset task instances (a clear, a backfill's rerun) may have left one ready
    although its rule now says otherwise: those go to ``decided`` as (id, state) for
    :meth:`Step.decide_ready`. Rows whose version did not compile, or lacks the task, are failed
    on the step (containment).
    """
    runnable: list[tuple[ReadyTask, TaskSpec]] = []
    for r in step.usable(ready, graphs):
        task = graphs[r.version_id].task(r.task_id)
        if task is None:
            step.fail("task", r.id, LookupError(f"task {r.task_id!r} is not in its DAG version"))
            continue
        decision = "run" if r.state != "pending" else decide(task.trigger_rule, UpstreamCounts(
            0, r.upstream_successes, r.upstream_failures, r.upstream_skips))
        if decision == "run":
            runnable.append((r, task))
        else:
            decided.append((r.id, decision))
    return runnable


class Queuer:
    """Queues ready tasks for one term (see the module docstring)."""

    def __init__(self, inflight: dict[TryKey, InFlightTry], quarantine: set[tuple[EntityKind, int | str]], *,
                 parallelism: int, batch_size: int) -> None:
        self.inflight = inflight
        self.quarantine = quarantine
        self.parallelism = parallelism
        self.batch_size = batch_size

    async def queue(self, step: Step, *, scan: bool, only: Sequence[int] | None = None,
                    pick: bool = True) -> QueueOutcome:
        """Resolve the step's candidates and queue what the pools have room for.

        ``only``: queue no task instance but these (the isolation of a failing step bisects over them).
        ``pick=False``: resolve only (empty tasks end, container tasks are classified), never pick
        for slots — one part of a split start, beside another, must not (ADR 0022); the outcome's
        backlog then says whether a container task is waiting for the pick of a later step.
        """
        outcome = QueueOutcome()
        if scan:
            unclassified = await queue_store.unclassified_ready(step.conn, self.batch_size)
            step.add_candidates(unclassified)
            outcome.backlog = len(unclassified) >= self.batch_size
        # Slots may be free: the step finished, failed or retried tasks, or the caller scans.
        look = scan or bool(step.transitions) or bool(step.pending_faults) or bool(step.faults)
        budget = ROW_BUDGET * self.batch_size
        containers_seen = False
        for _ in range(MAX_ROUNDS):
            if step.candidates:
                if budget <= 0:
                    break
                ordered = sorted(step.candidates)
                take = [step.candidates.pop(i) for i in ordered[:self.batch_size]]
                budget -= len(take)
                take = [r for r in take if ("task", r.id) not in self.quarantine]
                containers, edges = await self._resolve(step, take, max(budget, 0))
                budget -= edges
                containers_seen = containers_seen or containers
                look = containers or look
                continue
            if not pick:
                outcome.backlog = outcome.backlog or containers_seen
                break
            if not look or budget <= 0:
                break
            queued = await self._queue_containers(step, min(self.batch_size, budget), only)
            budget -= queued.count
            look = queued.more and queued.count > 0
            outcome.backlog = outcome.backlog or queued.more
        outcome.backlog = outcome.backlog or bool(step.candidates) or (look and pick)
        step.candidates.clear()  # left for the next scan (the backlog flag asks for one)
        return outcome

    async def _resolve(self, step: Step, ready: Sequence[ReadyTask], edge_budget: int) -> tuple[bool, int]:
        """Succeed the empty ones (releasing their downstream); True if any is a container task, and
        the edges counted.

        Empty tasks succeed only while their downstream edges fit ``edge_budget`` (at least one):
        a few hundred empty roots of a wide DAG must not make one statement count millions of
        rows (:mod:`leoflow.scheduler.fanout`). The others stay candidates for a later round or step.
        """
        graphs = await step.graphs.load(step.conn, {r.version_id for r in ready})
        empties: list[ReadyTask] = []
        edges: list[tuple[int, int, str]] = []
        decided: list[tuple[int, str]] = []
        deferred: list[ReadyTask] = []
        containers = False
        unclassified: list[tuple[int, str, int]] = []
        # Containers are only classified here: their conditions are decided when they are picked.
        # Tasks that wait (wait_for, depends_on_past) are parked first, before their condition or expansion.
        waited = await hold_waiting(step, _still_runnable(step, ready, graphs, decided))
        runnable, _ = await apply_conditions(step, waited, graphs, empty_only=True)
        # Mapped tasks expand here unless a condition of theirs is still to be judged (when picked).
        judged = [(r, t) for r, t in runnable if t.kind == "empty" or t.when is None]
        kept, expanded = await expand_mapped(step, judged, graphs)
        runnable = kept + [(r, t) for r, t in runnable if not (t.kind == "empty" or t.when is None)]
        containers = expanded > 0  # instances to pick for slots
        for r, task in runnable:
            if task.kind == "empty":
                downstream = graphs[r.version_id].downstream.get(r.task_id, ())
                if empties and len(edges) + len(downstream) > edge_budget:
                    deferred.append(r)
                    continue
                empties.append(r)
                edges.extend((r.id, r.run_pk, d) for d in downstream)
            else:
                containers = True
                if not r.classified:
                    unclassified.append((r.id, task.pool or DEFAULT_POOL, task.priority))
        if decided:
            await step.decide_ready(decided, {r.id: r for r in ready})
        await queue_store.classify(step.conn, unclassified)
        if empties:
            done = await ti_downstream.succeed_empty_tasks(step.conn, [r.id for r in empties], edges, step.now,
                                                           step.term)
            step.transitions["success"] += len(done.succeeded)
            step.touch(run_pk for _, run_pk in done.succeeded)
            await step.counted(done.counted)
        step.add_candidates(deferred)
        return containers, len(edges)

    async def _queue_containers(self, step: Step, limit: int, only: Sequence[int] | None) -> _Queued:
        """Pick the best ready tasks for the free slots, end those their rule says not to run, queue the rest."""
        excluded = [int(e) for kind, e in self.quarantine if kind == "task"]
        picked = await queue_store.pick_ready(step.conn, parallelism=self.parallelism, limit=limit,
                                              excluded=excluded, only=only)
        graphs = await step.graphs.load(step.conn, {r.version_id for r in picked.tasks})
        decided: list[tuple[int, str]] = []
        waited = await hold_waiting(step, _still_runnable(step, picked.tasks, graphs, decided))
        judged, ended = await apply_conditions(step, waited, graphs)
        judged, expanded = await expand_mapped(step, judged, graphs)
        ended += expanded
        runnable = [r for r, _ in judged]
        if decided:
            await step.decide_ready(decided, {r.id: r for r in picked.tasks})
        queued = await queue_store.queue_picked(step.conn, runnable, step.now, step.term)
        self.launch(step, graphs, queued)
        # A decided task leaves its slot free: another round may give it to the next one.
        return _Queued(len(queued) + len(decided) + ended, picked.more or bool(decided) or ended > 0)

    def room(self) -> QueueRoom:
        """The rules a step's one-write queueing applies
        (:func:`~leoflow.db.stores.task_instances.queueing.count_and_queue`)."""
        return QueueRoom(parallelism=self.parallelism, limit=ROW_BUDGET * self.batch_size,
                         excluded=[int(e) for kind, e in self.quarantine if kind == "task"])

    def launch(self, step: Step, graphs: Mapping[int, DagGraph], queued: Sequence[QueuedTask]) -> None:
        """Launches for tries queued in ``step`` (after its commit, the scheduler submits them)."""
        if len(self.inflight) > 4 * max(self.parallelism, self.batch_size):
            self.inflight.clear()  # entries of tries that never reported; the slow path covers them
        runs: dict[int, RunContext | None] = {}
        for q in queued:
            if q.run_pk not in runs:
                try:
                    runs[q.run_pk] = run_context(q.conf_json, q.logical_date, q.body_state, q.body_reason,
                                                 q.triggering_events, (q.data_interval_start, q.data_interval_end))
                except (ValueError, RecursionError) as exc:  # this run's stored conf: not JSON, or too deep
                    runs[q.run_pk] = None
                    step.fail("run", q.run_pk, exc)
            run = runs[q.run_pk]
            if run is None:
                continue
            key = try_key(q.dag_id, q.run_id, q.task_id, q.try_number, q.map_index, q.task_instance_id)
            try:
                task = graphs[q.version_id].task(q.task_id)
                if task is None:
                    raise LookupError(f"task {q.task_id!r} is not in its DAG version")
                launch = build_launch(task, key, q.task_try_id, step.term, run)
            except Exception as exc:  # containment: this task's launch
                step.fail("task", q.task_instance_id, exc)
                continue
            self.inflight[key] = InFlightTry(q.task_instance_id, q.run_pk, q.task_id, q.try_number, q.max_tries,
                                             q.dag_id, q.run_id, q.version_id, map_index=q.map_index)
            if task.templates is None:
                step.launches.append(launch)
            else:  # rendered before the step commits, with one read for all (leoflow.scheduler.rendering)
                step.unrendered.append(Unrendered(launch, task.templates, q.run_pk, run, task.map_over))
            step.active.add(q.run_pk)


@dataclass(frozen=True)
class _Queued:
    count: int
    more: bool
