"""Task waits in the leader's step: ``wait_for`` conditions, ``depends_on_past``, approval gates.

Airflow runs a sensor as a task: it holds a worker slot (or, deferred, a triggerer's coroutine) and
its users' first complaints are slots eaten by sensors and deferred tasks that never wake. Here
the leader evaluates waits itself, in its fenced step, with no pod, no slot and no process:

- **parking**: a task with conditions whose trigger rule says run is not queued; its conditions are
  written as rows and it becomes ``waiting`` (:func:`hold_waiting`, called by the queueing round on
  the ready rows, before ``when`` and mapping) and is judged at once, so a condition that is
  already true costs no extra step;
- **judging**: a periodic part (:func:`check_waits`) first wakes the waits on what changed since
  its last look (new dataset events, runs that ended: two index ranges, empty when idle), then
  judges the rows whose ``check_at`` has come, set-based, on the database's clock
  (:mod:`leoflow.db.stores.waits.scheduling`). While nothing changes it costs one empty index
  probe per periodic step plus a re-check of each wait every
  :data:`~leoflow.db.stores.waits.scheduling.RECHECK_SECONDS`;
- **deciding**: every condition met → the task is ``pending`` and ready again and this step queues
  it like any other (its rows say ``met`` for this try, so it is not parked twice); a condition
  failed (an approval rejected, the DAG it names deleted) → ``failed`` with the reason; timed out
  → ``failed``, or ``skipped`` when that condition says ``soft_fail``. Downstream tasks hear of it
  through their trigger rules.

Exactly once across leader changes: every move is a compare-and-set on ``waiting`` in the fenced
transaction; a new leader finds the rows and carries on (its first check wakes everything due).
A retry does not wait again (the conditions held for the task, not for a try); a clear after the
task ran does (its try number moved on).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

from leoflow.db.stores.task_instances.transitions import ReadyTask
from leoflow.db.stores.waits import scheduling as wait_store
from leoflow.db.stores.waits.scheduling import ToPark
from leoflow.metrics import waits as wait_metrics
from leoflow.model.spec.dag import TaskSpec
from leoflow.scheduler.step import Step

log = logging.getLogger(__name__)

#: Seconds between two refreshes of the per-DAG wait gauges (one grouped read of the waiting rows).
GAUGE_INTERVAL = 30.0


async def hold_waiting(step: Step, runnable: list[tuple[ReadyTask, TaskSpec]]) -> list[tuple[ReadyTask, TaskSpec]]:
    """The rows of ``runnable`` to run now; those whose task waits and whose conditions are not met
    for this try are parked (``waiting``) instead."""
    waiters = [(r, t) for r, t in runnable if t.waits and r.state == "pending" and r.map_index < 0]
    if not waiters:
        return runnable
    known = await wait_store.wait_states(step.conn, [r.id for r, _ in waiters])
    to_park: list[ToPark] = []
    for row, task in waiters:
        met, try_number = known.get(row.id, (False, -1))
        if not (met and try_number == row.try_number):
            to_park.append(ToPark(row.id, row.try_number, row.dag_id, task.waits))
    if not to_park:
        return runnable
    held = set(await wait_store.park(step.conn, to_park, step.now, step.term))
    step.transitions["waiting"] += len(held)
    step.active.update(r.run_pk for r, _ in waiters if r.id in held)
    await decide(step, sorted(held))  # at once: a condition already true costs no extra step
    return [(r, t) for r, t in runnable if r.id not in held]


async def decide(step: Step, ti_ids: Sequence[int]) -> int:
    """Judge the conditions of waiting ``ti_ids``; release the met, end the failed. Returns the tasks moved."""
    judged = await wait_store.judge(step.conn, ti_ids)
    met = {j.ti_id for j in judged if j.met}
    ended = [j for j in judged if j.failure is not None]
    rows = await wait_store.release(step.conn, sorted(met | {j.ti_id for j in ended}), step.now, step.term)
    by_id = {r.id: r for r in rows}
    step.add_candidates(r for r in rows if r.id in met)
    decisions = [(j.ti_id, "skipped" if j.skip else "failed") for j in ended if j.ti_id in by_id]
    if decisions:
        await step.decide_ready(decisions, by_id, reasons={j.ti_id: j.failure or "wait failed" for j in ended})
        log.info("waits ended tasks", extra={"task_instances": [d[0] for d in decisions][:20],
                                             "states": [d[1] for d in decisions][:20]})
    return len(by_id)


class WaitChecker:
    """The periodic part of waits for one term: wake what changed since its last look, then judge what is due.

    Runs that ended are remembered from the steps that committed them (:meth:`runs_ended`: no
    statement in the hot step), and only while some task waits. A new term starts by waking every
    waiting row: what the previous leader had seen but not yet judged is judged again.
    """

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.event_id: int | None = None
        self.ended_dags: set[str] = set()
        #: Some task waits (as of the last periodic look, or a park since).
        self.watching = True
        #: A full page of due waits was judged: more may be due behind it.
        self.more = False
        self._next_gauges = 0.0

    def runs_ended(self, dag_ids: Iterable[str]) -> bool:
        """Runs of ``dag_ids`` ended (committed): True if a wait may care (the caller pokes the loop)."""
        if not self.watching:
            return False
        self.ended_dags.update(dag_ids)
        return True

    async def due(self, step: Step) -> list[int]:
        if not self.watching:  # no task waited at the last look: one probe, nothing else
            self.watching = await wait_store.watching(step.conn)
            if not self.watching:
                if self._gauges_due():
                    self._publish({})
                return []
            # Tasks were parked since: runs that ended meanwhile were not remembered, so wake them all.
            self.event_id = None
        ended, self.ended_dags = sorted(self.ended_dags), set()
        self.event_id, _ = await wait_store.wake_changes(step.conn, self.event_id, ended)
        ids = await wait_store.due_task_instances(step.conn, self.batch_size)
        self.more = len(ids) >= self.batch_size
        self.watching = bool(ids) or await wait_store.watching(step.conn)
        if self._gauges_due():
            self._publish(await wait_store.pending_by_dag(step.conn) if self.watching else {})
        return ids

    def _gauges_due(self) -> bool:
        if time.monotonic() < self._next_gauges:
            return False
        self._next_gauges = time.monotonic() + GAUGE_INTERVAL
        return True

    @staticmethod
    def _publish(pending: dict[str, tuple[int, float]]) -> None:
        wait_metrics.publish(pending)

    async def apply(self, step: Step, ti_ids: Sequence[int]) -> None:
        if ti_ids:
            await decide(step, ti_ids)
