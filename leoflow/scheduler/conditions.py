"""``when:`` at queue time: a ready task whose condition is false is ``skipped``, one that cannot be
evaluated ``failed`` (ADR 0014, decision 4).

A condition is evaluated once per task instance, when its trigger rule says run and it would be
queued (a first try: a retry never asks again), in the step's fenced transaction: the facts it
reads (:func:`leoflow.db.stores.task_instances.conditions.condition_inputs`, one statement for all
of a round's candidates) are the run's conf with the params' defaults, ``run.id``,
``run.logical_date``, ``run.data_interval_start/end`` and the current outputs of the ancestors it
names — all stored, none of which change while the task waits, so a leader that replays the step
after a failover decides the same.

- true: the task is queued like any other;
- false: ``skipped`` with the reason ``when was false``; its downstream counts a skip, and the
  trigger rules carry it on (``all_success`` skips, ``all_done`` runs);
- an error (a missing key, a type error, a result that is not a boolean, the values over
  :data:`~leoflow.model.limits.WHEN_ACTIVATION`): ``failed`` with the message, without a try and
  without retries (the same facts fail the same way); downstream sees a failure.

Tasks without ``when`` never come here, and stay on the one-write path of
:func:`~leoflow.db.stores.task_instances.queueing.count_and_queue` (those with one are kept off it by
:attr:`~leoflow.model.spec.graph.DagGraph.queued_on_success`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from leoflow.db.stores.task_instances.conditions import RunFacts, condition_inputs
from leoflow.db.stores.task_instances.transitions import ReadyTask
from leoflow.model.spec.dag import TaskSpec
from leoflow.model.spec.expressions import WhenFailed, activation, check_activation_size, evaluate_when
from leoflow.model.spec.graph import DagGraph
from leoflow.model.spec.params import fill_defaults
from leoflow.scheduler.step import Step

#: The reason stored on a task instance whose condition was false.
WHEN_FALSE = "when was false"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A ready task instance its condition ends without running: ``skipped`` or ``failed``, and why."""

    ti_id: int
    state: str
    reason: str


async def apply_conditions(step: Step, runnable: list[tuple[ReadyTask, TaskSpec]], graphs: Mapping[int, DagGraph],
                           *, empty_only: bool = False) -> tuple[list[tuple[ReadyTask, TaskSpec]], int]:
    """The rows of ``runnable`` to run; the others are ended on the step. Returns them and how many ended.

    ``empty_only``: judge only ``kind: empty`` tasks (the others are judged when picked for a slot).
    """
    # A mapped task's condition was judged once, before it expanded: never again per instance.
    judged = [(r, t) for r, t in runnable if t.when is not None and r.state == "pending" and r.map_index < 0
              and (not empty_only or t.kind == "empty")]
    if not judged:
        return runnable, 0
    upstream = [(r.run_pk, task_id) for r, t in judged if t.when is not None for task_id in t.when.tasks]
    facts = await condition_inputs(step.conn, {r.run_pk for r, _ in judged}, upstream)
    verdicts: list[Verdict] = []
    ended: set[int] = set()
    for r, task in judged:
        verdict = judge(r, task, facts.get(r.run_pk), graphs[r.version_id])
        if verdict is not None:
            verdicts.append(verdict)
            ended.add(r.id)
    if verdicts:
        await step.decide_ready([(v.ti_id, v.state) for v in verdicts], {r.id: r for r, _ in judged},
                                reasons={v.ti_id: v.reason for v in verdicts})
    return [(r, t) for r, t in runnable if r.id not in ended], len(verdicts)


def judge(row: ReadyTask, task: TaskSpec, facts: RunFacts | None, graph: DagGraph) -> Verdict | None:
    """None: run it; else how the condition ends the task instance."""
    assert task.when is not None
    try:
        if facts is None:
            raise WhenFailed("when was not evaluated: the run is gone")
        check_activation_size(facts.size)
        conf = json.loads(facts.conf_json)
        if not isinstance(conf, dict):
            raise WhenFailed(f"when was not evaluated: the run's conf is a JSON {type(conf).__name__}")
        params = fill_defaults(graph.spec.params, conf)
        variables = activation(params, facts.run_id, facts.logical_date,
                               {t: facts.outputs.get(t, {}) for t in task.when.tasks},
                               data_interval_start=facts.data_interval_start,
                               data_interval_end=facts.data_interval_end)
        if evaluate_when(task.when, variables):
            return None
        return Verdict(row.id, "skipped", WHEN_FALSE)
    except WhenFailed as exc:
        return Verdict(row.id, "failed", _with_upstream(str(exc), task, facts))
    except Exception as exc:  # boundary: anything else a stored conf or output makes the evaluation raise
        return Verdict(row.id, "failed", f"when failed: {type(exc).__name__}: {exc}"[:500])


def _with_upstream(reason: str, task: TaskSpec, facts: RunFacts | None) -> str:
    """A missing key is often an upstream without outputs: say which, and why."""
    if facts is None or task.when is None or "no such key" not in reason:
        return reason
    missing = sorted(t for t in task.when.tasks if t not in facts.outputs)
    notes = [f"task {t!r} has no outputs (it is {facts.states.get(t, 'not in the run')})" for t in missing]
    return "; ".join([reason, *notes])[:500]
