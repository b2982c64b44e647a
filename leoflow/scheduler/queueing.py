"""Ready tasks → queued tries (or, for ``kind: empty`` tasks, success on the spot), inside a step.

What is ready comes from two places: the step's ``candidates`` (tasks its own transitions made
ready: released downstream, due retries, roots of runs it started) and, when the scheduler
cannot know otherwise, a scan of the ``ix_task_instances_ready`` index (at the start of a term,
once per interval, after a NOTIFY, after a failed step, and while a backlog remains). The
common path — a report releases the next task of a chain — therefore queues it without a scan.

Each round is one statement per kind: empty tasks succeed and release their own downstream in
one statement that returns what became ready (a chain of empty tasks resolves in one step,
one round trip per link); container tasks are queued up to the free ``LEOFLOW_PARALLELISM``
slots in one statement that also returns what the launch needs of the run.

Containment: a task missing from its version, a run whose ``conf`` cannot be decoded, a launch
that cannot be built — each fails its own task or run (:class:`~leoflow.scheduler.step.Step`),
never the round.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from leoflow.db import completion_store
from leoflow.db import scheduler_store as store
from leoflow.db.scheduler_store import QueuedTry, ReadyTask
from leoflow.model.graph import DagGraph
from leoflow.model.run_context import RunContext, task_environment
from leoflow.model.tries import TaskLaunch, TryKey
from leoflow.model.trigger_rules import UpstreamCounts, decide
from leoflow.scheduler.containment import EntityKind
from leoflow.scheduler.step import Step
from leoflow.scheduler.transitions import InFlightTry

#: Rounds per step while empty tasks keep making more tasks ready (a chain of empty tasks
#: resolves one link per round; each round is one statement).
MAX_ROUNDS = 200
#: Ready rows handled per step, in units of the batch size (bounds a step's transaction).
ROW_BUDGET = 5


@dataclass
class QueueOutcome:
    #: Ready tasks may remain that the step did not queue (no free slot, budget spent, full scan).
    backlog: bool = False


def build_launch(graph: DagGraph, key: TryKey, task_try_id: int, term: int, run: RunContext) -> TaskLaunch:
    task = graph.tasks[key.task_id]
    return TaskLaunch(key=key, task_try_id=task_try_id, term=term, image=task.image, command=task.command,
                      args=task.args, env=task_environment(key, run, task.env), resources=task.resources,
                      timeout_seconds=task.timeout_seconds, pod=task.pod)


def run_context(conf_json: str, logical_date: object) -> RunContext:
    """A run's context from its stored ``conf`` text (raises if it cannot be decoded: the run's fault)."""
    conf = json.loads(conf_json) if conf_json else {}
    if not isinstance(conf, dict):
        raise ValueError(f"conf is a JSON {type(conf).__name__}, not an object")
    return RunContext(conf=conf, logical_date=logical_date)  # type: ignore[arg-type]


class Queuer:
    """Queues ready tasks for one term (see the module docstring)."""

    def __init__(self, inflight: dict[TryKey, InFlightTry], quarantine: set[tuple[EntityKind, int | str]], *,
                 parallelism: int, batch_size: int) -> None:
        self.inflight = inflight
        self.quarantine = quarantine
        self.parallelism = parallelism
        self.batch_size = batch_size

    async def queue(self, step: Step, *, scan: bool) -> QueueOutcome:
        outcome = QueueOutcome()
        if scan:
            scanned = await store.ready_task_instances(step.conn, self.batch_size)
            step.add_candidates(scanned)
            outcome.backlog = len(scanned) >= self.batch_size
        budget = ROW_BUDGET * self.batch_size
        for _ in range(MAX_ROUNDS):
            if not step.candidates:
                return outcome
            if budget <= 0:
                break
            ordered = sorted(step.candidates)
            take = [step.candidates.pop(i) for i in ordered[:self.batch_size]]
            budget -= len(take)
            take = [r for r in take if ("task", r.id) not in self.quarantine]
            if not await self._round(step, take):
                outcome.backlog = True
        outcome.backlog = outcome.backlog or bool(step.candidates)
        step.candidates.clear()  # left for the next scan (the backlog flag asks for one)
        return outcome

    async def _round(self, step: Step, ready: Sequence[ReadyTask]) -> bool:
        """Succeed the empty ones, queue the others; False if some could not be queued (no slot)."""
        graphs = await step.graphs.load(step.conn, {r.version_id for r in ready})
        empties: list[ReadyTask] = []
        containers: list[ReadyTask] = []
        edges: list[tuple[int, int, str]] = []
        decided: list[tuple[int, str]] = []
        for r in step.usable(ready, graphs):
            task = graphs[r.version_id].task(r.task_id)
            if task is None:
                step.fail("task", r.id, LookupError(f"task {r.task_id!r} is not in its DAG version"))
                continue
            decision = "run" if r.state != "pending" else decide(task.trigger_rule, UpstreamCounts(
                0, r.upstream_successes, r.upstream_failures, r.upstream_skips))
            if decision != "run":  # left ready by a writer that reset it; its rule says otherwise
                decided.append((r.id, decision))
            elif task.kind == "empty":
                empties.append(r)
                edges.extend((r.id, r.run_pk, d) for d in graphs[r.version_id].downstream.get(r.task_id, ()))
            else:
                containers.append(r)
        if decided:
            await step.decide_ready(decided, {r.id: r for r in ready})
        if empties:
            done = await completion_store.succeed_empty_tasks(step.conn, [r.id for r in empties], edges, step.now,
                                                           step.term)
            step.transitions["success"] += len(done.succeeded)
            step.touch(run_pk for _, run_pk in done.succeeded)
            await step.counted(done.counted)
        if not containers:
            return True
        queued = await store.queue_task_instances(step.conn, containers, step.now, step.term,
                                                  parallelism=self.parallelism)
        self._launches(step, {r.id: r for r in containers}, graphs, queued)
        return len(queued) == len(containers)

    def _launches(self, step: Step, rows: dict[int, ReadyTask], graphs: dict[int, DagGraph],
                  queued: Sequence[QueuedTry]) -> None:
        if len(self.inflight) > 4 * max(self.parallelism, self.batch_size):
            self.inflight.clear()  # entries of tries that never reported; the slow path covers them
        runs: dict[int, RunContext | None] = {}
        for q in queued:
            r = rows[q.task_instance_id]
            if r.run_pk not in runs:
                try:
                    runs[r.run_pk] = run_context(q.conf_json, q.logical_date)
                except Exception as exc:  # containment: this run's stored conf
                    runs[r.run_pk] = None
                    step.fail("run", r.run_pk, exc)
            run = runs[r.run_pk]
            if run is None:
                continue
            key = TryKey(r.dag_id, r.run_id, r.task_id, q.try_number)
            try:
                launch = build_launch(graphs[r.version_id], key, q.task_try_id, step.term, run)
            except Exception as exc:  # containment: this task's launch
                step.fail("task", r.id, exc)
                continue
            self.inflight[key] = InFlightTry(r.id, r.run_pk, r.task_id, q.try_number, r.max_tries, r.dag_id,
                                             r.run_id, r.version_id)
            step.launches.append(launch)
            step.active.add(r.run_pk)
