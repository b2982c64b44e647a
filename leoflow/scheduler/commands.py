"""Clear and mark, applied by the leader inside its fenced step.

The API records commands (:mod:`leoflow.db.stores.commands`) and NOTIFYs; the leader's periodic
part applies the pending ones, oldest first, each with all its consequences in the step's one
transaction — task instances reset or marked, live tries flagged ``cancelling`` (killed after
the commit, beside the loop), the run reopened, the upstream counters of its pending task
instances recomputed and their trigger rules decided (:meth:`~leoflow.scheduler.step.Step.counted`,
so what is ready is queued in this same step) — and marks the command applied. Fenced: a leader
that lost its term commits none of it, and the next leader applies the command instead. Why
through the leader rather than by the API directly: the scheduler's counters and in-flight
bookkeeping change only under its term, so an operator's write can never interleave with a
step half-way (ADR 0011, docs/adr/0011-operator-commands-through-the-leader.md).

Refusals (a run that has not started, a task the run does not have) are stored on the command
as its ``error`` for the API to answer with; a command whose application raises is contained
in a savepoint of its own: it is rolled back alone and refused with the reason; the leader and
the other commands carry on. A command on a run whose DAG was deleted is refused and changes
nothing (the run stays cancelled); one whose DAG row a writer holds right now (a delete in
progress) stays pending for the next step.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from leoflow.db.stores import commands as command_store
from leoflow.db.stores import dags as dag_store
from leoflow.db.stores.commands import Command
from leoflow.db.stores.runs import exits as run_exits
from leoflow.db.stores.runs.endings import FinishedRun
from leoflow.errors import ValidationFailed, is_leader_fault
from leoflow.model.run_commands import (
    decided_downstream,
    parse_clear,
    parse_mark,
    parse_mark_run,
    tasks_to_clear,
    unknown_tasks,
)
from leoflow.scheduler.containment import clean_text
from leoflow.scheduler.step import Step

log = logging.getLogger(__name__)


class CommandRefused(Exception):
    """The command cannot be applied as asked (stored as its error; the API answers 409)."""


class CommandPostponed(Exception):
    """The command cannot be decided in this step (its DAG's row is being written): left pending."""


async def apply_commands(step: Step, commands: Sequence[Command]) -> None:
    for command in commands:
        try:
            async with command_store.savepoint(step.conn):
                outcome = await _apply(step, command)
        except (CommandRefused, ValidationFailed) as exc:
            await _refuse(step, command, str(exc))
            continue
        except CommandPostponed:
            continue
        except Exception as exc:  # containment: one command whose application raised is refused alone
            if is_leader_fault(exc):
                raise
            log.exception("run command failed", extra={"command": command.id})
            await _refuse(step, command, f"scheduler error: {type(exc).__name__}: {exc}")
            continue
        await command_store.finish_command(step.conn, command.id, step.now, step.term, outcome=outcome)
        log.info("run command applied", extra={"command": command.id, "kind": command.kind, **outcome})


async def _refuse(step: Step, command: Command, error: str) -> None:
    await command_store.finish_command(step.conn, command.id, step.now, step.term, error=clean_text(error))
    log.info("run command refused", extra={"command": command.id, "kind": command.kind, "error": error[:300]})


async def _refuse_deleted_dag(step: Step, dag_id: str) -> None:
    """A deleted DAG's runs were cancelled with it: a command recorded before the delete must not
    re-open one (issue 44). A delete in progress is waited out, one step at a time."""
    state = await dag_store.dag_state(step.conn, dag_id, share_lock=True)
    if state == "deleted":
        raise CommandRefused(f"DAG {dag_id!r} was deleted: its runs take no commands")
    if state == "busy":
        raise CommandPostponed(dag_id)


async def _apply(step: Step, command: Command) -> dict[str, object]:
    run = await command_store.lock_run(step.conn, command.run_pk)
    if run is None:
        raise CommandRefused("the run no longer exists")
    await _refuse_deleted_dag(step, run.dag_id)
    if run.state == "queued":
        raise CommandRefused(f"run {run.run_id!r} has not started yet: it has no task instances")
    graphs = await step.graphs.load(step.conn, {run.version_id})
    graph = graphs.get(run.version_id)
    if graph is None:
        raise CommandRefused(step.graphs.broken(run.version_id) or "the run's DAG version does not compile")
    states = await command_store.lock_task_states(step.conn, run.run_pk)
    who = command.requested_by or "an operator"
    if command.kind == "clear":
        request = parse_clear(command.body)
        missing = unknown_tasks(request, states)
        if missing:
            index, task_id = missing[0]
            raise CommandRefused(f"tasks[{index}]: run {run.run_id!r} has no task {task_id!r}")
        chosen = tasks_to_clear(request, states, graph)
        resets = [(t, graph.tasks[t].retries) for t in chosen if t in graph.tasks]
        changed: list[str] = []
        if request.map_index is not None and request.tasks:  # that instance; its downstream whole
            one = [r for r in resets if r[0] == request.tasks[0]]
            resets = [r for r in resets if r[0] != request.tasks[0]]
            changed += await command_store.reset_task_instances(step.conn, run.run_pk, one, f"cleared by {who}",
                                                                step.now, step.term, request.map_index)
        changed += await command_store.reset_task_instances(step.conn, run.run_pk, resets, f"cleared by {who}",
                                                            step.now, step.term)
        outcome: dict[str, object] = {"tasks": sorted(set(changed))}
        if request.map_index is not None:
            outcome["map_index"] = request.map_index
    elif command.kind == "mark":
        mark = parse_mark(str(command.body.get("task_id", "")), {"state": command.body.get("state")})
        raw_index = command.body.get("map_index")
        map_index = raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) else None
        if run.state == "cancelled":
            raise CommandRefused(f"run {run.run_id!r} was cancelled: clear its tasks to run them again")
        if mark.task_id not in states:
            raise CommandRefused(f"run {run.run_id!r} has no task {mark.task_id!r}")
        changed = []
        if await command_store.set_task_state(step.conn, run.run_pk, mark.task_id, mark.state,
                                              f"marked {mark.state} by {who}", step.now, step.term, map_index):
            changed = [mark.task_id]
            states[mark.task_id] = mark.state
            redecide = decided_downstream(mark.task_id, states, graph)
            await command_store.reset_task_instances(
                step.conn, run.run_pk, [(t, graph.tasks[t].retries) for t in redecide],
                f"marked {mark.state} upstream", step.now, step.term)
            step.transitions[mark.state] += 1
        outcome = {"tasks": changed, "marked": mark.state}
        if map_index is not None:
            outcome["map_index"] = map_index
    elif command.kind == "mark_run":
        state = parse_mark_run({"state": command.body.get("state")})
        changed = await command_store.mark_run(step.conn, run.run_pk, state, f"run marked {state} by {who}",
                                               step.now, step.term)
        step.kill_check = True
        step.finished.append(FinishedRun(run.run_pk, run.dag_id, run.run_id, state))
        return {"tasks": changed, "marked": state}
    else:
        raise CommandRefused(f"unknown command {command.kind!r}")
    if changed and graph.exit_tasks and not graph.exit_tasks.issuperset(changed):
        # The body runs again: its verdict is forgotten and its exit tasks run once more after it.
        await run_exits.reopen_body(step.conn, run.run_pk, sorted(graph.exit_tasks),
                                    f"cancelled: the run's tasks were {command.kind}ed by {who}", step.now, step.term)
    if changed:
        await command_store.reopen_run(step.conn, run.run_pk, step.now, step.term)
        await step.counted(await command_store.recount_pending(step.conn, run.run_pk, step.now))
        step.touch([run.run_pk])
        step.kill_check = True
    return outcome
