"""One scheduling tick, step by step, under one leadership term.

:class:`SchedulerCore` holds what a term needs between ticks — the executor, the compiled
versions, the inbox of executor reports, the tries in flight — and runs a tick as **one fenced
transaction** (a :class:`~leoflow.scheduler.step.Step`):

- once per interval or after a NOTIFY: create due scheduled runs (:mod:`leoflow.model.spec.timetable`;
  unique ids, so racing leaders cannot duplicate), time out running tasks past ``timeout_at``,
  start the queued runs ``max_active_runs`` allows, scan for ready tasks;
- every tick: apply a batch of executor reports (successes release downstream tasks, final
  failures mark descendants ``upstream_failed``, failures with tries left become
  ``up_for_retry``); give the free slots of every pool to its best ready tasks (priority, then
  age, within ``max_active_tasks``; :mod:`leoflow.scheduler.queueing`; ``kind: empty`` tasks
  succeed on the spot); fail the entities the step could not handle;
  finish every run that the step completed, and start the queued runs that frees.

A tick whose reports fan out to :data:`~leoflow.scheduler.shards.SHARD_MIN` rows or more is split
by run (:mod:`leoflow.scheduler.shards`) into :data:`~leoflow.scheduler.shards.STEP_SHARDS` such
transactions run side by side, each a whole step for its runs with the
slots the others may fill reserved in every pool; the round, run starts and kills then follow in
one ordinary step (ADR 0012). A boundary where thousands of DAGs fall due is handled the same
way (ADR 0022): while due DAGs remain, each tick reads two steps' worth and writes their runs in
two steps side by side, one DAG in one; then the backlog of queued runs is read a step's worth at
a time and split by run into two steps, which start, resolve and end their own runs and pick no
slots; a whole step picks after them if their tasks need slots.

The queued tries are handed to the executor after the commit, so an executor never sees a try
the database does not have; tries flagged ``cancelling`` (cancelled runs, timeouts) are killed
beside the loop by :mod:`leoflow.scheduler.kills`, at most
:data:`~leoflow.scheduler.kills.KILL_CONCURRENCY` at once; an executor's kill returns once the
try is confirmed gone (escalating after ``LEOFLOW_KILL_GRACE``), and only then is the try recorded
``cancelled`` and a task cleared meanwhile released from ``cancelling``. A tick with nothing to do
(no report, nothing due, no backlog) costs no round trip at all. A slow keyset sweep of running
runs remains as a safety net and counts what it repairs (``leoflow_scheduler_sweep_repairs_total``, expected 0).

Failure semantics: every write transaction starts with the fencing check, so a stale leader's
step raises :class:`~leoflow.errors.FencedOut` and writes nothing; the service stops on it. A
leader fault (:data:`~leoflow.scheduler.containment.LEADER_FAULTS`) aborts the step — reports
taken from the inbox are put back first — and the service retries on the next tick. Any other
failure is blamed on an entity: the tick's work is redone part by part, each part bisected over
its entities (:func:`~leoflow.scheduler.containment.isolate`), and only the culprits are failed.
Work per step is bounded by ``batch_size`` rows, and by what those rows set off: reports are
taken only as far as their fan-out fits a row budget (:mod:`leoflow.scheduler.fanout`), and runs
started, timeouts and run deadlines applied only as far as the rows they write fit it, so memory
stays flat whatever the backlog and however wide the DAGs.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TypeVar

from leoflow import tracing
from leoflow.db.stores import tries as try_store
from leoflow.db.stores.runs import endings as run_endings
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.db.stores.runs.lifecycle import StartableRun
from leoflow.db.stores.task_instances import transitions as ti_store
from leoflow.errors import FencedOut
from leoflow.executor.base import Executor
from leoflow.leadership import LeaderContext
from leoflow.metrics import datasets as dataset_metrics
from leoflow.metrics import scheduler as metrics
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey, try_key
from leoflow.scheduler.containment import EntityKind, contained, count, is_leader_fault, isolate
from leoflow.scheduler.fanout import Fanout, report_fanout, within_budget
from leoflow.scheduler.graphs import VersionGraphs
from leoflow.scheduler.kills import TryKiller
from leoflow.scheduler.periodic import Part, Periodic
from leoflow.scheduler.queueing import ROW_BUDGET, Queuer, build_launch, run_context
from leoflow.scheduler.rendering import Unrendered, render_launches
from leoflow.scheduler.reports import ReportApplier
from leoflow.scheduler.shards import (
    SHARD_MIN,
    STEP_SHARDS,
    ReservingLauncher,
    SplitPart,
    picks_slots,
    split_by_run,
    split_starts,
)
from leoflow.scheduler.step import Launcher, Step
from leoflow.scheduler.transitions import InFlightTry

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Rows per step and statement. Large enough that one round trip moves hundreds of tasks, small
#: enough that a tick stays well under a second on a loaded machine.
DEFAULT_BATCH_SIZE = 500
#: Seconds between pages of the completion sweep (a safety net: runs finish in their last step).
SWEEP_INTERVAL = 10.0
#: Times per step that finished runs start queued ones whose roots are queued in turn.
START_ROUNDS = 5
#: Entities whose failure could not even be written, skipped for the rest of the term.
QUARANTINE_LIMIT = 10_000
class SchedulerCore:
    """The scheduling steps of one leadership term (see the module docstring)."""

    def __init__(self, ctx: LeaderContext, executor: Executor, *, batch_size: int = DEFAULT_BATCH_SIZE,
                 queue_on_count: bool = True) -> None:
        self.ctx = ctx
        self.executor = executor
        self.batch_size = batch_size
        #: Rows of fan-out the reports of one step may set off, and its run starts, timeouts and
        #: run deadlines may each write (:mod:`leoflow.scheduler.fanout`).
        self.fanout_budget = ROW_BUDGET * batch_size
        self.graphs = VersionGraphs()
        # Bounded in practice: reports exist only for tries in flight (<= parallelism) plus what
        # the executor reconciles at start.
        self.inbox: deque[StatusUpdate] = deque()
        self.inflight: dict[TryKey, InFlightTry] = {}
        self.quarantine: set[tuple[EntityKind, int | str]] = set()
        self.reports = ReportApplier(self.inflight, max_retry_delay=ctx.settings.scheduler.max_retry_delay,
                                     termination_message=executor.name == "kubernetes")
        self.queuer = Queuer(self.inflight, self.quarantine, parallelism=ctx.settings.scheduler.parallelism,
                             batch_size=batch_size)
        self.periodic = Periodic(self.graphs, self.quarantine, batch_size=batch_size, row_budget=self.fanout_budget)
        #: Concurrent steps a large batch of reports is split into, by run, once its fan-out
        #: reaches ``shard_min`` rows (ADR 0012); 1: never split.
        self.step_shards = STEP_SHARDS
        self.shard_min = SHARD_MIN
        #: The tries the steps list ``cancelling`` are killed beside the loop (:mod:`.kills`).
        self.kills = TryKiller(ctx, executor, on_killed=self.poke)
        self._sweep_after = 0
        self._next_sweep = 0.0
        self._next_periodic = 0.0
        self._poked = True
        #: Scan for ready tasks in the next step (the step's own candidates may not be all of them).
        self._scan = True
        #: Queue what an upstream's success makes ready in the write that counts it, when its
        #: pool has room (:func:`~leoflow.db.stores.task_instances.queueing.count_and_queue`); False: always through
        #: the round (the tests compare the two).
        self.queue_on_count = queue_on_count
        #: Redoing a failed step entity by entity: no one-write queueing then, so that a task
        #: instance whose queueing fails is blamed on its own, not on the upstream that finished.
        self._isolating = False

    def now(self) -> datetime:
        return self.ctx.clock.now()

    def poke(self) -> None:
        """Something outside changed (a NOTIFY): run every step on the next tick, not just the hot ones."""
        self._poked = True

    # ------------------------------------------------------------------ steps

    @asynccontextmanager
    async def step(self, *, reserved: int | None = None) -> AsyncIterator[Step]:
        """A fenced transaction; its faults and completed runs are settled before it commits.

        ``reserved``: the step is one part of a split tick (ADR 0012). Its one write keeps that
        many slots free for the other parts, and it lists no tries to kill (the tick's follow-up
        step does, after every part).
        """
        launcher: Launcher | None = self.queuer if self.queue_on_count and not self._isolating else None
        if launcher is not None and reserved is not None:
            launcher = ReservingLauncher(self.queuer, reserved)
        async with self.ctx.db.fenced(self.ctx.cluster, self.ctx.term) as conn:
            step = Step(conn, self.now(), self.ctx.term, self.graphs, self.ctx.settings.scheduler.max_retry_delay,
                        launcher=launcher)
            yield step
            await step.settle()
            if (step.faults or step.kill_check) and reserved is None:
                step.kills = await try_store.tries_to_kill(conn, self.batch_size)
        await self._committed(step)

    async def _run(self, body: Callable[[Step], Awaitable[object]]) -> Step:
        async with self.step() as step:
            await body(step)
        return step

    async def _committed(self, step: Step) -> None:
        """After the commit: count, log, kill, and hand the queued tries to the executor."""
        for state, n in step.transitions.items():
            metrics.TASK_TRANSITIONS.labels(state=state).inc(n)
        if step.dataset_events or step.dataset_runs:
            dataset_metrics.EVENTS.labels(source="task").inc(step.dataset_events)
            dataset_metrics.TRIGGERED_RUNS.inc(step.dataset_runs)
            dataset_metrics.count_dags(step.dataset_events_by_dag, step.dataset_runs_by_dag,
                                       max_dags=self.ctx.settings.notify.metrics_max_dags)
        count(step.faults)
        for run in step.finished:
            metrics.RUNS_FINISHED.labels(state=run.state).inc()
            log.info("run finished", extra={"dag_id": run.dag_id, "run_id": run.run_id, "state": run.state})
            tracing.run_ended(run.dag_id, run.run_id, run.state, run.started_at, step.now, reason=run.reason)
        if step.finished and self.periodic.waits.runs_ended(run.dag_id for run in step.finished):
            self.poke()  # a task may wait for one of these runs (leoflow.scheduler.waits)
        self.kills.spawn(step.kills)
        self.inbox.extend(step.refused)  # tries whose templates could not be rendered: they fail
        # Exit tasks created by the step's last settle, too late for its queueing: the next step scans.
        self._scan = self._scan or bool(step.candidates)
        await self.submit_all(step.launches)

    async def tick(self) -> bool:
        """Run the steps once; True if anything changed (the loop then ticks again at once).

        The periodic parts scan for work that only appears with time or from outside — due
        schedules, timeouts, runs to start, retries — so they run once per interval or after a
        NOTIFY. Reports and the tasks they make ready are handled on every tick, in the same
        transaction. A tick with nothing to do is not a transaction at all.
        """
        periodic = self._periodic_due()
        batch, fanouts = await self.take_reports()
        busy = False
        if periodic or batch or self._scan or self.periodic.more_to_start:
            busy = await self._tick_step(batch, fanouts, periodic)
        await self.sweep_runs()
        return busy

    async def take_reports(self) -> tuple[list[StatusUpdate], list[Fanout]]:
        """The next reports from the inbox, in order: at most ``batch_size``, and only as many as
        fit :attr:`fanout_budget` rows of fan-out (:mod:`leoflow.scheduler.fanout`), at least one;
        with each one's fan-out (what a split tick balances its parts by, and reserves for them)."""
        head = list(itertools.islice(self.inbox, self.batch_size))
        if not head:
            return [], []
        fanouts = await self._report_fanouts(head)
        taken = within_budget((f.rows for f in fanouts), self.fanout_budget)
        return [self.inbox.popleft() for _ in range(taken)], fanouts[:taken]

    async def _report_fanouts(self, updates: Sequence[StatusUpdate]) -> list[Fanout]:
        """Each report's fan-out. In-flight tries name their version; the others (tries of an
        earlier term, after a failover) and versions no longer cached are read in one transaction."""
        known: dict[TryKey, tuple[int, int]] = {}
        for u in updates:
            entry = self.inflight.get(u.key)
            if entry is not None:
                known[u.key] = (entry.version_id, entry.max_tries)
        graphs = {v: self.graphs.cache.lookup(v) for v in {v for v, _ in known.values()}}
        unknown = [u.key for u in updates if u.key not in known]
        if unknown or None in graphs.values():
            async with self.step() as step:
                for row in await ti_store.task_instances_by_key(step.conn, unknown):
                    known[try_key(row.dag_id, row.run_id, row.task_id, row.try_number, row.map_index,
                                  row.id)] = (row.version_id, row.max_tries)
                graphs.update(await step.graphs.load(step.conn, {v for v, _ in known.values()
                                                                 if graphs.get(v) is None}))
        fanouts: list[Fanout] = []
        for u in updates:
            version_id, max_tries = known.get(u.key, (0, 0))
            fanouts.append(report_fanout(u, graphs.get(version_id), max_tries))
        return fanouts

    def _periodic_due(self) -> bool:
        if self.periodic.more_due:  # a part left work over its row budget: go on at once
            self.periodic.more_due = False
            return True
        now = self.ctx.clock.monotonic()
        if not (self._poked or now >= self._next_periodic or self.seconds_to_due() == 0.0):
            return False
        self._poked = False
        self._next_periodic = now + self.ctx.settings.scheduler.interval
        return True

    def seconds_to_due(self) -> float | None:
        """Seconds until the next DAG falls due (0: due now; None: no DAG is scheduled), on the
        leader's clock, which is the clock the due scan compares ``next_run_at`` with."""
        due = self.periodic.next_due
        if due is None:
            return None
        return max(0.0, (due - self.ctx.clock.now()).total_seconds())

    async def _tick_step(self, batch: list[StatusUpdate], fanouts: Sequence[Fanout], periodic: bool) -> bool:
        if self.queue_on_count and self.step_shards > 1 and sum(f.rows for f in fanouts) >= self.shard_min:
            parts = split_by_run(batch, fanouts, self.step_shards)
            if len(parts) > 1:
                return await self._split_tick(parts, periodic)
        if periodic and not batch and self.periodic.may_split_creation and self._may_split():
            split = await self._split_creation()
            if split is not None:
                return split
        if not batch and self.periodic.more_to_start and self._may_split():
            if periodic:  # the periodic parts first, in their own step: the starts are the split's
                if not await self._periodic_step():
                    return True  # it failed, or runs are still being queued first: no start this tick
                periodic = False
            split = await self._split_starts()
            if split is not None:
                return split
        scan = periodic or self._scan

        async def body(step: Step) -> None:
            if periodic:
                await self.periodic.run(step)
            elif self.periodic.more_to_start:  # a backlog of startable runs: no need to wait for the interval
                await self.periodic.start_runs(step)
            if batch:
                await self.reports.apply(step, batch)
                if step.dataset_queued:
                    # A success queued events for consuming DAGs: their runs are created and started
                    # in this step (the queue rows are this transaction's), not a step later (a
                    # periodic step's own trigger ran before the reports, so it runs again here).
                    await self.periodic.trigger_dataset_runs(step)
                    await self.periodic.start_runs(step)
            await self._queue_and_settle(step, scan=scan)

        try:
            step = await self._run(body)
        except BaseException as exc:  # not swallowed: leader faults re-raise; entity faults are isolated
            await self._step_failed(exc, batch, periodic)
            return True
        return step.busy()

    async def _step_failed(self, exc: BaseException, batch: Sequence[StatusUpdate], periodic: bool) -> None:
        """A tick's step raised ``exc``: a leader fault puts ``batch`` back and re-raises; anything
        else is an entity's, and the step's work is redone entity by entity."""
        self._scan = True
        if is_leader_fault(exc):
            self.inbox.extendleft(reversed(batch))  # at-least-once: retried next tick
            raise exc
        log.warning("a scheduling step failed; redoing it entity by entity",
                    extra={"error": f"{type(exc).__name__}: {exc}"[:300]})
        await self._isolated(batch, periodic)

    async def _split_tick(self, parts: Sequence[SplitPart], periodic: bool) -> bool:
        """Apply the parts' reports in concurrent steps, then run what they leave (ADR 0012).

        Each part is a whole step (its reports, their fan-out, the one-write queueing, the
        completion of its runs), with the slots the other parts may fill reserved: a part queues
        only in the write that counts a success, only that success's direct downstream, each
        task instance once (:attr:`SplitPart.queues`). What must see the whole tick — the round
        over every pool, run starts, the tries to kill — runs after every part, in one ordinary
        step. A part that fails is redone entity by entity, alone.
        """
        total = sum(part.queues for part in parts)

        async def apply(part: SplitPart) -> Step:
            async with self.step(reserved=total - part.queues) as step:
                await self.reports.apply(step, part.reports)
            return step

        results = await asyncio.gather(*(apply(part) for part in parts), return_exceptions=True)
        failed = [(part.reports, result) for part, result in zip(parts, results, strict=True)
                  if not isinstance(result, Step)]
        done = [result for result in results if isinstance(result, Step)]
        if failed:
            self._scan = True
        leader_fault = next((exc for _, exc in failed if is_leader_fault(exc)), None)
        if leader_fault is not None:
            for part, _ in reversed(failed):  # at-least-once: every part not committed is retried next tick
                self.inbox.extendleft(reversed(part))
            raise leader_fault
        for part, exc in failed:
            log.warning("a part of a split scheduling step failed; redoing it entity by entity",
                        extra={"error": f"{type(exc).__name__}: {exc}"[:300]})
            await self._isolated(part, False)
        finished = any(step.finished for step in done)
        faults = any(step.faults for step in done)

        async def follow_up(step: Step) -> None:
            step.kill_check = faults or bool(failed)  # the parts list no tries to kill
            if periodic:
                await self.periodic.run(step)
            elif finished or self.periodic.more_to_start:
                await self.periodic.start_runs(step)
            await self._queue_and_settle(step, scan=True)

        try:
            await self._run(follow_up)
        except BaseException as exc:  # as an unsplit tick's step (its reports are committed already)
            await self._step_failed(exc, (), periodic)
        return True

    def _may_split(self) -> bool:
        """Whether a boundary's creation and a backlog's starts may be split (ADR 0022)."""
        return self.queue_on_count and self.step_shards > 1 and not self._isolating

    async def _split_starts(self) -> bool | None:
        """Start a backlog of queued runs in concurrent steps (ADR 0022); None: too few to split.

        At a boundary where thousands of DAGs are due, every run is queued first and then started
        (its task instances created, its ``empty`` tasks ended, the run ended when its tasks are):
        a few hundred microseconds a run, the leader's Python and one PostgreSQL backend taking
        turns, so one core. The runs one ordinary step would start (:data:`START_ROUNDS` batches)
        are read once, split by run (:func:`split_starts`) and started by :data:`STEP_SHARDS`
        steps side by side. A part starts, resolves and settles its own runs only; it never picks
        tasks for slots (two picks side by side would both see the same free slots): when its
        runs have container tasks, one whole step picks after the parts, as after a split tick.
        Starting the runs that finishing made room for is left to the next tick, which follows at
        once (``more_to_start``). A part that fails is redone entity by entity, like a failed
        periodic step.
        """
        limit = self.batch_size * START_ROUNDS
        async with self.step() as step:
            runs = await self.periodic.startable(step, limit)
            graphs = await step.graphs.load(step.conn, {r.version_id for r in runs})
        parts = split_starts(runs, graphs, self.step_shards)
        if len(runs) < self.shard_min or len(parts) < 2:
            return None

        async def apply(part: list[StartableRun]) -> tuple[bool, bool]:
            """(runs were left over the row budget, ready tasks were left for a later step)."""
            runs_left = tasks_left = False
            # reserved=0: a part of a split (it lists no tries to kill); it queues nothing, so it
            # need keep no slots for the others (split_starts).
            async with self.step(reserved=0) as step:
                for i in range(0, len(part), self.batch_size):
                    _, over = await self.periodic.start_chosen(step, part[i:i + self.batch_size])
                    runs_left = runs_left or over
                    tasks_left = await self._resolve_and_settle(step) or tasks_left
            return runs_left, tasks_left

        done, fault = await self._side_by_side([apply(part) for part in parts])
        self.periodic.more_to_start = len(runs) >= limit or any(runs_left for runs_left, _ in done)
        self._scan = self._scan or any(tasks_left for _, tasks_left in done)
        if fault is not None:
            await self._step_failed(fault, (), True)  # a leader fault re-raises; else redone entity by entity
        elif any(picks_slots(graph) for graph in graphs.values()):
            await self._run(lambda step: self._queue_and_settle(step, scan=True))
        return True

    async def _split_creation(self) -> bool | None:
        """Queue the runs of many due DAGs in concurrent steps (ADR 0022); None: too few to split.

        While due DAGs remain behind a step (a boundary where thousands fall due), the next tick
        reads the due DAGs of :data:`STEP_SHARDS` steps at once and writes them in as many steps
        side by side, each its own DAGs' runs and ``next_run_at``, one DAG in one part. The other
        periodic parts wait for the tick after the last creating one (within
        ``CREATE_FIRST_STEPS`` ticks, as the starts do). A part that fails is redone entity by
        entity, like a failed periodic step.
        """
        async with self.step() as step:
            dues = await self.periodic.due_pages(step, self.step_shards)
        if len(dues) < self.shard_min:
            return None
        parts = [dues[i::self.step_shards] for i in range(self.step_shards)]  # each oldest first

        async def apply(part: list[run_store.DueDag]) -> tuple[bool, bool]:
            async with self.step(reserved=0) as step:  # a part: it lists no tries to kill
                return await self.periodic.write_due(step, part)

        done, fault = await self._side_by_side([apply(part) for part in parts if part])
        self.periodic.created_split(any(advanced for advanced, _ in done) or fault is not None,
                                    any(left for _, left in done))
        if fault is not None:
            await self._step_failed(fault, (), True)  # a leader fault re-raises; else redone entity by entity
        return True

    @staticmethod
    async def _side_by_side(parts: Sequence[Awaitable[T]]) -> tuple[list[T], BaseException | None]:
        """Run the parts of a split creation or start concurrently: what the committed ones
        returned, and the fault to handle if any part failed (a leader fault before any other)."""
        results = await asyncio.gather(*parts, return_exceptions=True)
        done = [result for result in results if not isinstance(result, BaseException)]
        failed = [result for result in results if isinstance(result, BaseException)]
        return done, next((exc for exc in failed if is_leader_fault(exc)), failed[0] if failed else None)

    async def _periodic_step(self) -> bool:
        """The periodic parts but starting runs, queued and settled; True if runs are to start now
        (False: every due run is still being queued first, or the step failed — it was redone
        entity by entity, or a leader fault re-raised)."""
        start_now = False

        async def body(step: Step) -> None:
            nonlocal start_now
            start_now = await self.periodic.run(step, starts=False)
            await self._queue_and_settle(step, scan=True, starts=False)

        try:
            await self._run(body)
        except BaseException as exc:  # not swallowed: leader faults re-raise; entity faults are isolated
            await self._step_failed(exc, (), True)
            return False
        return start_now

    async def _resolve_and_settle(self, step: Step) -> bool:
        """Resolve what the step's own runs made ready (no pick for slots), settle them, again for
        the exit tasks that creates; True if ready tasks were left for a later step (over the
        budget, or container tasks for the pick)."""
        left = False
        for _ in range(START_ROUNDS):
            left = (await self.queuer.queue(step, scan=False, pick=False)).backlog or left
            await step.settle()
            if not step.candidates:
                break
        return left

    async def _queue_and_settle(self, step: Step, *, scan: bool, candidates: Sequence[ti_store.ReadyTask] = (),
                                starts: bool = True) -> None:
        """Queue what is ready, settle, and start the queued runs that finished runs made room for
        (``starts=False``: not those; a split start follows)."""
        step.add_candidates(candidates)
        only = [r.id for r in candidates] if candidates else None
        backlog = (await self.queuer.queue(step, scan=scan, only=only)).backlog
        for _ in range(START_ROUNDS):
            # Runs that finished make room for queued ones; runs whose body ended have exit tasks to queue.
            finished = await step.settle()
            if not (starts and finished and await self.periodic.start_runs(step)) and not step.candidates:
                break
            backlog = (await self.queuer.queue(step, scan=False, only=only)).backlog or backlog
        self._scan = backlog

    # ------------------------------------------------------------------ isolation

    async def _isolated(self, batch: Sequence[StatusUpdate], periodic: bool) -> None:
        """The tick's work again, part by part, each part bisected until its culprits stand alone."""
        self._isolating = True
        try:
            await self._isolate_all(batch, periodic)
        finally:
            self._isolating = False

    async def _isolate_all(self, batch: Sequence[StatusUpdate], periodic: bool) -> None:
        if periodic:
            for part in self.periodic.parts():
                await self._isolate_part(part)
        await isolate(batch, lambda xs: self._run(lambda s: self.reports.apply(s, xs)), self._poisoned_report)
        ready = await self._read(lambda s: ti_store.ready_task_instances(s.conn, self.batch_size))
        ready = [r for r in ready if ("task", r.id) not in self.quarantine]
        await isolate(ready, lambda xs: self._run(lambda s: self._queue_and_settle(s, scan=False, candidates=xs)),
                      lambda r, exc: self._poisoned("task", r.id, exc))
        self._scan = True

    async def _isolate_part(self, part: Part[T]) -> None:
        async def attempt(items: Sequence[T]) -> None:
            await self._run(lambda step: part.apply(step, items))

        async def poisoned(item: T, exc: Exception) -> None:
            await self._poisoned(part.kind, part.entity(item), exc)

        await isolate(await self._read(part.scan), attempt, poisoned)

    async def _read(self, scan: Callable[[Step], Awaitable[list[T]]]) -> list[T]:
        async with self.step() as step:
            return await scan(step)

    async def _poisoned(self, kind: EntityKind, entity: int | str, exc: Exception) -> None:
        """Fail one entity alone; if even that cannot be written, quarantine it for this term."""
        try:
            async with self.step() as step:
                step.fail(kind, entity, exc)
        except Exception as write_error:  # boundary: the entity's own row is what the database refuses
            if is_leader_fault(write_error):
                raise
            fault = contained(kind, entity, write_error)
            count([fault])
            if len(self.quarantine) < QUARANTINE_LIMIT:
                self.quarantine.add((kind, entity))
            log.error("could not fail the entity; skipping it for this term",
                      extra={"entity_kind": kind, "entity": str(entity), "reason": fault.reason})

    async def _poisoned_report(self, update: StatusUpdate, exc: Exception) -> None:
        """A report that cannot be applied fails its task instance; one that names none is dropped."""
        try:
            async with self.step() as step:
                rows = await ti_store.lock_task_instances(step.conn, [update.key])
        except Exception as lookup_error:  # boundary: a key the database cannot even look up
            if is_leader_fault(lookup_error):
                raise
            rows = []
        row = next((r for r in rows if r.try_number == update.key.try_number), None)
        if row is not None:
            await self._poisoned("task", row.id, exc)
            return
        count([contained("report", str(update.key), exc)])

    # ------------------------------------------------------------------ steps the tests drive one by one

    async def create_scheduled_runs(self) -> bool:
        return bool((await self._run(self.periodic.create_scheduled_runs)).created)

    async def start_queued_runs(self) -> bool:
        return bool((await self._run(self.periodic.start_runs)).started)

    async def apply_timeouts(self) -> bool:
        step = await self._run(self.periodic.apply_timeouts)
        return bool(step.transitions)

    async def hot_step(self) -> bool:
        """Reports, queueing and run completion (a tick without its periodic parts)."""
        batch, fanouts = await self.take_reports()
        return await self._tick_step(batch, fanouts, periodic=False)

    # ------------------------------------------------------------------ the executor

    async def submit_all(self, launches: Sequence[TaskLaunch]) -> None:
        """Hand tries to the executor, in order; counted once for the batch (a step hands over hundreds)."""
        handed = 0
        for launch in launches:
            handed += await self.submit(launch)
        if handed:
            metrics.TASKS_QUEUED.inc(handed)

    async def submit(self, launch: TaskLaunch) -> bool:
        """Hand a try to the executor; an executor error fails the try (retried if tries remain).

        True if the executor took it; the caller counts it (``leoflow_scheduler_tasks_queued_total``).
        """
        try:
            await self.executor.submit(launch)
        except (asyncio.CancelledError, FencedOut):
            raise
        except Exception as exc:  # containment: whatever the executor raised for one try fails that try
            log.exception("executor refused a try", extra={"try": str(launch.key)})
            self.inbox.append(StatusUpdate(key=launch.key, state="failed", at=self.now(),
                                           reason=f"executor error: {type(exc).__name__}: {exc}"[:500]))
            return False
        return True

    async def resubmit_queued(self) -> int:
        """After a failover: hand every queued try to the executor again (submit is idempotent)."""
        after, total = 0, 0
        while True:
            async with self.step() as step:
                page, launches = await self._queued_page(step, after)
            if not page:
                return total
            await self.submit_all(launches)
            after, total = page[-1].task_instance_id, total + len(page)

    async def _queued_page(self, step: Step, after: int) -> tuple[list[try_store.QueuedLaunch], list[TaskLaunch]]:
        page = await try_store.queued_tries_after(step.conn, after, self.batch_size)
        graphs = await step.graphs.load(step.conn, {p.version_id for p in page})
        launches: list[TaskLaunch] = []
        pending: list[Unrendered] = []
        for item in step.usable(page, graphs):
            try:
                run = run_context(item.conf_json, item.logical_date, item.body_state, item.body_reason,
                                  item.triggering_events, (item.data_interval_start, item.data_interval_end))
                task = graphs[item.version_id].tasks[item.key.task_id]
                launch = build_launch(task, item.key, item.task_try_id, self.ctx.term, run)
            except Exception as exc:  # containment: this try's launch
                step.fail("task", item.task_instance_id, exc)
                continue
            if task.templates is None:
                launches.append(launch)
            else:
                pending.append(Unrendered(launch, task.templates, item.run_pk, run, task.map_over))
        rendered, refused = await render_launches(step.conn, pending, step.now)
        step.refused += refused
        return page, launches + rendered

    async def close(self, timeout: float | None = None) -> None:
        """Cancel the kills in progress; waits at most ``timeout`` s for them (None: until they end)."""
        await self.kills.close(timeout)

    # ------------------------------------------------------------------ the safety net

    async def sweep_runs(self, *, force: bool = False) -> None:
        """One keyset page of running runs checked for completion; every run it finishes is a repair."""
        if not force and self.ctx.clock.monotonic() < self._next_sweep:
            return

        page = await self._read(lambda s: run_endings.running_runs_after(s.conn, self._sweep_after,
                                                                           self.batch_size))

        async def sweep(runs: Sequence[int]) -> None:
            async with self.step() as step:
                step.touch(runs)
            if step.finished:
                metrics.SWEEP_REPAIRS.inc(len(step.finished))
                log.warning("the completion sweep finished runs their last step did not",
                            extra={"runs": [f"{r.dag_id}/{r.run_id}" for r in step.finished][:20]})

        await isolate(page, sweep, lambda run_pk, exc: self._poisoned("run", run_pk, exc))
        if len(page) < self.batch_size:
            self._sweep_after = 0
            self._next_sweep = self.ctx.clock.monotonic() + SWEEP_INTERVAL
        else:
            self._sweep_after = page[-1]
