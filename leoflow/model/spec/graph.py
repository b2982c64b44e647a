"""A DAG version compiled for the scheduler's hot path, and a bounded cache of them.

The scheduler never re-joins the DAG in SQL: when a task ends it needs the task's direct
downstream ids (to count the outcome against their trigger rules), and when it fails for good
the descendants that fail with it at once (:meth:`DagGraph.doomed_by`: every descendant reached
through tasks whose rule needs success — all of them, for a DAG of default rules — marked
``upstream_failed`` in one statement). :class:`DagGraph` precomputes those from an immutable
``dag_versions`` row; :class:`GraphCache` keeps the most recently used ones (versions are
immutable, so a cached graph is never stale) and is bounded so memory stays flat however many
versions exist.

Descendants for an operator's clear or mark (:meth:`DagGraph.descendants_of`) are found in one
pass over the adjacency list, from all the chosen tasks at once, and never cached per task: a
clear with ``downstream`` of every task of a 10,000-task chain once asked each task for its own
descendants, 50 million steps and a cache of 50 million entries kept afterwards (7.9 s of the
leader's CPU and +382 MB, issue 44); one pass visits each task and edge at most once.

The cache only saves compiling a version again. Whoever needs graphs holds references to the
ones it got, so a batch that touches more versions than the cache holds (issue 16: 300 versions
in one batch of 500 against a cache of 256) is correct, merely compiling some twice. The cache
is bounded by versions and by their tasks together, so 10,000 small DAGs due at one boundary
stay compiled from one boundary to the next (issue 45), while large ones are evicted no sooner
than before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from leoflow.model.spec.dag import DagSpec, TaskSpec, parse_dag_spec
from leoflow.model.spec.trigger_rules import FAIL_FAST, RUN_WHEN_ALL_SUCCEED

#: Cached versions at most. Bounded by versions alone (it was 256), a cluster with more DAGs
#: than that due at one boundary compiled every version again at every boundary: 1,000 DAGs on
#: ``* * * * *`` spent 2.5 s of the leader's CPU a minute re-validating specs (issue 45). A
#: one-task version's graph measures 2.7 KB here, so 32,768 of them take about 90 MB.
DEFAULT_CACHE_SIZE = 32_768
#: Tasks the cached graphs may hold together (a version weighs its tasks plus one): what 256
#: maximal 10,000-task versions held when the cache was bounded by versions alone, so large DAGs
#: are evicted no sooner than before and the worst case does not grow.
DEFAULT_CACHE_TASKS = 256 * 10_001


class DagGraph:
    """Downstream/descendant/leaf lookups for one immutable DAG version."""

    def __init__(self, version_id: int, spec: DagSpec) -> None:
        self.version_id = version_id
        self.spec = spec
        # The exit tasks (``on_exit``) are tasks like the others once their rows exist; they depend
        # on each other only, so the body's edges and leaves are what they were without them.
        every = (*spec.tasks, *spec.on_exit)
        self.tasks: dict[str, TaskSpec] = {t.id: t for t in every}
        downstream: dict[str, list[str]] = {t.id: [] for t in every}
        for task in every:
            for dep in task.depends_on:
                downstream[dep].append(task.id)
        self.downstream: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in downstream.items()}
        self.exit_tasks = frozenset(t.id for t in spec.on_exit)
        self.leaves = frozenset(k for k, v in self.downstream.items() if not v and k not in self.exit_tasks)
        #: Container tasks that run as soon as every upstream has succeeded: counting their last
        #: upstream's success may queue them in the same write (the scheduler's one-write path).
        #: Not those with a ``when``: it is decided in Python first (leoflow.scheduler.conditions); nor
        #: mapped ones: they expand first (leoflow.scheduler.mapping); nor those that wait
        #: (``wait_for``, ``depends_on_past``: leoflow.scheduler.waits).
        self.queued_on_success = frozenset(t.id for t in every if t.kind != "empty" and t.when is None
                                           and t.map_over is None and t.trigger_rule in RUN_WHEN_ALL_SUCCEED
                                           and not t.waits)
        #: Tasks with ``wait_for`` or ``depends_on_past``: held in ``waiting`` before they run.
        self.waiting_tasks = frozenset(t.id for t in every if t.waits)
        self._doomed: dict[str, frozenset[str]] = {}
        self._failure_rows: dict[str, int] = {}
        self._queued_by_success: dict[str, frozenset[str]] = {}

    def task(self, task_id: str) -> TaskSpec | None:
        return self.tasks.get(task_id)

    def descendants_of(self, task_ids: Iterable[str]) -> set[str]:
        """Every task reachable downstream of any of ``task_ids`` (a start is included only when it is
        downstream of another start; unknown ids reach nothing).

        One traversal from all the starts together, in time linear in the tasks and edges it
        reaches, whatever their number; nothing is kept afterwards (see the module docstring).
        """
        seen: set[str] = set()
        stack = [d for t in task_ids for d in self.downstream.get(t, ())]
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(d for d in self.downstream[node] if d not in seen)
        return seen

    def queued_by_success(self, task_id: str) -> frozenset[str]:
        """The direct downstream of ``task_id`` that the write counting its success may queue
        (:attr:`queued_on_success`): the only tasks a report of its success can queue in that write."""
        cached = self._queued_by_success.get(task_id)
        if cached is None:
            cached = self._queued_by_success[task_id] = self.queued_on_success.intersection(
                self.downstream.get(task_id, ()))
        return cached

    def outcome_rows(self, task_id: str, *, failed: bool) -> int:
        """At most how many task instance rows the end of ``task_id`` makes a step count or mark.

        A success is counted on each direct downstream. A final failure marks its doomed closure
        (:meth:`doomed_by`) and counts the edges leaving it, bounded here by every edge out of the
        task and the closure. The scheduler budgets its steps with this (a wide fan-out must not
        make one step hold millions of rows), so an upper bound is what it needs; trigger rules
        that cascade further (``skipped`` chains) are decided level by level within the DAG's size.
        """
        if not failed:
            return len(self.downstream.get(task_id, ()))
        rows = self._failure_rows.get(task_id)
        if rows is None:
            closure = self.doomed_by(task_id)
            rows = len(closure) + len(self.downstream.get(task_id, ())) + sum(len(self.downstream[d]) for d in closure)
            self._failure_rows[task_id] = rows
        return rows

    def doomed_by(self, task_id: str) -> frozenset[str]:
        """The descendants that become ``upstream_failed`` as soon as ``task_id`` fails.

        Reached from ``task_id`` through tasks whose trigger rule fails at the first failed
        upstream (:data:`~leoflow.model.spec.trigger_rules.FAIL_FAST`); the others (``all_done``,
        ``one_failed``, ...) decide from their counters instead.
        """
        cached = self._doomed.get(task_id)
        if cached is None:
            seen: set[str] = set()
            stack = [d for d in self.downstream.get(task_id, ()) if self.tasks[d].trigger_rule in FAIL_FAST]
            while stack:
                node = stack.pop()
                if node not in seen:
                    seen.add(node)
                    stack.extend(d for d in self.downstream[node] if self.tasks[d].trigger_rule in FAIL_FAST)
            cached = self._doomed[task_id] = frozenset(seen)
        return cached


class GraphCache:
    """LRU of :class:`DagGraph` by ``dag_versions.id``, bounded in versions and in their tasks.

    Many small versions (thousands of DAGs sharing a schedule) and a few huge ones (10,000-task
    DAGs) both fit: the least recently used go once either bound is passed; the newest stays
    even alone over the task bound (its caller holds it anyway).
    """

    def __init__(self, size: int = DEFAULT_CACHE_SIZE, tasks: int = DEFAULT_CACHE_TASKS) -> None:
        self.size = size
        self.max_tasks = tasks
        self.tasks = 0
        self._graphs: OrderedDict[int, DagGraph] = OrderedDict()

    def __contains__(self, version_id: int) -> bool:
        return version_id in self._graphs

    def __len__(self) -> int:
        return len(self._graphs)

    def lookup(self, version_id: int) -> DagGraph | None:
        """The cached graph of ``version_id`` (now the most recently used), or None."""
        graph = self._graphs.get(version_id)
        if graph is not None:
            self._graphs.move_to_end(version_id)
        return graph

    def add(self, version_id: int, spec: object) -> DagGraph:
        """Compile ``spec`` (raises ValidationFailed if it is not a valid spec) and cache the graph."""
        graph = DagGraph(version_id, parse_dag_spec(spec, stored=True))
        replaced = self._graphs.pop(version_id, None)
        if replaced is not None:
            self.tasks -= _weight(replaced)
        self._graphs[version_id] = graph
        self.tasks += _weight(graph)
        while len(self._graphs) > 1 and (len(self._graphs) > self.size or self.tasks > self.max_tasks):
            self.tasks -= _weight(self._graphs.popitem(last=False)[1])
        return graph


def _weight(graph: DagGraph) -> int:
    return len(graph.tasks) + 1
