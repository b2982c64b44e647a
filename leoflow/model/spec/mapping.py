"""``map_over:`` — one task, one instance per item of a list known only when it runs (ADR 0014, decision 3).

The commonest pipeline is *list the partitions, process each in its own pod, combine the results*
(Airflow's ``.expand()``, Argo's ``withItems``/``withParam``). A task says what to map over::

    map_over: [a, b, c]                                # a literal list
    map_over: "{{ params.days }}"                      # a parameter that is a list
    map_over: "{{ tasks.list.outputs.partitions }}"    # an upstream output that is a list
    map_over: {count: 100}                             # items 0..99 (or count: "{{ ref }}")
    max_parallel: 32                                   # instances queued or running at once

and reads its item as ``{{ item }}`` (``{{ item.K }}`` for a list of objects) and its index as
``{{ map_index }}`` in ``command``, ``args`` and ``env`` (:mod:`leoflow.model.spec.templating`).

**When and how many.** The source is resolved once, by the leader, when the task is ready (its
trigger rule says run, its ``when`` holds): the one fenced transaction that resolves it turns the
task's row into instance 0 and inserts instances 1..N-1 (:mod:`leoflow.db.stores.task_instances.mapping`).
What a source can resolve to is checked here, at apply, as far as the spec says: the reference
names a declared parameter or an upstream's declared output (an ancestor of the task), a literal
list holds at most :data:`~leoflow.model.limits.MAP_ITEMS` items. At run time a value that is
not a list (``map_over: expected a list, got object``) or has more items than the limit fails
the task with that reason and inserts nothing; an empty list skips it (``map_over is empty``), and
trigger rules decide what follows, as for any skipped task.

**Chained maps are element-wise.** Mapping over the output of a *mapped* upstream reads the list
of its instances' values in index order (``null`` where an instance did not succeed): one
instance per upstream instance, and an instance whose upstream instance failed or was skipped is
created ended (``upstream_failed`` / ``skipped``, the reason naming ``process[i]``) rather than run
with a ``null``.

**The item at launch** is the same function of the same stored facts (the spec, the run's conf,
the upstream's stored outputs), evaluated again for each try by :func:`item_at`, so a retry or a
new leader after a failover renders the very same argv; nothing per instance is stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_size, type_name, within
from leoflow.model.spec.templating import Ancestors, Reference, parse_template, reference_problem

#: Reasons a mapped task ends with at expansion (the API and the docs quote them).
EMPTY = "map_over is empty"


class MapFailed(Exception):
    """The source did not resolve to a usable list: the task fails with this message."""


@dataclass(frozen=True)
class MapSource:
    """What a task maps over, as parsed at apply."""

    kind: Literal["items", "reference", "count"]
    #: A literal list (``items``).
    items: tuple[Any, ...] = ()
    #: ``{{ params.P… }}`` or ``{{ tasks.T.outputs.K… }}`` (``reference``, or a ``count`` read at run time).
    reference: Reference | None = None
    #: A literal ``count:`` (None when it is a reference).
    count: int | None = None
    #: As written, for the canonical spec.
    written: Any = field(default=None, compare=False)

    @property
    def upstream(self) -> str | None:
        """The upstream task whose outputs the source reads, if any."""
        return self.reference.task if self.reference is not None and self.reference.kind == "tasks" else None

    def canonical(self) -> Any:
        return self.written


def parse_map_over(value: object, path: str) -> MapSource:
    """``map_over`` as written: a list, one ``{{ reference }}``, or ``{count: N | "{{ reference }}"}``."""
    if isinstance(value, list):
        if len(value) > limits.MAP_ITEMS.maximum:
            raise ValidationFailed(path, f"has {len(value):,} items; at most {limits.MAP_ITEMS.maximum:,} "
                                   "(one task instance each)")
        check_size(value, path, limits.MAP_SOURCE)
        return MapSource("items", items=tuple(value), written=list(value))
    if isinstance(value, str):
        return MapSource("reference", reference=_one_reference(value, path), written=value)
    if isinstance(value, dict):
        if set(value) != {"count"}:
            extra = sorted(str(k) for k in value if k != "count")
            raise ValidationFailed(path, f"an object here is {{count: N}}; unknown key {extra[0]!r}" if extra
                                   else "an object here is {count: N}")
        count = value["count"]
        if isinstance(count, str):
            return MapSource("count", reference=_one_reference(count, f"{path}.count"), written={"count": count})
        number = int(within(count, f"{path}.count", _COUNT_RANGE))
        return MapSource("count", count=number, written={"count": number})
    raise ValidationFailed(path, "must be a list, a reference like \"{{ tasks.T.outputs.K }}\" or "
                           f"\"{{{{ params.P }}}}\", or {{count: N}}; got {type_name(value)}")


_COUNT_RANGE = limits.Range("`tasks[].map_over.count`", 0, limits.MAP_ITEMS.maximum,
                            limits.MAP_ITEMS.why, integer=True)


def _one_reference(text: str, path: str) -> Reference:
    template = parse_template(text, path)
    if template is None or len(template.pieces) != 1 or not isinstance(template.pieces[0], Reference):
        raise ValidationFailed(path, "must be exactly one reference, like \"{{ tasks.T.outputs.K }}\" or "
                               "\"{{ params.P }}\" (no text around it)")
    ref = template.pieces[0]
    if ref.kind not in ("params", "tasks"):
        raise ValidationFailed(path, f"{ref.text}: a task maps over a parameter or an upstream task's output")
    return ref


def parse_max_parallel(value: object, path: str) -> int | None:
    return None if value is None else int(within(value, path, limits.MAX_PARALLEL))


# --------------------------------------------------------------------------- run time

@dataclass(frozen=True, slots=True)
class Instance:
    """One instance of a mapped upstream as a reader sees it."""

    state: str
    outputs: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class SourceFacts:
    """What a source reads, for one run: the run's conf and the named upstream's outputs.

    ``instances`` is set when the upstream is itself mapped (its instances in index order);
    ``upstream_state``/``upstream_outputs`` when it is not.
    """

    params: Mapping[str, Any]
    upstream_state: str | None = None
    upstream_outputs: Mapping[str, Any] | None = None
    instances: Sequence[Instance] | None = None


@dataclass(frozen=True, slots=True)
class Items:
    """A resolved source: the items, and (chained maps) the indexes that end unrun, with how."""

    values: list[Any]
    ended: dict[int, tuple[str, str]] = field(default_factory=dict)


def resolve(source: MapSource, facts: SourceFacts, task_id: str) -> Items:
    """The items ``source`` stands for in this run; raises MapFailed (the task fails with it)."""
    if source.kind == "items":
        return Items(list(source.items))
    if source.count is not None:
        return Items(list(range(source.count)))
    assert source.reference is not None
    ended: dict[int, tuple[str, str]] = {}
    value = _referenced(source.reference, facts, ended)
    if source.kind == "count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise MapFailed(f"map_over.count: {source.reference.text} must be a whole number from 0, got "
                            f"{_shown(value)}")
        if value > limits.MAP_ITEMS.maximum:
            raise MapFailed(f"map_over.count is {value:,}; at most {limits.MAP_ITEMS.maximum:,}")
        return Items(list(range(value)))
    if not isinstance(value, list):
        raise MapFailed(f"map_over: {source.reference.text} must be a list, got {_shown(value)}")
    if len(value) > limits.MAP_ITEMS.maximum:
        raise MapFailed(f"map_over has {len(value):,} items; at most {limits.MAP_ITEMS.maximum:,}")
    return Items(value, ended)


def _referenced(ref: Reference, facts: SourceFacts, ended: dict[int, tuple[str, str]]) -> Any:
    if ref.kind == "params":
        if ref.name not in facts.params:
            raise MapFailed(f"map_over: the run's conf has no parameter {ref.name!r}")
        return _walk(facts.params[ref.name], ref.path, f"params.{ref.name}")
    if facts.instances is not None:  # a mapped upstream: element-wise
        values: list[Any] = []
        for i, inst in enumerate(facts.instances):
            if inst.state != "success" or inst.outputs is None or ref.name not in inst.outputs:
                how = "skipped" if inst.state == "skipped" else "upstream_failed"
                ended[i] = (how, f"{ref.task}[{i}] {_ENDED.get(inst.state, 'is ' + inst.state)}")
                values.append(None)
                continue
            values.append(_walk(inst.outputs[ref.name], ref.path, f"tasks.{ref.task}[{i}].outputs.{ref.name}"))
        return values
    if facts.upstream_state != "success":
        raise MapFailed(f"map_over: task {ref.task!r} "
                        f"{_ENDED.get(facts.upstream_state or '', 'has not succeeded')}")
    outputs = facts.upstream_outputs or {}
    if ref.name not in outputs:
        raise MapFailed(f"map_over: task {ref.task!r} has no output {ref.name!r}")
    return _walk(outputs[ref.name], ref.path, f"tasks.{ref.task}.outputs.{ref.name}")


_ENDED = {"skipped": "was skipped", "failed": "failed", "upstream_failed": "did not run (upstream_failed)",
          "cancelled": "was cancelled", "success": "has no such output"}


def _walk(value: Any, path: Sequence[str | int], label: str) -> Any:
    for segment in path:
        if isinstance(segment, int):
            if not isinstance(value, list) or segment >= len(value):
                raise MapFailed(f"map_over: {label} has no [{segment}]")
            value, label = value[segment], f"{label}[{segment}]"
        else:
            if not isinstance(value, dict) or segment not in value:
                raise MapFailed(f"map_over: {label} has no key {segment!r}")
            value, label = value[segment], f"{label}.{segment}"
    return value


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return "null" if value is None else type_name(value)


def item_at(source: MapSource, facts: SourceFacts, task_id: str, index: int) -> Any:
    """Instance ``index``'s item (for ``{{ item }}``); raises MapFailed when the source changed under it."""
    items = resolve(source, facts, task_id).values
    if index >= len(items):
        raise MapFailed(f"map_over has {len(items):,} items now, no [{index}]: clear the task to expand it again")
    return items[index]


# --------------------------------------------------------------------------- apply-time checks

def check_map_sources(tasks: Sequence[Any], params: Mapping[str, Any] | None, *, where: str = "tasks") -> None:
    """Each ``map_over`` reference names a declared parameter or a declared output of an ancestor."""
    mapped = [(i, t) for i, t in enumerate(tasks) if t.map_over is not None and t.map_over.reference is not None]
    if not mapped:
        return
    declared = params.get("properties") if isinstance(params, Mapping) else None
    ancestors = Ancestors(tasks)
    outputs = {t.id: t.outputs for t in tasks}
    problems: list[ValidationFailed] = []
    for i, task in mapped:
        ref = task.map_over.reference
        path = f"{where}[{i}].map_over" + (".count" if task.map_over.kind == "count" else "")
        problem = reference_problem(task.id, ref, declared, ancestors, outputs)
        if problem is not None:
            problems.append(ValidationFailed(path, f"{ref.text}: {problem}"))
    if problems:
        raise ValidationFailed(problems[0].path, problems[0].problem, also=tuple(problems[1:]))
