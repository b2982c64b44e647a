"""``DAG`` and ``Task``: a DAG written in Python that *produces* the spec a YAML file would hold.

    with DAG("daily-partitions", schedule="0 3 * * *", params=Conf) as dag:
        listing = Task("list", image="ghcr.io/acme/tools:2.3", command=["list", dag.params.day],
                       outputs={"partitions": "array"})
        process = Task("process", image="ghcr.io/acme/etl:5.1", args=["--partition", item]
                       ).map(over=listing.outputs["partitions"], max_parallel=32)
        combine = Task("combine", image="ghcr.io/acme/etl:5.1", args=["combine"],
                       when="size(tasks.list.outputs.partitions) > 0")
        listing >> process >> combine

The server never imports this code (ADR 0014: no user code in the server); ``leoflow dags
render``/``sync`` run the file on the user's or the CI's machine and send the specs. What this
module promises:

- :meth:`DAG.to_spec` is the exact mapping the equivalent YAML decodes to (fields the author did
  not set are not written, so the server's defaults and hashes are those of the YAML file);
- the spec is judged by the server's own validator (:func:`leoflow.model.spec.dag.parse_dag_spec`),
  and every problem is reported as :class:`DagError`, located at the Python line that made the
  task (or the ``>>`` that made the edge) — not at a line of generated YAML the user never saw;
- reading ``task.outputs["k"]`` in another task adds the edge the language requires (an output
  is readable only downstream), unless that edge would close a cycle, which is an error;
- a task of one DAG never silently joins another (``>>`` or an output across DAGs is an error).

Mistakes the SDK can see at once (a duplicate id, an undeclared output, a task made outside a
``with DAG``, ``>>`` across DAGs) raise :class:`DagError` where they are made.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import date
from typing import TYPE_CHECKING, Any

from leoflow.errors import ValidationFailed
from leoflow.sdk.conf_schema import params_schema
from leoflow.sdk.located import DagError, Where, caller
from leoflow.sdk.pod import Output, Pod, Resources, RetryPolicy
from leoflow.sdk.refs import Outputs, ParamRefs, Ref, plain, refs_in, strings_in, tasks_read

if TYPE_CHECKING:
    from leoflow.model.spec.dag import DagSpec

_active: ContextVar[tuple[DAG, ...]] = ContextVar("leoflow_sdk_dags", default=())
#: Every DAG made in this process, in order: what ``leoflow dags render`` prints (a DAG made in a
#: loop or a function counts as well as one bound to a module global).
_made: list[DAG] = []


def made_dags() -> list[DAG]:
    return list(_made)


class DAG:
    """A DAG: a context manager in which :class:`Task` objects join it. Arguments are the spec's fields.

    ``defaults`` is a :class:`~leoflow.sdk.pod.Pod` every container task inherits; ``params`` a
    dataclass type (:mod:`leoflow.sdk.conf_schema`) or a JSON Schema mapping; ``extra`` any further
    spec field, written as given (a field this SDK does not know yet).
    """

    def __init__(self, dag_id: str, *, description: str | None = None, schedule: str | Mapping[str, Any] | None = None,
                 timezone: str | None = None, catchup: bool | None = None, start_date: str | date | None = None,
                 max_active_runs: int | None = None, paused: bool | None = None, default_retries: int | None = None,
                 defaults: Pod | None = None, params: object = None, run_timeout_seconds: float | None = None,
                 max_active_tasks: int | None = None, notify: Sequence[Mapping[str, Any]] | None = None,
                 team: str | None = None, extra: Mapping[str, Any] | None = None) -> None:
        self.dag_id = dag_id
        self.where = caller()
        if isinstance(start_date, date):  # a datetime is a date too
            start_date = start_date.isoformat()
        try:
            schema = params_schema(params)
        except ValidationFailed as problem:
            raise DagError(problem.path, problem.problem, self.where) from None
        self.params_schema = schema
        self._fields: dict[str, Any] = {
            k: v for k, v in (
                ("description", description), ("schedule", schedule), ("timezone", timezone), ("catchup", catchup),
                ("start_date", start_date), ("max_active_runs", max_active_runs), ("paused", paused),
                ("default_retries", default_retries), ("run_timeout_seconds", run_timeout_seconds),
                ("max_active_tasks", max_active_tasks), ("team", team),
                ("notify", None if notify is None else [dict(n) for n in notify]),
                ("params", schema), ("defaults", None if defaults is None else defaults.to_spec()),
            ) if v is not None}
        self._fields.update(extra or {})
        self.tasks: list[Task] = []
        self.exit_tasks: list[Task] = []
        self._exit_mode = False
        _made.append(self)

    # ----------------------------------------------------------------- building

    def __enter__(self) -> DAG:
        _active.set((*_active.get(), self))
        return self

    def __exit__(self, *exc: object) -> None:
        _active.set(_active.get()[:-1])

    @contextlib.contextmanager
    def exit_handlers(self) -> Iterator[DAG]:
        """Tasks made inside go to ``on_exit:`` (run once the rest of the run is final, whatever its outcome)."""
        self._exit_mode = True
        token = _active.set((*_active.get(), self))
        try:
            yield self
        finally:
            _active.reset(token)
            self._exit_mode = False

    @property
    def params(self) -> ParamRefs:
        """``dag.params.day`` / ``dag.params["day"]``: ``{{ params.day }}``, checked against the declaration."""
        return ParamRefs(self.params_schema)

    def _add(self, task: Task) -> None:
        for other in (*self.tasks, *self.exit_tasks):
            if other.id == task.id:
                raise DagError("id", f"duplicate task id {task.id!r} in DAG {self.dag_id!r} (also made at "
                               f"{other.where})", task.where)
        (self.exit_tasks if self._exit_mode else self.tasks).append(task)

    # ----------------------------------------------------------------- the spec

    def to_spec(self, *, validate: bool = True) -> dict[str, Any]:
        """The mapping the equivalent YAML decodes to; checked by the server's validator unless ``validate=False``."""
        spec, _ = self._build()
        if validate:
            self._validate(spec)
        return spec

    def to_yaml(self, *, validate: bool = True) -> str:
        from leoflow.model.files.yaml_loader import dump_yaml

        return dump_yaml(self.to_spec(validate=validate))

    def validate(self) -> DagSpec:
        """The spec parsed by the server's validator (cluster templates are not known here: the server checks those)."""
        spec, _ = self._build()
        return self._validate(spec)

    def _validate(self, spec: dict[str, Any]) -> DagSpec:
        from leoflow.model.spec.dag import parse_dag_spec

        try:
            return parse_dag_spec(spec)
        except ValidationFailed as problem:
            found = [p for p in (problem, *problem.also) if not _cluster_unknown(p)]
            if not found:
                return _stub(spec)
            _, edges = self._build()
            located = [DagError(p.path, p.problem, self._where_of(p.path, edges)) for p in found]
            raise DagError(located[0].path, located[0].problem, located[0].where, also=tuple(located[1:])) from None

    def _build(self) -> tuple[dict[str, Any], dict[str, list[Where]]]:
        """The spec, and for each ``tasks[i]``/``on_exit[i]`` where each of its ``depends_on`` was made."""
        spec: dict[str, Any] = {"dag_id": self.dag_id, **self._fields}
        edges: dict[str, list[Where]] = {}
        for key, tasks in (("tasks", self.tasks), ("on_exit", self.exit_tasks)):
            deps = _with_read_edges(self, tasks)
            if tasks or key == "tasks":
                spec[key] = [t.to_spec([d.id for d, _ in deps[t.id]]) for t in tasks]
            for i, t in enumerate(tasks):
                edges[f"{key}[{i}]"] = [w for _, w in deps[t.id]]
        return spec, edges

    def _where_of(self, path: str, edges: Mapping[str, list[Where]]) -> Where:
        match = re.match(r"(tasks|on_exit)\[(\d+)\](?:\.depends_on\[(\d+)\])?", path)
        if not match:
            return self.where
        tasks = self.tasks if match[1] == "tasks" else self.exit_tasks
        i = int(match[2])
        if i >= len(tasks):
            return self.where
        if match[3] is not None:
            made = edges.get(f"{match[1]}[{i}]", [])
            if int(match[3]) < len(made):
                return made[int(match[3])]
        return tasks[i].where

    def __repr__(self) -> str:
        return f"DAG({self.dag_id!r}, tasks={len(self.tasks)})"


def _cluster_unknown(problem: ValidationFailed) -> bool:
    """A ``uses: cluster/…`` the SDK cannot resolve: the server reads the cluster's templates."""
    return problem.path.endswith(".uses") and problem.problem.startswith("cluster template")


def _stub(spec: dict[str, Any]) -> DagSpec:
    from leoflow.model.spec.dag import DagSpec

    return DagSpec(dag_id=spec["dag_id"], tasks=())


def _with_read_edges(dag: DAG, tasks: list[Task]) -> dict[str, list[tuple[Task, Where]]]:
    """Each task's upstreams: the ``>>`` edges, then one per task whose outputs it reads and is not yet
    an ancestor of (the language reads only ancestors' outputs), made where the reading task was."""
    by_id = {t.id: t for t in tasks}
    deps: dict[str, list[tuple[Task, Where]]] = {t.id: list(t.upstream.values()) for t in tasks}

    def ancestors(task_id: str) -> set[str]:
        seen: set[str] = set()
        stack = [task_id]
        while stack:
            for up, _ in deps.get(stack.pop(), ()):
                if up.id not in seen:
                    seen.add(up.id)
                    stack.append(up.id)
        return seen

    for task in tasks:
        for ref in task.refs():
            if ref.task is not None and ref.task.dag is not dag:
                raise DagError("", f"task {task.id!r} reads outputs of task {ref.task.id!r} of DAG "
                               f"{ref.task.dag.dag_id!r}; a task reads only its own DAG's outputs", task.where)
        for read in task.tasks_read():
            if read == task.id or read not in by_id or read in ancestors(task.id):
                continue  # itself or unknown: the validator names it; an ancestor: nothing to add
            if task.id in ancestors(read):
                raise DagError("", f"task {task.id!r} reads outputs of {read!r}, which runs after it ({read!r} "
                               f"depends on {task.id!r}); an output is readable only downstream of its task",
                               task.where)
            deps[task.id].append((by_id[read], task.where))
    return deps


class Task:
    """A task; ``kind="empty"`` (or :func:`Empty`) for one that only joins branches.

    Strings in ``command``, ``args``, ``env``, ``inputs`` may be :class:`~leoflow.sdk.refs.Ref`
    objects (``dag.params.day``, ``other.outputs["k"]``, ``item``) or text holding ``{{ … }}``.
    """

    def __init__(self, id: str, *, image: str | None = None, command: Sequence[str | Ref] | None = None,
                 args: Sequence[str | Ref] | None = None, env: Mapping[str, str | Ref] | None = None,
                 kind: str | None = None, retries: int | None = None, retry_delay_seconds: float | None = None,
                 max_retry_delay_seconds: float | None = None, timeout_seconds: float | None = None,
                 resources: Resources | Mapping[str, Any] | None = None, trigger_rule: str | None = None,
                 pool: str | None = None, priority: int | None = None,
                 outputs: Mapping[str, str | Output | Mapping[str, Any]] | None = None, when: str | None = None,
                 skip_on_exit_code: Sequence[int] | None = None,
                 retry_policy: RetryPolicy | Mapping[str, Any] | None = None, produces: Sequence[str] | None = None,
                 pod: Pod | None = None, uses: str | None = None, inputs: Mapping[str, Any] | None = None,
                 upstream: Sequence[Task] = (), dag: DAG | None = None, extra: Mapping[str, Any] | None = None) -> None:
        self.id = id
        self.where = caller()
        active = _active.get()
        owner = dag if dag is not None else (active[-1] if active else None)
        if owner is None:
            raise DagError("", f"task {id!r} was made outside a DAG: make it inside `with DAG(...):` or pass dag=",
                           self.where)
        self.dag: DAG = owner
        pod_fields = pod.to_spec() if pod is not None else {}
        if env is not None and "env" in pod_fields:
            raise DagError("", f"task {id!r} sets env twice (env= and pod=Pod(env=...)): use one", self.where)
        self._fields: dict[str, Any] = {k: v for k, v in (
            ("kind", kind), ("uses", uses), ("inputs", None if inputs is None else dict(inputs)), ("image", image),
            ("command", None if command is None else list(command)), ("args", None if args is None else list(args)),
            ("env", None if env is None else dict(env)),
            ("resources", resources.to_spec() if isinstance(resources, Resources) else resources),
        ) if v is not None}
        self.outputs = Outputs(self, outputs or {})
        self._after: dict[str, Any] = {k: v for k, v in (
            ("when", when), ("trigger_rule", trigger_rule), ("retries", retries),
            ("retry_delay_seconds", retry_delay_seconds), ("max_retry_delay_seconds", max_retry_delay_seconds),
            ("timeout_seconds", timeout_seconds), ("pool", pool), ("priority", priority),
            ("skip_on_exit_code", None if skip_on_exit_code is None else list(skip_on_exit_code)),
            ("retry_policy", retry_policy.to_spec() if isinstance(retry_policy, RetryPolicy) else retry_policy),
            ("produces", None if produces is None else list(produces)),
        ) if v is not None}
        self._after.update(pod_fields)
        self._after.update(extra or {})
        self._map: dict[str, Any] = {}
        #: Upstream tasks by id, each with the line that made the edge.
        self.upstream: dict[str, tuple[Task, Where]] = {}
        owner._add(self)
        for up in upstream:
            self._link_from(up, self.where)

    # ----------------------------------------------------------------- the graph

    def _link_from(self, up: Task, where: Where) -> None:
        if not isinstance(up, Task):
            raise DagError("", f"{up!r} is not a task: only tasks can be upstream of {self.id!r}", where)
        if up.dag is not self.dag:
            raise DagError("", f"task {self.id!r} of DAG {self.dag.dag_id!r} cannot depend on task {up.id!r} of DAG "
                           f"{up.dag.dag_id!r}: an edge joins tasks of one DAG", where)
        self.upstream.setdefault(up.id, (up, where))

    def __rshift__(self, other: Upstream) -> Upstream:
        where = caller()
        for down in _tasks(other, where):
            down._link_from(self, where)
        return other

    def __lshift__(self, other: Upstream) -> Upstream:
        where = caller()
        for up in _tasks(other, where):
            self._link_from(up, where)
        return other

    def __rrshift__(self, other: Sequence[Task]) -> Task:
        where = caller()
        for up in _tasks(other, where):
            self._link_from(up, where)
        return self

    def __rlshift__(self, other: Sequence[Task]) -> Task:
        where = caller()
        for down in _tasks(other, where):
            down._link_from(self, where)
        return self

    def map(self, over: Ref | str | Sequence[Any] | None = None, *, count: int | Ref | str | None = None,
            max_parallel: int | None = None) -> Task:
        """One instance per item of ``over`` (a list, or a reference to one), or ``count`` instances."""
        if (over is None) == (count is None):
            raise DagError("map_over", f"task {self.id!r}: give exactly one of over= and count=", caller())
        self._map = {"map_over": {"count": count} if count is not None else over}
        if max_parallel is not None:
            self._map["max_parallel"] = max_parallel
        return self

    # ----------------------------------------------------------------- references

    def _all_values(self) -> list[Any]:
        return [*self._fields.values(), *self._map.values(), *self._after.values()]

    def refs(self) -> list[Ref]:
        return refs_in(self._all_values())

    def tasks_read(self) -> list[str]:
        """Ids of the tasks whose outputs this task reads (references and ``when:`` alike)."""
        found: dict[str, None] = {}
        for ref in self.refs():
            if ref.task is not None:
                found[ref.task.id] = None
        for text in strings_in(self._all_values()):
            for task_id in tasks_read(text):
                found[task_id] = None
        return list(found)

    def to_spec(self, depends_on: Sequence[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, **plain(self._fields)}
        if self.outputs.declared:
            out["outputs"] = self.outputs.to_spec()
        if depends_on:
            out["depends_on"] = list(depends_on)
        out.update(plain(self._map))
        out.update(plain(self._after))
        return out

    def __repr__(self) -> str:
        return f"Task({self.id!r})"


Upstream = Task | Sequence[Task]


def _tasks(value: object, where: Where) -> list[Task]:
    items = list(value) if isinstance(value, list | tuple) else [value]
    for item in items:
        if not isinstance(item, Task):
            raise DagError("", f"{item!r} is not a task: >> and << join tasks and lists of tasks", where)
    return items  # type: ignore[return-value]


def Empty(id: str, **kwargs: Any) -> Task:
    """A task that only joins branches (``kind: empty``): marked success when its upstreams allow."""
    return Task(id, kind="empty", **kwargs)
