"""Trigger rules: when a task may run, given how its direct upstream tasks ended.

Airflow's semantics (``airflow/ti_deps/deps/trigger_rule_dep.py``), for the rules Leoflow
supports. The scheduler keeps, per pending task instance, four counters over its *direct*
upstream tasks — not yet finished (``pending_upstreams``), ``success``, failed (``failed`` or
``upstream_failed``) and ``skipped`` — updated by one statement whenever an upstream task
reaches a final state; :func:`decide` turns the counters into a decision. No rule needs to look
at the DAG again, so the cost of a task's end is one statement for its direct downstream, plus
one more per level of cascading ``upstream_failed`` / ``skipped`` decisions.

The decision table (``f`` = failed + upstream_failed, ``s`` = success, ``k`` = skipped,
``done`` = every upstream finished):

==============================  ==========================  ===================  ============================
rule                            upstream_failed when        skipped when         runs when
==============================  ==========================  ===================  ============================
``all_success`` (default)       f > 0 (at once)             else k > 0 (at once) every upstream succeeded
``all_failed``                  never                       s + k > 0 (at once)  every upstream failed
``all_done``                    never                       never                done
``one_success``                 done, s = 0, not all k      done, all k          s > 0 (at once)
``one_failed``                  never                       done, f = 0          f > 0 (at once)
``none_failed``                 f > 0 (at once)             never                done (s + k = all)
``none_failed_min_one_success`` f > 0 (at once)             done, all k          done and s > 0
==============================  ==========================  ===================  ============================

"At once" means without waiting for the other upstream tasks. A task without upstream tasks
runs as soon as its run starts, whatever its rule. Skips cascade through ``all_success`` and
``all_failed``; failures cascade (as ``upstream_failed``) through the rules that need success.

Invariant the scheduler relies on: a task instance whose upstream tasks are all finished is
never left waiting — :func:`decide` with ``pending == 0`` always returns a final decision — so
"pending with ``pending_upstreams = 0``" keeps meaning "ready to queue". A rule that decides to
run early (``one_success``, ``one_failed``) is released by setting ``pending_upstreams`` to 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TriggerRule = Literal["all_success", "all_done", "all_failed", "one_success", "one_failed", "none_failed",
                      "none_failed_min_one_success"]
TRIGGER_RULES: tuple[TriggerRule, ...] = ("all_success", "all_done", "all_failed", "one_success", "one_failed",
                                          "none_failed", "none_failed_min_one_success")
DEFAULT_TRIGGER_RULE: TriggerRule = "all_success"

#: Rules that make a task ``upstream_failed`` as soon as one upstream task failed: the scheduler
#: marks all such descendants of a failed task in one statement (the closure), as it always did.
FAIL_FAST: frozenset[str] = frozenset({"all_success", "none_failed", "none_failed_min_one_success"})

Decision = Literal["wait", "run", "upstream_failed", "skipped"]

#: The reason stored on a task instance a trigger rule decided not to run.
REASONS: dict[str, str] = {
    "upstream_failed": "an upstream task failed",
    "skipped": "skipped by trigger rule",
}


@dataclass(slots=True)
class UpstreamCounts:
    """How a task instance's direct upstream tasks stand."""

    pending: int
    success: int = 0
    failed: int = 0
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.success + self.failed + self.skipped


def decide(rule: str, counts: UpstreamCounts) -> Decision:
    """The decision for a pending task instance (see the module's table); unknown rules act as the default."""
    s, f, k = counts.success, counts.failed, counts.skipped
    total = counts.total
    done = counts.pending <= 0
    if total == 0:
        return "run"
    if rule == "all_done":
        return "run" if done else "wait"
    if rule == "all_failed":
        if s + k > 0:
            return "skipped"
        return "run" if done else "wait"
    if rule == "one_success":
        if s > 0:
            return "run"
        if not done:
            return "wait"
        return "skipped" if k == total else "upstream_failed"
    if rule == "one_failed":
        if f > 0:
            return "run"
        return "skipped" if done else "wait"
    if rule == "none_failed":
        if f > 0:
            return "upstream_failed"
        return "run" if done else "wait"
    if rule == "none_failed_min_one_success":
        if f > 0:
            return "upstream_failed"
        if k == total:
            return "skipped"
        return "run" if done else "wait"
    # all_success
    if f > 0:
        return "upstream_failed"
    if k > 0:
        return "skipped"
    return "run" if done else "wait"


#: Rules that run a task once every direct upstream has succeeded (read off :func:`decide`, so
#: the two cannot disagree): the scheduler may count a task's last upstream success and queue
#: it in one write (:func:`leoflow.db.stores.task_instances.queueing.count_and_queue`). ``all_failed`` and
#: ``one_failed`` skip such a task instead.
RUN_WHEN_ALL_SUCCEED: frozenset[str] = frozenset(
    rule for rule in TRIGGER_RULES if decide(rule, UpstreamCounts(pending=0, success=1)) == "run")
