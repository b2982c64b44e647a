"""Mapped tasks at queue time: a ready, unexpanded task becomes its instances (ADR 0014, decision 3).

A mapped task's row is ready like any other (its trigger rule says run, its ``when`` held). Before
it is queued, the step resolves its ``map_over`` (:func:`leoflow.model.spec.mapping.resolve`) from
the facts a condition reads too (:func:`leoflow.db.stores.task_instances.conditions.condition_inputs`:
the run's conf and the named upstream's stored outputs, one statement for a round) and, in the
step's fenced transaction:

- N ≥ 1 items: :func:`leoflow.db.stores.task_instances.mapping.expand` makes N ready instances;
  they become the step's candidates (empty ones succeed in this step, containers are picked for
  slots by the next round, ``max_parallel`` applied there). In a chained map the instances whose
  upstream instance did not succeed end at once (``upstream_failed`` / ``skipped``), counted
  downstream like any ended task;
- no item: ``skipped`` (``map_over is empty``), its ``map_count`` 0;
- a source that is not a usable list (not a list, over :data:`~leoflow.model.limits.MAP_ITEMS`,
  an upstream without the output): ``failed`` with the reason, no instance inserted, no retry (the
  same stored facts fail the same way).

All of it depends only on stored facts, so a leader that replays the step after a failover
expands the same way; the expansion is a compare-and-set, so it happens once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from leoflow.db.stores.task_instances import mapping as map_store
from leoflow.db.stores.task_instances.conditions import RunFacts, condition_inputs
from leoflow.db.stores.task_instances.transitions import ReadyTask
from leoflow.model.spec.dag import TaskSpec
from leoflow.model.spec.graph import DagGraph
from leoflow.model.spec.mapping import EMPTY, Instance, Items, MapFailed, SourceFacts, resolve
from leoflow.scheduler.step import Step


def needs_expansion(row: ReadyTask, task: TaskSpec) -> bool:
    """A ready row of a mapped task never expanded, or cleared since (``map_count`` NULL)."""
    return task.map_over is not None and row.map_count is None and row.state == "pending"


async def expand_mapped(step: Step, runnable: list[tuple[ReadyTask, TaskSpec]],
                        graphs: Mapping[int, DagGraph]) -> tuple[list[tuple[ReadyTask, TaskSpec]], int]:
    """The rows of ``runnable`` that run as they are; mapped ones are expanded (their instances become
    candidates) or ended. Returns them and how many rows were expanded or ended."""
    waiting = [(r, t) for r, t in runnable if needs_expansion(r, t)]
    if not waiting:
        return runnable, 0
    # One expansion per task: the rows of a cleared mapped task may all be ready at once.
    judged = list({(r.run_pk, r.task_id): (r, t) for r, t in reversed(waiting)}.values())
    upstream = [(r.run_pk, t.map_over.upstream) for r, t in judged
                if t.map_over is not None and t.map_over.upstream is not None]
    facts = await condition_inputs(step.conn, {r.run_pk for r, _ in judged}, upstream)
    decisions: list[tuple[int, str]] = []
    reasons: dict[int, str] = {}
    rows: dict[int, ReadyTask] = {}
    empty: list[int] = []
    for r, task in judged:
        rows[r.id] = r
        try:
            items = _items(task, facts.get(r.run_pk))
        except Exception as exc:  # MapFailed, or anything a stored conf or output makes resolving raise
            reason = str(exc) if isinstance(exc, MapFailed) else f"map_over failed: {type(exc).__name__}: {exc}"
            for same, _ in waiting:  # every row of the task (a cleared one has several)
                if (same.run_pk, same.task_id) == (r.run_pk, r.task_id):
                    rows[same.id] = same
                    decisions.append((same.id, "failed"))
                    reasons[same.id] = reason[:500]
            continue
        downstream = graphs[r.version_id].downstream.get(r.task_id, ())
        instances = await map_store.expand(step.conn, r.run_pk, r.task_id, len(items.values), task.max_parallel,
                                           downstream, step.now, step.term)
        if not items.values:
            for inst in instances:  # the one row left
                rows[inst.id] = inst
                decisions.append((inst.id, "skipped"))
                reasons[inst.id] = EMPTY
                empty.append(inst.id)
            continue
        ready: list[ReadyTask] = []
        for inst in instances:
            rows[inst.id] = inst
            how = items.ended.get(inst.map_index)
            if how is None:
                ready.append(inst)
            else:
                decisions.append((inst.id, how[0]))
                reasons[inst.id] = how[1][:500]
        step.add_candidates(ready)
    if decisions:
        await step.decide_ready(decisions, rows, reasons=reasons)
    await map_store.mark_expanded_empty(step.conn, empty)
    return [(r, t) for r, t in runnable if not needs_expansion(r, t)], len(waiting)


def _items(task: TaskSpec, facts: RunFacts | None) -> Items:
    assert task.map_over is not None
    if facts is None:
        raise MapFailed("map_over was not resolved: the run is gone")
    return resolve(task.map_over, source_facts(facts, task.map_over.upstream), task.id)


def source_facts(facts: RunFacts, upstream: str | None) -> SourceFacts:
    """What a source reads of one run, from what a condition reads of it."""
    conf = json.loads(facts.conf_json)
    params = conf if isinstance(conf, dict) else {}
    if upstream is None:
        return SourceFacts(params)
    if upstream in facts.instances:
        return SourceFacts(params, instances=[Instance(s, o) for s, o in facts.instances[upstream]])
    return SourceFacts(params, upstream_state=facts.states.get(upstream),
                       upstream_outputs=facts.outputs.get(upstream))
