"""The parts of a tick that look for work appearing with time or from outside.

Run once per ``LEOFLOW_SCHEDULER_INTERVAL`` or after a NOTIFY, inside the tick's step:

- **scheduled runs**: DAGs whose ``next_run_at`` is due get their runs, set-based: the due DAGs
  of a step are planned in one pass (each distinct schedule once,
  :class:`~leoflow.model.spec.timetable.TickPlanner`) and written with one statement that inserts
  their runs and moves their ``next_run_at`` forward with a compare-and-set
  (:func:`~leoflow.db.stores.runs.lifecycle.create_due_runs`), as many DAGs as their rows fit the row
  budget (the rest at once in the next step); one log line per step, the DAG ids at debug. While
  due DAGs are left behind a step, it only creates: every due run is queued first, then they
  start oldest first (for at most :data:`CREATE_FIRST_STEPS` steps in a row). The scheduler
  core may write those creating steps' DAGs, and start the backlog after them, in concurrent
  steps (:meth:`write_due`, :meth:`start_chosen`; ADR 0022);
- **timeouts**: running tasks past ``timeout_at`` fail (or go up for retry) and their tries are
  flagged for killing;
- **run deadlines**: running runs past their ``deadline_at`` (``run_timeout_seconds`` after
  their start, on the database's clock) fail with the reason ``run deadline exceeded``
  (:data:`~leoflow.model.spec.notify.DEADLINE_REASON`, which the notifier announces as a
  ``deadline`` event); their unfinished tasks are cancelled and their live tries killed;
- **clear and mark**: the commands operators recorded through the API, applied under this
  term (:mod:`leoflow.scheduler.commands`);
- **cancelling task instances**: a task cleared while a try of it was live waits in
  ``cancelling`` until the executor has confirmed that try gone (the try's row finished: killed,
  or ended on its own); then it becomes ``pending``, its upstreams are counted again and its
  trigger rule decides it, as a clear would have at once. Read from the database on every
  periodic step, so a new leader carries on with the waits and kills an old one began;
- **starting runs**: queued runs that ``max_active_runs`` allows start; their task instances
  are created and their roots handed to the step as ready (also called whenever a finished run
  frees a slot).

Containment: a DAG whose schedule cannot be evaluated has its schedule stopped with the reason
(``dags.schedule_error``); a run whose version does not compile fails before it starts; a task
whose timeout cannot be computed fails alone. Each part is also a :class:`Part` — a scan and an
apply over explicit entities — so a step that failed as a whole can be redone part by part and
bisected (:func:`leoflow.scheduler.containment.isolate`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar

from leoflow.db.stores import commands as command_store
from leoflow.db.stores import tries as try_store
from leoflow.db.stores.datasets import triggers as dataset_triggers
from leoflow.db.stores.runs import endings as run_endings
from leoflow.db.stores.runs import exits as run_exits
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.db.stores.runs import starts as run_starts
from leoflow.db.stores.task_instances import transitions as ti_store
from leoflow.metrics import scheduler as metrics
from leoflow.model.run_ids import scheduled_run_id
from leoflow.model.spec.notify import DEADLINE_REASON
from leoflow.model.spec.timetable import TickPlanner, stored_bounds
from leoflow.scheduler.commands import apply_commands
from leoflow.scheduler.containment import EntityKind
from leoflow.scheduler.datasets import pending_slot, record_slots, trigger_dataset_runs
from leoflow.scheduler.fanout import failure_rows, within_budget
from leoflow.scheduler.graphs import WARM_AHEAD, VersionGraphs
from leoflow.scheduler.step import Step
from leoflow.scheduler.transitions import timeout_transition
from leoflow.scheduler.waits import WaitChecker

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Scheduled runs created per DAG per tick when catching up.
CATCHUP_RUNS_PER_TICK = 50
#: Steps in a row that only create due runs, leaving their starts for after (see ``Periodic.creating``):
#: 20 steps queue 25,000 DAGs' runs with the default row budget; then a step starts runs whatever is
#: still due.
CREATE_FIRST_STEPS = 20
#: Clears and marks applied per tick (each resets up to a whole run; operators send few).
COMMANDS_PER_TICK = 20


@dataclass(frozen=True)
class Part(Generic[T]):
    """One periodic part as a scan and an apply over explicit entities (for isolation)."""

    kind: EntityKind
    scan: Callable[[Step], Awaitable[list[T]]]
    apply: Callable[[Step, Sequence[T]], Awaitable[Any]]
    entity: Callable[[T], int | str]


class Periodic:
    """The periodic parts of one term's ticks (see the module docstring)."""

    def __init__(self, graphs: VersionGraphs, quarantine: set[tuple[EntityKind, int | str]], *,
                 batch_size: int, row_budget: int) -> None:
        self.graphs = graphs
        self.quarantine = quarantine
        self.batch_size = batch_size
        #: Rows one step's scheduled runs, run starts, timeouts and run deadlines may each write
        #: (:mod:`leoflow.scheduler.fanout`).
        self.row_budget = row_budget
        #: Startable runs were left for the next tick (the row budget or the batch was spent).
        self.more_to_start = False
        #: Timed-out tasks, expired runs or due DAGs were left over the row budget: run the parts again at once.
        self.more_due = False
        #: The last step created runs and more DAGs are due behind them. Creating a run is a few
        #: rows, starting one is its task instances and their fan-out: at a boundary where
        #: thousands of DAGs are due, the runs are all queued first (10,000 in about a second), then
        #: started oldest first, instead of each step starting what it had just created while the
        #: DAGs behind waited to be queued at all.
        self.creating = False
        self._creating_steps = 0
        #: The last scan of due DAGs read a whole page (more may be due behind it).
        self._due_page_full = False
        #: The last scan of DAGs waiting on datasets read a whole page.
        self._waiting_page_full = False
        #: The earliest ``next_run_at`` after the last periodic step (None: no DAG is scheduled): the
        #: loop wakes then, so a boundary's step starts at the boundary, not up to an interval later.
        self.next_due: datetime | None = None
        #: A boundary came within WARM_AHEAD: its DAGs' graphs should be compiled before it (taken
        #: by the service, which clears it); each boundary asks once.
        self.warm_wanted = False
        self._warmed_for: datetime | None = None
        #: Task waits (``wait_for``, ``depends_on_past``): woken by changes, judged when due.
        self.waits = WaitChecker(batch_size)

    async def run(self, step: Step, *, starts: bool = True) -> bool:
        """Every periodic part; True if runs are to start in this tick (not while every due run is
        being queued first). ``starts=False``: all but starting them (a split start follows)."""
        self.more_due = False
        await self.create_scheduled_runs(step)
        await self.trigger_dataset_runs(step)
        await self.apply_timeouts(step)
        await self.check_waits(step)
        await self.apply_deadlines(step)
        await self.release_cancelled(step)
        await self.apply_commands(step)
        # The next step creates more, at once: starting waits until every due run is queued — for at
        # most CREATE_FIRST_STEPS steps in a row, so a long catch-up of many DAGs never starves starts.
        self._creating_steps = self._creating_steps + 1 if self.creating else 0
        step.kill_check = True
        if 0 < self._creating_steps <= CREATE_FIRST_STEPS:
            self.more_to_start = True
            return False
        self._creating_steps = 0
        if starts:
            await self.start_runs(step)
        return True

    def parts(self) -> list[Part[Any]]:
        return [Part("dag", self._due, self._create, lambda d: d.dag_id),
                Part("dag", self._dataset_waiting, self._trigger_datasets, lambda d: d),
                Part("task", self._timed_out, self._time_out, lambda i: i),
                Part("task", self.waits.due, self.waits.apply, lambda i: i),
                Part("run", self._past_deadline, self._expire, lambda i: i),
                Part("task", self._cancelled, self._release, lambda i: i),
                Part("run", self._startable, self._start, lambda r: r.run_pk)]

    # ------------------------------------------------------------------ scheduled runs

    async def create_scheduled_runs(self, step: Step) -> None:
        await self._create(step, await self._due(step))
        self.next_due = await run_starts.next_due_at(step.conn, step.now)
        if self.next_due is not None and self.next_due - step.now <= WARM_AHEAD and self.next_due != self._warmed_for:
            self._warmed_for = self.next_due
            self.warm_wanted = True  # the service compiles its DAGs' graphs beside the loop (graphs.warm)

    @property
    def due_per_step(self) -> int:
        """Due DAGs one step reads: each writes at least two rows (a run and its ``dags`` row)."""
        return max(1, self.row_budget // 2)

    async def _due(self, step: Step) -> list[run_store.DueDag]:
        dues = await run_store.due_dags(step.conn, step.now, self.due_per_step)
        self._due_page_full = len(dues) >= self.due_per_step
        return [d for d in dues if ("dag", d.dag_id) not in self.quarantine]

    async def _create(self, step: Step, dues: Sequence[run_store.DueDag]) -> None:
        """Plan every due DAG, take as many as their rows fit the budget, write them in one statement."""
        advanced, left = await self.write_due(step, dues)
        # More are due (left over the budget, or past the page read): the next step at once, but
        # only if this one moved a DAG on, so DAGs that cannot move never keep the loop busy.
        self.creating = advanced and (left or self._due_page_full)
        self.more_due = self.more_due or self.creating

    @property
    def may_split_creation(self) -> bool:
        """Due runs are being queued first and may go on so (within CREATE_FIRST_STEPS): the next
        tick may create them in a split (ADR 0022), the other periodic parts waiting meanwhile."""
        return self.creating and self._creating_steps < CREATE_FIRST_STEPS

    async def due_pages(self, step: Step, pages: int) -> list[run_store.DueDag]:
        """The due DAGs of ``pages`` steps at once (a split creation's read)."""
        limit = self.due_per_step * pages
        dues = await run_store.due_dags(step.conn, step.now, limit)
        self._due_page_full = len(dues) >= limit
        return [d for d in dues if ("dag", d.dag_id) not in self.quarantine]

    def created_split(self, advanced: bool, left: bool) -> None:
        """A split creation's parts are done: as ``_create`` after one step, counted as a creating step."""
        self.creating = advanced and (left or self._due_page_full)
        self.more_due = self.creating
        self.more_to_start = True
        self._creating_steps = self._creating_steps + 1 if self.creating else 0

    async def write_due(self, step: Step, dues: Sequence[run_store.DueDag]) -> tuple[bool, bool]:
        """Plan ``dues`` and write as many as their rows fit the budget in one statement; (a DAG moved
        on, DAGs were left over the budget). Touches no state of this object: the parts of a split
        creation call it side by side."""
        step.due += len(dues)
        planner = TickPlanner(step.now, CATCHUP_RUNS_PER_TICK)
        plans: list[run_store.PlannedRuns] = []
        slots: dict[str, tuple[datetime, datetime]] = {}
        for dag in dues:
            try:
                end_date, deadline = stored_bounds(dag.end_date, dag.deadline)
                plan = planner.plan(dag.schedule, dag.timezone, catchup=dag.catchup, next_run_at=dag.next_run_at,
                                    end_date=end_date, deadline=deadline)
                if dag.overlap == "skip" and dag.active:  # the slots pass, without runs
                    plan = replace(plan, logical_dates=(), interval_starts=())
                plan = pending_slot(dag.dag_id, dag.schedule, plan, slots)  # combine: and waits for data
                run_ids = [scheduled_run_id(d) for d in plan.logical_dates]
            except Exception as exc:  # containment: this DAG's schedule, whatever makes it unplannable
                step.fail("dag", dag.dag_id, exc)
                continue
            plans.append(run_store.PlannedRuns(dag.dag_id, dag.version_id, dag.next_run_at, plan.next_run_at, run_ids,
                                               plan.logical_dates, plan.interval_starts))
        # Each DAG writes its runs and its own row: as many DAGs as that fits the row budget (at
        # least one, so a catch-up of CATCHUP_RUNS_PER_TICK runs always goes through).
        taken = within_budget((len(p.run_ids) + 1 for p in plans), self.row_budget)
        created = await run_store.create_due_runs(step.conn, plans[:taken], step.now, step.term)
        await record_slots(step, slots, created)
        await self._replace_overlapped(step, [p for p in plans[:taken] if created.get(p.dag_id)],
                                       {d.dag_id for d in dues if d.overlap == "replace" and d.active})
        total = sum(created.values())
        step.created += total
        metrics.RUNS_CREATED.inc(total)
        if plans:
            log.info("scheduled runs created", extra={
                "due": len(dues), "planned": taken, "advanced": len(created), "runs": total,
                "left": len(plans) - taken, "schedules": planner.distinct})
        if created and log.isEnabledFor(logging.DEBUG):
            log.debug("scheduled runs created for DAGs", extra={"dag_ids": sorted(d for d, n in created.items() if n)})
        return bool(created), taken < len(plans)

    async def _replace_overlapped(self, step: Step, created: Sequence[run_store.PlannedRuns],
                                  replacing: set[str]) -> None:
        """``overlap: replace``: the DAG's earlier runs are cancelled, through the cancel path, once its new
        run exists (not before: a DAG re-applied since the scan gets no new run and keeps its old ones)."""
        new = {p.dag_id: p.run_ids for p in created if p.dag_id in replacing}
        if not new:
            return
        cancelled = await run_store.cancel_replaced_runs(step.conn, new)
        step.kill_check = step.kill_check or bool(cancelled)
        if cancelled:
            log.info("runs replaced by a scheduled run (overlap: replace)", extra={"runs": cancelled[:20]})

    # ------------------------------------------------------------------ dataset-triggered runs

    async def trigger_dataset_runs(self, step: Step) -> None:
        await self._trigger_datasets(step, await self._dataset_waiting(step))

    async def _dataset_waiting(self, step: Step) -> list[str]:
        waiting = await dataset_triggers.waiting_dags(step.conn, self.due_per_step)
        self._waiting_page_full = len(waiting) >= self.due_per_step
        return [d for d in waiting if ("dag", d) not in self.quarantine]

    async def _trigger_datasets(self, step: Step, dag_ids: Sequence[str]) -> None:
        # A full page that started runs: more may wait behind it (DAGs that cannot start keep nothing busy).
        created = await trigger_dataset_runs(step, dag_ids)
        self.more_due = self.more_due or (created > 0 and self._waiting_page_full)

    # ------------------------------------------------------------------ timeouts

    async def apply_timeouts(self, step: Step) -> None:
        await self._time_out(step, await self._timed_out(step))

    async def _timed_out(self, step: Step) -> list[int]:
        ids = await ti_store.timed_out_task_instances(step.conn, self.batch_size)
        return [i for i in ids if ("task", i) not in self.quarantine]

    async def _time_out(self, step: Step, ids: Sequence[int]) -> None:
        if not ids:
            return
        rows = await ti_store.lock_task_instances_by_id(step.conn, ids)
        graphs = await step.graphs.load(step.conn, {r.version_id for r in rows})
        rows = step.usable(rows, graphs)
        # A final failure dooms its descendants: as many timeouts as their rows fit the budget
        # (at least one); the others are still past their timeout on the next tick.
        taken = within_budget((failure_rows(graphs[r.version_id], r.task_id, r.try_number, r.max_tries)
                               for r in rows), self.row_budget)
        self.more_due = self.more_due or taken < len(rows)
        rows = rows[:taken]
        transitions = []
        for row in rows:
            try:
                t = timeout_transition(row, graphs[row.version_id].task(row.task_id), now=step.now,
                                       max_retry_delay=step.max_retry_delay)
            except Exception as exc:  # containment: this task's timeout
                step.fail("task", row.id, exc)
                continue
            if t is not None:
                transitions.append(t)
        applied = await ti_store.apply_transitions(step.conn, transitions, step.now, step.term)
        done = [t for t in transitions if t.ti_id in applied]
        await step.after_transitions(done, {r.id: r for r in rows}, graphs)
        for t in done:
            await try_store.request_kill(step.conn, [(t.ti_id, t.try_number)], t.reason or "timed out")
            log.info("task timed out", extra={"task_instance_id": t.ti_id, "state": t.new_state})
        step.kill_check = step.kill_check or bool(done)

    # ------------------------------------------------------------------ task waits

    async def check_waits(self, step: Step) -> None:
        """Waiting tasks whose conditions are due for a check (leoflow.scheduler.waits)."""
        ids = [i for i in await self.waits.due(step) if ("task", i) not in self.quarantine]
        await self.waits.apply(step, ids)
        self.more_due = self.more_due or self.waits.more

    # ------------------------------------------------------------------ run deadlines

    async def apply_deadlines(self, step: Step) -> None:
        await self._expire(step, await self._past_deadline(step))

    async def _past_deadline(self, step: Step) -> list[int]:
        run_pks = await run_endings.runs_past_deadline(step.conn, self.batch_size)
        return [r for r in run_pks if ("run", r) not in self.quarantine]

    async def _expire(self, step: Step, run_pks: Sequence[int]) -> None:
        if not run_pks:
            return
        # Failing a run cancels all its unfinished tasks: as many runs as those fit the budget.
        active = await run_endings.active_task_counts(step.conn, run_pks)
        taken = within_budget((1 + active.get(r, 0) for r in run_pks), self.row_budget)
        self.more_due = self.more_due or taken < len(run_pks)
        run_pks = run_pks[:taken]
        # A run with exit tasks fails its body only: the exit tasks still run (ADR 0014, decision 7).
        bodies = await run_exits.fail_bodies(step.conn, [(r, DEADLINE_REASON) for r in run_pks], step.now, step.term)
        await step.start_exits(bodies)
        step.kill_check = step.kill_check or bool(bodies)
        body_ended = frozenset(bodies)
        run_pks = [r for r in run_pks if r not in body_ended]
        expired = await run_endings.fail_runs(step.conn, [(r, DEADLINE_REASON) for r in run_pks], step.now,
                                                   step.term)
        step.finished.extend(expired)
        step.kill_check = step.kill_check or bool(expired)
        for run in expired:
            log.info("run deadline exceeded", extra={"dag_id": run.dag_id, "run_id": run.run_id})

    # ------------------------------------------------------------------ cancelling task instances

    async def release_cancelled(self, step: Step) -> None:
        await self._release(step, await self._cancelled(step))

    async def _cancelled(self, step: Step) -> list[int]:
        ids = await command_store.cancelling_task_instances(step.conn, self.batch_size)
        return [i for i in ids if ("task", i) not in self.quarantine]

    async def _release(self, step: Step, ids: Sequence[int]) -> None:
        """Old tries gone: ``pending`` again, counted and decided like a freshly cleared task."""
        runs = await command_store.release_task_instances(step.conn, ids, step.now, step.term)
        for run_pk in runs:
            await step.counted(await command_store.recount_pending(step.conn, run_pk, step.now))
        step.touch(runs)
        if runs:
            log.info("cleared tasks released: their previous tries are gone",
                     extra={"runs": runs[:20]})

    # ------------------------------------------------------------------ clear and mark

    async def apply_commands(self, step: Step) -> None:
        """Operators' clears and marks, recorded by the API (leoflow.scheduler.commands)."""
        await apply_commands(step, await command_store.pending_commands(step.conn, COMMANDS_PER_TICK))

    # ------------------------------------------------------------------ starting runs

    async def start_runs(self, step: Step) -> bool:
        """Start what ``max_active_runs`` allows; True if a run started (or failed instead)."""
        return await self._start(step, await self._startable(step))

    async def _startable(self, step: Step) -> list[run_store.StartableRun]:
        return await self.startable(step, self.batch_size)

    async def startable(self, step: Step, limit: int) -> list[run_store.StartableRun]:
        """At most ``limit`` queued runs ``max_active_runs`` lets start, oldest first (quarantined ones left out)."""
        runs = await run_starts.startable_runs(step.conn, limit)
        return [r for r in runs if ("run", r.run_pk) not in self.quarantine]

    async def _start(self, step: Step, runs: Sequence[run_store.StartableRun]) -> bool:
        self.more_to_start = False
        if not runs:
            return False
        progressed, left = await self.start_chosen(step, runs)
        self.more_to_start = left or len(runs) >= self.batch_size
        return progressed

    async def start_chosen(self, step: Step, runs: Sequence[run_store.StartableRun]) -> tuple[bool, bool]:
        """Start ``runs`` (read by :func:`~leoflow.db.stores.runs.starts.startable_runs`), as many as
        their tasks fit the row budget; (a run started or failed instead, runs were left over).

        Touches no state of this object: the parts of a split start (ADR 0022) call it side by side.
        """
        graphs = await step.graphs.load(step.conn, {r.version_id for r in runs})
        startable: list[int] = []
        tasks: list[int] = []
        for run in runs:
            if run.version_id in graphs:
                startable.append(run.run_pk)
                tasks.append(len(graphs[run.version_id].tasks))
            else:  # its version does not compile: the run fails instead of starting
                step.fail_run(run.run_pk, self.graphs.broken(run.version_id) or "scheduler error: no DAG version")
        # Starting a run creates all its task instances: as many runs as their tasks fit the row
        # budget (at least one), the rest on the next tick (not all 500 runs of a 10,000-task DAG).
        taken = within_budget(tasks, self.row_budget)
        left = taken < len(startable)
        chosen = startable[:taken]
        started = await run_store.start_runs(step.conn, chosen, step.now, step.term)
        step.started += len(started.run_pks)
        step.add_candidates(started.roots)
        return bool(started.run_pks) or len(chosen) < len(runs), left
