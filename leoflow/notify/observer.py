"""The outcome observer: run endings and failed tries become notifications and per-DAG counts.

A leader service. Every ``interval`` (and at once while there is a backlog) it reads a batch of
endings nobody has observed yet and, in one fenced transaction (:mod:`leoflow.db.stores.observed_endings`):

- marks them observed (a compare-and-set: each ending is handled exactly once per term);
- adds to the outbox one row per webhook that wants the event (:mod:`leoflow.model.spec.notify`):
  the DAG's own ``notify`` rules, or, for a DAG without any, ``LEOFLOW_NOTIFY_WEBHOOK`` for the
  events of ``LEOFLOW_NOTIFY_EVENTS``;
- adds the run's duration to ``dag_run_stats`` and each failed try to ``task_failure_counts``
  (what every replica exports as the per-DAG metrics).

It never touches a task instance or a run's state, so it cannot delay or change scheduling;
the scheduler does not know it exists. It only reads the scheduler's one public signal, whether
runs wait to be created or started (``ctx.runs``), and lets such a burst pass before a new backlog
of endings is worked off (:meth:`OutcomeObserver.observe_once`). One ending whose notification cannot be built (a bug,
a rule stored by an older version) is logged and still counted, never retried forever.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import defaultdict
from datetime import timedelta
from typing import Any

from leoflow.db.stores import observed_endings
from leoflow.db.stores.observed_endings import FailedTry, OutboxRow, RunEnding, RunStatsDelta
from leoflow.leadership import LeaderContext, run_periodically
from leoflow.model.dag_metrics import DURATION_BUCKETS, bin_index
from leoflow.model.spec.notify import EventFacts, NotifyRule, event_of_run, payload, rule_from_canonical

log = logging.getLogger(__name__)

#: Longest a caught-up observer waits for the scheduler's runs to be created and started before it
#: observes anyway (10,000 DAGs due at one minute keep it waiting about 3 s on a 2-core host).
YIELD_FOR = 5.0
#: How often that wait looks again.
YIELD_POLL = 0.1
#: How long the deliverer keeps retrying one notification before marking it failed.
GIVE_UP_AFTER = timedelta(hours=24)


class OutcomeObserver:
    """LeaderService: see the module docstring."""

    name = "outcome-observer"

    def __init__(self, *, batch: int = 500, interval: float = 1.0, yield_for: float = YIELD_FOR) -> None:
        self.batch = batch
        self.interval = interval
        #: Longest wait for the scheduler's runs to be created and started (see observe_once).
        self.yield_for = yield_for
        #: The last batch left nothing behind: a new backlog may wait for a burst of run starts.
        self._caught_up = True

    async def run(self, ctx: LeaderContext) -> None:
        await run_periodically(ctx, self.name, self.observe_once, interval=self.interval)

    async def observe_once(self, ctx: LeaderContext) -> bool:
        """Handle one batch; True when more may be waiting.

        While runs wait to be created or started (``ctx.runs``: a boundary where thousands of DAGs
        are due), a caught-up observer first waits for that to pass, for at most ``yield_for``
        seconds: its bookkeeping shares the leader's event loop and cores with those steps, and
        the endings it announces keep. Once it has a backlog it works it off before it waits
        again, so under a scheduler that is never idle announcements are late by at most about
        ``yield_for`` seconds plus the backlog's own time, never starved.
        """
        if self._caught_up:
            await self._yield_to_run_starts(ctx)
        more = await self._observe_batch(ctx)
        self._caught_up = not more
        return more

    async def _yield_to_run_starts(self, ctx: LeaderContext) -> None:
        for _ in range(math.ceil(self.yield_for / YIELD_POLL)):
            if not ctx.runs.waiting:
                return
            await asyncio.sleep(YIELD_POLL)

    async def _observe_batch(self, ctx: LeaderContext) -> bool:
        async with ctx.db.fenced(ctx.cluster, ctx.term) as conn:
            endings = await observed_endings.lock_run_endings(conn, self.batch)
            tries = await observed_endings.lock_failed_tries(conn, self.batch)
            if not endings and not tries:
                return False
            now = ctx.clock.now()
            outbox = [row for e in endings for row in _guarded(ctx, e)] + \
                     [row for t in tries if t.retried for row in _guarded(ctx, t)]
            failures: dict[tuple[str, str], int] = defaultdict(int)
            for t in tries:
                failures[(t.dag_id, t.task_id)] += 1
            await observed_endings.mark_runs_observed(conn, [e.run_pk for e in endings])
            await observed_endings.mark_tries_observed(conn, [t.try_pk for t in tries], now)
            await observed_endings.add_run_stats(conn, run_stats(endings))
            await observed_endings.add_task_failures(conn, failures)
            await observed_endings.add_to_outbox(conn, outbox, now, GIVE_UP_AFTER)
        if outbox:
            log.info("notifications queued", extra={"notifications": len(outbox), "term": ctx.term})
        return len(endings) == self.batch or len(tries) == self.batch


def run_stats(endings: list[RunEnding]) -> list[RunStatsDelta]:
    """The endings summed per (DAG, state), with their histogram bins."""
    grouped: dict[tuple[str, str], list[RunEnding]] = defaultdict(list)
    for e in endings:
        grouped[(e.dag_id, e.state)].append(e)
    deltas = []
    for (dag_id, state), group in sorted(grouped.items()):
        bins = [0] * (len(DURATION_BUCKETS) + 1)
        for e in group:
            bins[bin_index(e.duration_seconds)] += 1
        deltas.append(RunStatsDelta(dag_id=dag_id, state=state, runs=len(group),
                                    duration_sum=sum(e.duration_seconds for e in group), bins=bins,
                                    last_ended_at=max(e.ended_at for e in group)))
    return deltas


def _guarded(ctx: LeaderContext, ending: RunEnding | FailedTry) -> list[OutboxRow]:
    try:
        return outbox_rows(ctx, ending)
    except Exception:  # boundary: one ending's notification, never the batch (see the module docstring)
        log.exception("cannot build the notification of an ending; it is counted but not notified",
                      extra={"dag_id": ending.dag_id, "run_id": ending.run_id})
        return []


def _run_reason(event: str, ending: RunEnding) -> str | None:
    """The failed task's own reason when a task failed the run (the payload already names the task,
    and the run's reason would say "task 'x' failed: …" again); the run's reason otherwise
    (a deadline, a scheduler error stored on the run)."""
    if event == "failure" and ending.failed_task_id is not None and ending.failed_reason:
        return ending.failed_reason
    return ending.reason or ending.failed_reason


def outbox_rows(ctx: LeaderContext, ending: RunEnding | FailedTry) -> list[OutboxRow]:
    """One row per webhook that wants this ending's event (none for a cancelled run)."""
    if isinstance(ending, RunEnding):
        event = event_of_run(ending.state, ending.reason)
        if event is None:
            return []
        facts = EventFacts(event=event, dag_id=ending.dag_id, run_id=ending.run_id, state=ending.state,
                           logical_date=_iso(ending.logical_date), task_id=ending.failed_task_id,
                           try_number=ending.failed_try_number, reason=_run_reason(event, ending),
                           duration_seconds=round(ending.duration_seconds, 3))
    else:
        reason = ending.reason or (f"exit code {ending.exit_code}" if ending.exit_code is not None else None)
        facts = EventFacts(event="retry", dag_id=ending.dag_id, run_id=ending.run_id, state="up_for_retry",
                           logical_date=_iso(ending.logical_date), task_id=ending.task_id,
                           try_number=ending.try_number, reason=reason)
    # Who wants it first: the payload is built only for an event some webhook wants (most endings
    # of most installs: none, and 10,000 endings at one boundary made that a tenth of a second).
    if ending.notify is None:
        defaults = ctx.settings.notify
        wanted = facts.event in defaults.events or (facts.event == "deadline" and "failure" in defaults.events)
        targets: list[tuple[str, dict[str, Any]]] = [("default", {})] if defaults.webhook and wanted else []
    else:
        rules: list[NotifyRule] = [rule_from_canonical(doc) for doc in ending.notify]
        targets = [("dag", rule.webhook.to_canonical()) for rule in rules if rule.wants(facts.event)]
    if not targets:
        return []
    body = payload(facts, cluster=ctx.cluster, dashboard_url=ctx.settings.dashboard_url)
    return [OutboxRow(run_pk=ending.run_pk, dag_id=ending.dag_id, run_id=ending.run_id, task_id=facts.task_id,
                      try_number=facts.try_number, event=facts.event, target=target, webhook=webhook, payload=body)
            for target, webhook in targets]


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None
