"""One scheduling tick, step by step, under one leadership term.

:class:`SchedulerCore` holds what a term needs between ticks — the executor, the compiled-DAG
cache, the inbox of executor reports, the runs touched since the last completion check — and
performs the steps of a tick in short fenced transactions:

- every tick, in ONE transaction (:meth:`SchedulerCore.hot_step`): apply a batch of executor
  reports (batched CAS; successes release downstream tasks, final failures mark descendants
  ``upstream_failed``, failures with tries left become ``up_for_retry``); queue ready tasks up to
  ``LEOFLOW_PARALLELISM`` (``kind: empty`` tasks succeed on the spot, repeated a few rounds so
  chains of joins resolve at once); finish runs whose task instances are all final and start the
  queued runs that frees. The queued tries are handed to the executor after the commit;
- once per interval or after a NOTIFY: create due scheduled runs (:mod:`.timetable`; unique ids,
  so racing leaders cannot duplicate), start queued runs that ``max_active_runs`` allows (also
  after a run finished), time out running tasks past ``timeout_at``, ask the executor to kill
  tries flagged ``cancelling`` (cancelled runs, timeouts; at most :data:`KILL_CONCURRENCY` at
  once, beside the loop), and page a slow keyset sweep of running runs for completion (a
  crash-safety net).

Failure semantics: every write transaction starts with the fencing check, so a stale leader's
step raises :class:`~leoflow.errors.FencedOut` and writes nothing; the service stops on it. A
database error aborts only the current step's transaction — reports taken from the inbox are put
back first — and the service retries on the next tick. Work per step is bounded by
``batch_size`` rows, so memory stays flat whatever the backlog.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

from leoflow.aiotasks import Registry, cancel_and_wait, start_guarded
from leoflow.db import scheduler_store as store
from leoflow.db.database import Connection
from leoflow.db.scheduler_store import LiveTaskInstance, Transition, TryChange
from leoflow.errors import DatabaseError, FencedOut
from leoflow.executor.base import Executor
from leoflow.leadership import LeaderContext
from leoflow.metrics import scheduler as metrics
from leoflow.model.graph import DagGraph, GraphCache
from leoflow.model.run_context import RunContext, task_environment
from leoflow.model.run_ids import scheduled_run_id
from leoflow.model.timetable import plan_scheduled_runs
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey
from leoflow.scheduler.transitions import InFlightTry, TryFacts, fold_reports, fold_try_facts, timeout_transition

log = logging.getLogger(__name__)

#: Rows per step and statement. Large enough that one round trip moves hundreds of tasks, small
#: enough that a tick stays well under a second on a loaded machine.
DEFAULT_BATCH_SIZE = 500
#: Rounds of "queue ready tasks" per tick while empty tasks keep unlocking more work.
EMPTY_TASK_ROUNDS = 20
#: Scheduled runs created per DAG per tick when catching up.
CATCHUP_RUNS_PER_TICK = 50
#: DAGs examined for due scheduled runs per tick.
DUE_DAGS_PER_TICK = 100
#: Seconds between pages of the completion sweep (a safety net; touched runs finish at once).
SWEEP_INTERVAL = 10.0
#: Tries being killed at once. Cancelling a run of hundreds of running tries must not start
#: hundreds of kills (each reads logs and calls the API server); the rest wait their turn,
#: holding nothing (no database connection is held while an executor kills).
KILL_CONCURRENCY = 16


class SchedulerCore:
    """The scheduling steps of one leadership term (see the module docstring)."""

    def __init__(self, ctx: LeaderContext, executor: Executor, *, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        self.ctx = ctx
        self.executor = executor
        self.batch_size = batch_size
        self.parallelism = ctx.settings.scheduler.parallelism
        self.max_retry_delay = ctx.settings.scheduler.max_retry_delay
        self.graphs = GraphCache()
        # Bounded in practice: reports exist only for tries in flight (<= parallelism) plus what
        # the executor reconciles at start.
        self.inbox: deque[StatusUpdate] = deque()
        self.touched_runs: set[int] = set()
        self.inflight: dict[TryKey, InFlightTry] = {}
        self._killing: dict[int, asyncio.Task[None]] = {}
        self._kill_tasks: Registry = set()
        self._kill_slots = asyncio.Semaphore(KILL_CONCURRENCY)
        self._sweep_after = 0
        self._next_sweep = 0.0
        self._next_periodic = 0.0
        self._poked = True

    # ------------------------------------------------------------------ plumbing

    @asynccontextmanager
    async def fenced(self) -> AsyncIterator[Connection]:
        """A write transaction that commits only while this term is the newest."""
        async with self.ctx.db.fenced(self.ctx.cluster, self.ctx.term) as conn:
            yield conn

    async def _graphs(self, conn: Connection, version_ids: Iterable[int]) -> dict[int, DagGraph]:
        wanted = set(version_ids)
        missing = self.graphs.missing(wanted)
        loaded: dict[int, DagGraph] = {}
        if missing:
            for vid, spec in (await store.load_specs(conn, missing)).items():
                loaded[vid] = self.graphs.add(vid, spec)
        return {vid: loaded[vid] if vid in loaded else self.graphs.get(vid) for vid in wanted}

    def now(self) -> datetime:
        return self.ctx.clock.now()

    def poke(self) -> None:
        """Something outside changed (a NOTIFY): run every step on the next tick, not just the hot ones."""
        self._poked = True

    async def tick(self) -> bool:
        """Run the steps once; True if anything changed (the loop then ticks again at once).

        The hot steps (reports, queueing, finishing touched runs) run every tick. The others scan
        for work that only appears with time or from outside — due schedules, timeouts, runs to
        start, tries to kill — so they run once per interval or after a NOTIFY (runs are also
        started inside the hot step as soon as a finished run frees a ``max_active_runs`` slot).
        On a busy leader this halves the round trips per tick.
        """
        now = self.ctx.clock.monotonic()
        periodic = self._poked or now >= self._next_periodic
        if periodic:
            self._poked = False
            self._next_periodic = now + self.ctx.settings.scheduler.interval
        busy = False
        if periodic:
            busy = await self.create_scheduled_runs() or busy
        if periodic:
            busy = await self.start_queued_runs() or busy
        if periodic:
            busy = await self.apply_timeouts() or busy
            await self.kill_cancelled_tries()
        busy = await self.hot_step() or busy
        await self.sweep_runs()
        return busy

    async def hot_step(self) -> bool:
        """Reports, queueing and run completion in ONE fenced transaction: the busy path.

        One transaction instead of three saves two fencing checks and two commits per tick, which
        is most of a tick's cost on a loaded machine. Reports taken from the inbox are put back if
        the transaction fails (at-least-once); tries are handed to the executor only after the
        commit, so an executor never sees a try the database does not have.
        """
        now = self.now()
        batch = [self.inbox.popleft() for _ in range(min(len(self.inbox), self.batch_size))]
        launches: list[TaskLaunch] = []
        finished: list[store.FinishedRun] = []
        succeeded = 0
        pks: list[int] = []
        try:
            async with self.fenced() as conn:
                if batch:
                    await self._apply_reports_in(conn, batch, now)
                if self.touched_runs:
                    pks = sorted(self.touched_runs)[: self.batch_size]
                    finished = await store.finish_runs(conn, pks, now, self.ctx.term)
                if finished:
                    # A finished run frees a max_active_runs slot: start the next queued runs now,
                    # so their first tasks are queued in this very transaction.
                    startable = await store.startable_runs(conn, self.batch_size)
                    if startable:
                        await store.start_runs(conn, startable, now, self.ctx.term)
                for _ in range(EMPTY_TASK_ROUNDS):
                    done, queued = await self._queue_round(conn, now)
                    succeeded += done
                    launches.extend(queued)
                    if not done:
                        break
        except BaseException:  # not swallowed: at-least-once, the reports are retried next tick
            self.inbox.extendleft(reversed(batch))
            raise
        self.touched_runs.difference_update(pks)
        if succeeded:
            metrics.TASK_TRANSITIONS.labels(state="success").inc(succeeded)
        for launch in launches:
            await self.submit(launch)
        self._report_finished(finished)
        return bool(batch or succeeded or launches or finished)

    # ------------------------------------------------------------------ 1. executor reports

    async def _apply_reports_in(self, conn: Connection, batch: Sequence[StatusUpdate], now: datetime) -> None:
        """Apply one batch of reports inside the caller's fenced transaction.

        Fast path: tries this term queued are remembered (``self.inflight``: bounded by the
        parallelism) with the state the scheduler last gave them, so their reports need no
        lookup. The CAS still guards them: if the row moved (cancelled, timed out), the miss is
        re-done on the slow path, which locks and re-reads the rows, so nothing is lost.
        """
        fast = [u for u in batch if u.key in self.inflight]
        slow_keys = [u.key for u in batch if u.key not in self.inflight]
        rows = [self.inflight[u.key].row() for u in fast]
        if slow_keys:
            rows.extend(await store.lock_task_instances(conn, slow_keys))
        _, missed = await self._fold_and_apply(conn, batch, rows, now)
        if missed:
            for key in missed:
                self.inflight.pop(key, None)
            fresh = await store.lock_task_instances(conn, missed)
            retry = [u for u in batch if u.key in set(missed)]
            await self._fold_and_apply(conn, retry, fresh, now, record_tries=False)

    async def _fold_and_apply(self, conn: Connection, batch: Sequence[StatusUpdate],
                              rows: Sequence[LiveTaskInstance], now: datetime, *,
                              record_tries: bool = True) -> tuple[set[int], list[TryKey]]:
        """Fold reports per task instance, CAS them; returns (applied ids, keys whose CAS missed)."""
        by_key = {(r.dag_id, r.run_id, r.task_id): r for r in rows}
        graphs = await self._graphs(conn, {r.version_id for r in rows})
        updates: dict[int, list[StatusUpdate]] = defaultdict(list)
        facts: dict[tuple[int, int], TryFacts] = {}
        for update in batch:
            row = by_key.get((update.key.dag_id, update.key.run_id, update.key.task_id))
            if row is None:
                log.debug("report for an unknown task instance", extra={"try": str(update.key)})
                continue
            updates[row.id].append(update)
            fold_try_facts(facts, row.id, update)
        rows_by_id = {r.id: r for r in rows}
        transitions = [t for ti_id, ups in updates.items()
                       if (t := fold_reports(rows_by_id[ti_id], ups,
                                             graphs[rows_by_id[ti_id].version_id].task(rows_by_id[ti_id].task_id),
                                             max_retry_delay=self.max_retry_delay)) is not None]
        try_changes = [TryChange(ti_id, try_number, f.state, f.started_at, f.ended_at, f.exit_code, f.reason,
                                 f.executor_ref) for (ti_id, try_number), f in facts.items()] if record_tries else []
        applied = await store.apply_transitions(conn, transitions, now, self.ctx.term, try_changes=try_changes)
        await self._after_transitions(conn, [t for t in transitions if t.ti_id in applied], rows_by_id, graphs, now)
        missed: list[TryKey] = []
        for t in transitions:
            row = rows_by_id[t.ti_id]
            key = TryKey(row.dag_id, row.run_id, row.task_id, row.try_number)
            entry = self.inflight.get(key)
            if t.ti_id not in applied:
                if entry is not None:
                    missed.append(key)
            elif t.new_state == "running" and entry is not None:
                entry.state, entry.started_at = "running", t.started_at
            else:
                self.inflight.pop(key, None)
        return applied, missed

    async def _after_transitions(self, conn: Connection, applied: Sequence[Transition],
                                 rows: dict[int, LiveTaskInstance], graphs: dict[int, DagGraph],
                                 now: datetime) -> None:
        release: list[tuple[int, str]] = []
        doomed: list[tuple[int, str]] = []
        for t in applied:
            row = rows[t.ti_id]
            graph = graphs[row.version_id]
            metrics.TASK_TRANSITIONS.labels(state=t.new_state).inc()
            if t.new_state == "success":
                release.extend((row.run_pk, d) for d in graph.downstream.get(row.task_id, ()))
                if row.task_id in graph.leaves:
                    self.touched_runs.add(row.run_pk)
            elif t.new_state == "failed":
                doomed.extend((row.run_pk, d) for d in graph.descendants(row.task_id))
                self.touched_runs.add(row.run_pk)
        await store.release_downstream(conn, release, now)
        marked = await store.mark_upstream_failed(conn, doomed, now, self.ctx.term)
        if marked:
            metrics.TASK_TRANSITIONS.labels(state="upstream_failed").inc(marked)

    # ------------------------------------------------------------------ 2. scheduled runs

    async def create_scheduled_runs(self) -> bool:
        now = self.now()
        async with self.fenced() as conn:
            dues = await store.due_dags(conn, now, DUE_DAGS_PER_TICK)
            for dag in dues:
                plan = plan_scheduled_runs(dag.schedule, dag.timezone, catchup=dag.catchup,
                                           next_run_at=dag.next_run_at, now=now, limit=CATCHUP_RUNS_PER_TICK)
                created = await store.create_scheduled_runs(
                    conn, dag, [scheduled_run_id(d) for d in plan.logical_dates], plan.logical_dates, now,
                    self.ctx.term)
                await store.advance_next_run(conn, dag.dag_id, dag.next_run_at, plan.next_run_at)
                metrics.RUNS_CREATED.inc(created)
                if created:
                    log.info("scheduled runs created", extra={"dag_id": dag.dag_id, "runs": created,
                                                              "next_run_at": plan.next_run_at.isoformat()})
        return bool(dues)

    # ------------------------------------------------------------------ 3. starting runs

    async def start_queued_runs(self) -> bool:
        now = self.now()
        async with self.fenced() as conn:
            candidates = await store.startable_runs(conn, self.batch_size)
            started = await store.start_runs(conn, candidates, now, self.ctx.term) if candidates else []
        return bool(started)

    # ------------------------------------------------------------------ 4. queueing

    async def _queue_round(self, conn: Connection, now: datetime) -> tuple[int, list[TaskLaunch]]:
        """Succeed ready empty tasks and queue ready container tasks up to the free slots.

        Returns (empty tasks succeeded, launches to submit after the commit).
        """
        free = max(0, self.parallelism - await store.count_slots_in_use(conn))
        ready = await store.ready_task_instances(conn, self.batch_size)
        if not ready:
            return 0, []
        graphs = await self._graphs(conn, {r.version_id for r in ready})
        empties: list[store.ReadyTask] = []
        containers: list[store.ReadyTask] = []
        for r in ready:
            task = graphs[r.version_id].task(r.task_id)
            (empties if task is not None and task.kind == "empty" else containers).append(r)
        succeeded = await store.succeed_empty_tasks(conn, [r.id for r in empties], now, self.ctx.term)
        release: list[tuple[int, str]] = []
        versions = {r.id: r.version_id for r in empties}
        for ti_id, run_pk, task_id in succeeded:
            graph = graphs[versions[ti_id]]
            release.extend((run_pk, d) for d in graph.downstream.get(task_id, ()))
            if task_id in graph.leaves:
                self.touched_runs.add(run_pk)
        await store.release_downstream(conn, release, now)
        queued = await store.queue_task_instances(conn, containers[:free], now, self.ctx.term) if free else []
        by_id = {r.id: r for r in containers}
        if len(self.inflight) > 4 * max(self.parallelism, self.batch_size):
            self.inflight.clear()  # entries of tries that never reported; the slow path covers them
        launches: list[TaskLaunch] = []
        runs = await store.run_contexts(conn, (by_id[q.task_instance_id].run_pk for q in queued))
        for q in queued:
            r = by_id[q.task_instance_id]
            key = TryKey(r.dag_id, r.run_id, r.task_id, q.try_number)
            self.inflight[key] = InFlightTry(r.id, r.run_pk, r.task_id, q.try_number, r.max_tries, r.dag_id,
                                           r.run_id, r.version_id)
            launches.append(self._launch(graphs[r.version_id], key, q.task_try_id, runs[r.run_pk]))
        return len(succeeded), launches

    def _launch(self, graph: DagGraph, key: TryKey, task_try_id: int, run: RunContext) -> TaskLaunch:
        task = graph.tasks[key.task_id]
        return TaskLaunch(key=key, task_try_id=task_try_id, term=self.ctx.term, image=task.image,
                          command=task.command, args=task.args, env=task_environment(key, run, task.env),
                          resources=task.resources, timeout_seconds=task.timeout_seconds, pod=task.pod)

    async def submit(self, launch: TaskLaunch) -> None:
        """Hand a try to the executor; an executor error fails the try (retried if tries remain)."""
        try:
            await self.executor.submit(launch)
        except (asyncio.CancelledError, FencedOut):
            raise
        except Exception as exc:  # containment: whatever the executor raised for one try fails that try
            log.exception("executor refused a try", extra={"try": str(launch.key)})
            self.inbox.append(StatusUpdate(key=launch.key, state="failed", at=self.now(),
                                           reason=f"executor error: {exc}"[:500]))
            return
        metrics.TASKS_QUEUED.inc()

    async def resubmit_queued(self) -> int:
        """After a failover: hand every queued try to the executor again (submit is idempotent)."""
        after, count = 0, 0
        while True:
            async with self.ctx.db.connect() as conn:
                page = await store.queued_tries_after(conn, after, self.batch_size)
                graphs = await self._graphs(conn, {p.version_id for p in page})
            if not page:
                return count
            for item in page:
                await self.submit(self._launch(graphs[item.version_id], item.key, item.task_try_id, item.run))
            after, count = page[-1].task_try_id, count + len(page)

    # ------------------------------------------------------------------ 5. timeouts

    async def apply_timeouts(self) -> bool:
        now = self.now()
        async with self.fenced() as conn:
            ids = await store.timed_out_task_instances(conn, self.batch_size)
            if not ids:
                return False
            rows = await store.lock_task_instances_by_id(conn, ids)
            graphs = await self._graphs(conn, {r.version_id for r in rows})
            transitions = [t for r in rows
                           if (t := timeout_transition(r, graphs[r.version_id].task(r.task_id), now=now,
                                                       max_retry_delay=self.max_retry_delay)) is not None]
            applied = await store.apply_transitions(conn, transitions, now, self.ctx.term)
            done = [t for t in transitions if t.ti_id in applied]
            rows_by_id = {r.id: r for r in rows}
            await self._after_transitions(conn, done, rows_by_id, graphs, now)
            for t in done:
                await store.request_kill(conn, [(t.ti_id, t.try_number)], t.reason or "timed out")
        for t in done:
            log.info("task timed out", extra={"task_instance_id": t.ti_id, "state": t.new_state})
        if done:
            self._poked = True  # kill the timed-out tries on the next tick, not an interval later
        return bool(done)

    # ------------------------------------------------------------------ 6. killing tries

    async def kill_cancelled_tries(self) -> None:
        async with self.ctx.db.connect() as conn:
            victims = await store.tries_to_kill(conn, self.batch_size)
        for victim in victims:
            if victim.task_try_id not in self._killing:
                self._killing[victim.task_try_id] = start_guarded(
                    self._kill(victim.task_try_id, victim.key), f"scheduler-kill:{victim.task_try_id}",
                    may_return=True, registry=self._kill_tasks)

    async def _kill(self, task_try_id: int, key: TryKey) -> None:
        """Executor cancels may wait for a grace period; they run beside the loop, not in it.

        At most :data:`KILL_CONCURRENCY` at once; the cancel (network) happens with no
        transaction open, the "killed" mark is a short fenced write after it.
        """
        try:
            async with self._kill_slots:
                await self.executor.cancel(key)
            async with self.fenced() as conn:
                await store.mark_tries_killed(conn, [task_try_id], self.now())
        except asyncio.CancelledError:
            raise
        except FencedOut:
            log.info("kill not recorded: fenced out", extra={"try": str(key)})
        except DatabaseError as exc:
            log.warning("could not record a kill; will retry", extra={"try": str(key), "error": str(exc)})
        except Exception:  # containment: one try the executor cannot kill must not stop the others' kills
            log.exception("could not kill try; will retry", extra={"try": str(key)})
        finally:
            self._killing.pop(task_try_id, None)

    async def close(self) -> None:
        await cancel_and_wait(self._kill_tasks)

    # ------------------------------------------------------------------ 7. finishing runs

    async def sweep_runs(self, *, force: bool = False) -> None:
        """One keyset page of running runs checked for completion (a crash-safety net)."""
        if not force and self.ctx.clock.monotonic() < self._next_sweep:
            return
        async with self.fenced() as conn:
            page = await store.running_runs_after(conn, self._sweep_after, self.batch_size)
            finished = await store.finish_runs(conn, page, self.now(), self.ctx.term) if page else []
        self._report_finished(finished)
        if len(page) < self.batch_size:
            self._sweep_after = 0
            self._next_sweep = self.ctx.clock.monotonic() + SWEEP_INTERVAL
        else:
            self._sweep_after = page[-1]

    def _report_finished(self, finished: Sequence[store.FinishedRun]) -> None:
        for run in finished:
            metrics.RUNS_FINISHED.labels(state=run.state).inc()
            log.info("run finished", extra={"dag_id": run.dag_id, "run_id": run.run_id, "state": run.state})
