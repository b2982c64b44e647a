"""A DAG version compiled for the scheduler's hot path, and a bounded cache of them.

The scheduler never re-joins the DAG in SQL: when a task succeeds it needs the task's direct
downstream ids (to decrement their ``pending_upstreams``), when it fails for good all its
descendants (to mark them ``upstream_failed``), and whether it is a leaf (a leaf reaching a
final state may finish the run). :class:`DagGraph` precomputes those from an immutable
``dag_versions`` row; :class:`GraphCache` keeps the most recently used ones (versions are
immutable, so a cached graph is never stale) and is bounded so memory stays flat however many
versions exist.

The cache only saves compiling a version again. Whoever needs graphs holds references to the
ones it got, so a batch that touches more versions than the cache holds (issue 16: 300 versions
in one batch of 500 against a cache of 256) is correct, merely compiling some twice.
"""

from __future__ import annotations

from collections import OrderedDict

from leoflow.model.spec import DagSpec, TaskSpec, parse_dag_spec

#: Cached versions. A version's graph is a few KB per 100 tasks; 256 keeps it well under 100 MB
#: even for maximal 10,000-task DAGs while covering every active version in practice.
DEFAULT_CACHE_SIZE = 256


class DagGraph:
    """Downstream/descendant/leaf lookups for one immutable DAG version."""

    def __init__(self, version_id: int, spec: DagSpec) -> None:
        self.version_id = version_id
        self.spec = spec
        self.tasks: dict[str, TaskSpec] = {t.id: t for t in spec.tasks}
        downstream: dict[str, list[str]] = {t.id: [] for t in spec.tasks}
        for task in spec.tasks:
            for dep in task.depends_on:
                downstream[dep].append(task.id)
        self.downstream: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in downstream.items()}
        self.leaves = frozenset(k for k, v in self.downstream.items() if not v)
        self._descendants: dict[str, tuple[str, ...]] = {}

    def task(self, task_id: str) -> TaskSpec | None:
        return self.tasks.get(task_id)

    def descendants(self, task_id: str) -> tuple[str, ...]:
        """Every task reachable downstream of ``task_id`` (not including it)."""
        cached = self._descendants.get(task_id)
        if cached is None:
            seen: dict[str, None] = {}
            stack = list(self.downstream.get(task_id, ()))
            while stack:
                node = stack.pop()
                if node not in seen:
                    seen[node] = None
                    stack.extend(self.downstream[node])
            cached = self._descendants[task_id] = tuple(seen)
        return cached


class GraphCache:
    """LRU of :class:`DagGraph` by ``dag_versions.id``."""

    def __init__(self, size: int = DEFAULT_CACHE_SIZE) -> None:
        self.size = size
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
        graph = DagGraph(version_id, parse_dag_spec(spec))
        self._graphs[version_id] = graph
        while len(self._graphs) > self.size:
            self._graphs.popitem(last=False)
        return graph
