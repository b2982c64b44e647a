"""How many executor reports one step may take: bounded by the rows they fan out to, not only by count.

``batch_size`` bounds the reports a step applies, but not what they set off: a root's success is
counted on each of its direct downstream, a final failure marks its doomed descendants. With
2,000 reports of roots that have 98 children each, one step counted 196,000 outcomes in one
statement and held them all in memory (the leader peaked at 308 MB); DAGs may have 10,000 tasks
and 50,000 edges, so a wide DAG with many runs whose roots end together could take a leader out
of memory — and then the next leader, which inherits the same inbox.

So the scheduler takes reports from its inbox in order until their fan-out reaches a row budget,
always at least one (a single report is bounded by its DAG's size). The fan-out of a report is
known before the step: its try's version (the in-flight entry, or one read for reports of tries
this term did not queue) and that version's cached graph (:meth:`DagGraph.outcome_rows`).

The other parts of a step that set off rows per entity take the same budget
(:mod:`leoflow.scheduler.periodic`, :mod:`leoflow.scheduler.queueing`): starting a run creates
its task instances, a task's timeout may doom its descendants, an expired run cancels its
unfinished tasks, an empty task releases its downstream. Each takes entities while their rows
fit, at least one, and the rest follow on the next tick at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from leoflow.model.spec.graph import DagGraph
from leoflow.model.tries import StatusUpdate


class Fanout(NamedTuple):
    """What applying one report may set off: the rows it touches (the step's budget) and the tasks
    it may queue in the write that counts it (what a split tick's other parts keep room for)."""

    rows: int
    queues: frozenset[str]


def report_fanout(update: StatusUpdate, graph: DagGraph | None, max_tries: int) -> Fanout:
    """What applying ``update`` costs a step (its rows) and may queue in the write that counts it
    (:func:`report_queues`): the step's budget takes the first, a split tick's parts reserve the second."""
    return Fanout(report_rows(update, graph, max_tries), report_queues(update, graph))


def report_rows(update: StatusUpdate, graph: DagGraph | None, max_tries: int) -> int:
    """Rows a step touches to apply ``update``: its own task instance, plus what its end counts.

    ``running`` ends nothing. Without the graph (a version not compiled yet, or broken — its runs
    fail without counting anything), only the report's own row is known.
    """
    if graph is None or update.state == "running":
        return 1
    if update.state == "failed":
        return failure_rows(graph, update.key.task_id, update.key.try_number, max_tries)
    return 1 + graph.outcome_rows(update.key.task_id, failed=False)


def report_queues(update: StatusUpdate, graph: DagGraph | None) -> frozenset[str]:
    """The tasks of its run that applying ``update`` may queue in the write that counts it.

    Only a success queues there (:meth:`DagGraph.queued_by_success`): a failure, a skip and what
    they cascade to are counted but never make a task ready to run, a retry is queued by the
    round, and a report without its graph counts nothing.
    """
    if graph is None or update.state != "success":
        return frozenset()
    return graph.queued_by_success(update.key.task_id)


def failure_rows(graph: DagGraph, task_id: str, try_number: int, max_tries: int) -> int:
    """Rows a step touches when try ``try_number`` of ``task_id`` fails (a report or a timeout): its
    own row, plus its doomed descendants when no try is left (with one left it goes up for retry)."""
    if try_number < max_tries:
        return 1
    return 1 + graph.outcome_rows(task_id, failed=True)


def within_budget(costs: Iterable[int], budget: int) -> int:
    """How many of the leading ``costs`` fit in ``budget``; at least one if there is any, so a
    report costlier than the whole budget still goes through, alone."""
    taken = spent = 0
    for cost in costs:
        if taken and spent + cost > budget:
            break
        taken += 1
        spent += cost
    return taken
