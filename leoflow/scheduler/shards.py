"""Splitting a tick's reports into shards: concurrent steps, one run in exactly one (ADR 0012).

A burst of reports whose fan-out reaches :data:`SHARD_MIN` rows is applied in :data:`STEP_SHARDS`
transactions side by side rather than one: the leader's Python and one PostgreSQL backend take
turns, so a second transaction keeps a second core busy. This module decides *how* a batch is
split — by run, balanced by fan-out rows, each part told how many slots the others keep — and is
pure (no I/O), so the split can be tested on its own; :meth:`SchedulerCore._split_tick
<leoflow.scheduler.core.SchedulerCore>` runs the parts and what follows them.

What it promises: no run is in two parts (two transactions never write one run's rows, so parts
cannot deadlock on them or race a run's completion); a try's reports stay in order in one part;
and a part never queues into slots another part may fill (:class:`ReservingLauncher`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from leoflow.db.stores.runs.lifecycle import StartableRun
from leoflow.db.stores.task_instances.queueing import QueuedTask, QueueRoom
from leoflow.model.spec.graph import DagGraph
from leoflow.model.tries import StatusUpdate
from leoflow.scheduler.fanout import Fanout
from leoflow.scheduler.queueing import Queuer
from leoflow.scheduler.step import Step

#: Concurrent steps a tick's reports are split into, by run, when their fan-out reaches
#: :data:`SHARD_MIN` rows (ADR 0012): the leader's Python and one PostgreSQL backend take turns,
#: so a second transaction keeps a second core busy. Three measured no better than two.
STEP_SHARDS = 2
#: Below this many rows of fan-out, a second transaction costs more than it saves.
SHARD_MIN = 256


class ReservingLauncher:
    """The queuer, for one part of a split tick: its room keeps ``reserved`` slots for the others."""

    def __init__(self, queuer: Queuer, reserved: int) -> None:
        self.queuer = queuer
        self.reserved = reserved

    def room(self) -> QueueRoom:
        return dataclasses.replace(self.queuer.room(), reserved=self.reserved)

    def launch(self, step: Step, graphs: Mapping[int, DagGraph], queued: Sequence[QueuedTask]) -> None:
        self.queuer.launch(step, graphs, queued)


class SplitPart(NamedTuple):
    """One part of a split tick: its reports, their fan-out rows, and at most how many tasks the
    write that counts them may queue (the slots the other parts keep for it)."""

    reports: list[StatusUpdate]
    rows: int
    queues: int


def split_by_run(batch: Sequence[StatusUpdate], fanouts: Sequence[Fanout], shards: int) -> list[SplitPart]:
    """``batch`` in up to ``shards`` parts, no run in two, balanced by fan-out rows.

    Reports keep their order within a part (a try's reports are all in one). A part's ``queues``
    counts each task of a run once, however many of its upstream report in the part: 98 successes
    that each may release a run's one join may queue that one join.
    """
    per_run: dict[tuple[str, str], int] = {}
    reach: dict[tuple[str, str], set[str]] = {}
    for u, f in zip(batch, fanouts, strict=True):
        run = (u.key.dag_id, u.key.run_id)
        per_run[run] = per_run.get(run, 0) + f.rows
        if f.queues:
            reach.setdefault(run, set()).update(f.queues)
    loads = [0] * shards
    home: dict[tuple[str, str], int] = {}
    for run, r in sorted(per_run.items(), key=lambda item: -item[1]):
        i = loads.index(min(loads))
        home[run] = i
        loads[i] += r
    parts: list[list[StatusUpdate]] = [[] for _ in range(shards)]
    for u in batch:
        parts[home[(u.key.dag_id, u.key.run_id)]].append(u)
    queues = [0] * shards
    for run, tasks in reach.items():
        queues[home[run]] += len(tasks)
    return [SplitPart(p, loads[i], queues[i]) for i, p in enumerate(parts) if p]


def split_starts(runs: Sequence[StartableRun], graphs: Mapping[int, DagGraph], shards: int) -> list[list[StartableRun]]:
    """``runs`` in up to ``shards`` parts, each run in one, balanced by the task instances starting
    them creates, oldest first within a part (a run whose version does not compile, which fails
    instead of starting, counts as one).

    No slots are reserved between the parts, unlike a split tick's: a part applies no report and
    picks no task for slots (``Queuer.queue(pick=False)``), so none of its writes queues a task;
    the step after the parts does (tests/scheduler/test_split_starts.py holds a pool to that).
    """
    loads = [0] * shards
    parts: list[list[StartableRun]] = [[] for _ in range(shards)]
    for run in runs:
        graph = graphs.get(run.version_id)
        i = loads.index(min(loads))
        parts[i].append(run)
        loads[i] += 1 if graph is None else len(graph.tasks)
    return [p for p in parts if p]


def picks_slots(graph: DagGraph) -> bool:
    """Whether starting a run of this version may leave a task for the pick of free slots (any task
    that is not ``empty``): a split start then ends with a whole step that picks."""
    return any(t.kind != "empty" for t in graph.tasks.values())
