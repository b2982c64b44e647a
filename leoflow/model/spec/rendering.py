"""Rendering a task's templates at launch: one reference, one string, never scanned again.

The leader renders a try's ``command``, ``args``, ``env`` and pod-template strings once, when it
launches the try (:func:`render_task`), from what :mod:`leoflow.model.spec.templating` parsed and
checked at apply: a pure function of the spec, the run's conf, id and logical date, and the
referenced tries' stored outputs, so a failover renders the same argv. One reference becomes one
string — itself if a string, else compact sorted-key JSON (``null``, ``42``, ``["a","b"]``) —
inside one argv element or env value; the pieces are concatenated and **never parsed again**. What
cannot be resolved raises :class:`~leoflow.model.spec.templating.TemplateUnresolved`, which fails
that try with its message, never the scheduler.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_size
from leoflow.model.spec.templating import (
    _ENDED,
    Reference,
    Segment,
    TaskTemplates,
    Template,
    TemplateUnresolved,
)


@dataclass(frozen=True, slots=True)
class Upstream:
    """An upstream task instance as a launch sees it: its state, and its outputs when ``success``."""

    state: str
    outputs: Mapping[str, Any] | None = None
    #: A mapped upstream's instances in index order, (state, outputs): ``{{ tasks.T.outputs.K }}``
    #: is then the list of their values of K (None where one did not succeed; [] for none).
    instances: Sequence[tuple[str, Mapping[str, Any] | None]] | None = None


@dataclass(frozen=True)
class RunFacts:
    """What references read, for one try: the run's conf, id and logical date, the upstreams' outputs."""

    params: Mapping[str, Any]
    run_id: str
    #: ISO 8601 in UTC, as ``LEOFLOW_LOGICAL_DATE`` carries it.
    logical_date: str
    upstream: Mapping[str, Upstream]
    #: A mapped instance's index and item (``{{ map_index }}``, ``{{ item }}``); None: not mapped.
    map_index: int | None = None
    item: Any = None
    #: ``{{ run.triggering_events }}``: compact JSON, as LEOFLOW_TRIGGERING_EVENTS carries it; ``[]``
    #: for a run datasets did not trigger.
    triggering_events: str = "[]"
    #: What the run's other tasks decided (``success`` / ``failed``) and why: set for exit tasks only.
    run_state: str | None = None
    run_reason: str | None = None
    #: The run's failed tasks (``T[i]`` for a mapped task's instance), for exit tasks that read them.
    failed_tasks: Sequence[str] = ()
    #: ``{{ run.data_interval_start }}`` / ``_end``: as LEOFLOW_DATA_INTERVAL_START/END carry them ("":
    #: the logical date).
    data_interval_start: str = ""
    data_interval_end: str = ""


@dataclass(frozen=True)
class Rendered:
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str]
    pod_template: Mapping[str, Any]


def as_text(value: object) -> str:
    """One value as one string: itself if a string, else compact sorted-key JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)


def render(template: Template, facts: RunFacts, where: str) -> str:
    """The string ``template`` stands for; values are inserted as text and never looked at again."""
    out: list[str] = []
    for piece in template.pieces:
        out.append(piece if isinstance(piece, str) else as_text(_value(piece, facts, where)))
    text = "".join(out)
    # UTF-8 takes at most 4 bytes a character: only a long string needs encoding to be measured.
    size = len(text.encode("utf-8", "surrogatepass")) if 4 * len(text) > limits.RENDERED_ARG.maximum else 0
    if size > limits.RENDERED_ARG.maximum:
        raise TemplateUnresolved(f"{where}: rendered to {size:,} bytes; an argv element or env value is at most "
                                 f"{limits.RENDERED_ARG.maximum:,} bytes (the kernel's MAX_ARG_STRLEN): "
                                 "pass a URI to the data instead")
    return text


def _value(ref: Reference, facts: RunFacts, where: str) -> Any:
    def fail(problem: str) -> TemplateUnresolved:
        return TemplateUnresolved(f"{where}: {ref.text}: {problem}")

    if ref.kind == "run":
        if ref.name == "triggering_events":
            return facts.triggering_events
        if ref.name == "data_interval_start":
            return facts.data_interval_start or facts.logical_date
        if ref.name == "data_interval_end":
            return facts.data_interval_end or facts.logical_date
        if ref.name in ("state", "reason", "failed_tasks"):
            if facts.run_state is None:
                raise fail(f"the run has not decided yet: run.{ref.name} is for exit tasks (on_exit)")
            if ref.name == "failed_tasks":
                return list(facts.failed_tasks)
            return facts.run_state if ref.name == "state" else facts.run_reason or ""
        return facts.run_id if ref.name == "id" else facts.logical_date
    if ref.kind in ("item", "map_index") and facts.map_index is None:
        raise fail("the task is not mapped (it has no map_over)")
    if ref.kind == "map_index":
        return facts.map_index
    if ref.kind == "item":
        value, label = facts.item, "item"
    elif ref.kind == "params":
        if ref.name not in facts.params:
            raise fail(f"the run's conf has no parameter {ref.name!r}")
        value, label = facts.params[ref.name], f"params.{ref.name}"
    else:
        upstream = facts.upstream.get(ref.task)
        if upstream is None:
            raise fail(f"task {ref.task!r} has no task instance in this run")
        if upstream.instances is not None:  # mapped: the list of its instances' values, in index order
            value = [out.get(ref.name) if out is not None and state == "success" else None
                     for state, out in upstream.instances]
            label = f"tasks.{ref.task}.outputs.{ref.name}"
        else:
            if upstream.state != "success":
                raise fail(f"task {ref.task!r} {_ENDED.get(upstream.state, f'is {upstream.state}, not success')}")
            outputs = upstream.outputs or {}
            if ref.name not in outputs:
                raise fail(f"task {ref.task!r} has no output {ref.name!r}")
            value, label = outputs[ref.name], f"tasks.{ref.task}.outputs.{ref.name}"
    for segment in ref.path:
        if isinstance(segment, int):
            if not isinstance(value, list):
                raise fail(f"{label} is not a list (cannot take [{segment}])")
            if segment >= len(value):
                raise fail(f"{label} has {len(value)} items (no [{segment}])")
            value, label = value[segment], f"{label}[{segment}]"
        else:
            if not isinstance(value, dict):
                raise fail(f"{label} is not an object (cannot take .{segment})")
            if segment not in value:
                raise fail(f"{label} has no key {segment!r}")
            value, label = value[segment], f"{label}.{segment}"
    return value


def render_task(templates: TaskTemplates, command: Sequence[str], args: Sequence[str], env: Mapping[str, str],
                pod_template: Mapping[str, Any], facts: RunFacts) -> Rendered:
    """A task's strings with every template rendered; raises TemplateUnresolved (the try fails with it)."""
    if templates.problems:  # checked at apply; should a caller skip the check, a bad {{ is never text
        raise TemplateUnresolved(str(templates.problems[0]))
    new_command, new_args, new_env = list(command), list(args), dict(env)
    copied = _copy_containers(pod_template) if any(s.field == "pod_template" for s in templates.strings) else None
    for s in templates.strings:
        text = render(s.template, facts, s.where)
        if s.field == "command":
            new_command[int(s.key[0])] = text
        elif s.field == "args":
            new_args[int(s.key[0])] = text
        elif s.field == "env":
            new_env[str(s.key[0])] = text
        elif copied is not None:
            _put(copied, s.key, text)
    changed = {s.field for s in templates.strings}
    for name, value, limit in (("command", new_command, limits.COMMAND), ("args", new_args, limits.COMMAND),
                               ("env", new_env, limits.ENV)):
        if name not in changed or _surely_within(value, limit):
            continue
        try:
            check_size(value, name, limit)
        except ValidationFailed as exc:
            raise TemplateUnresolved(f"{exc} once rendered: pass a URI to the data instead") from None
    return Rendered(tuple(new_command), tuple(new_args), new_env, pod_template if copied is None else copied)


def _surely_within(value: Sequence[str] | Mapping[str, str], limit: limits.Size) -> bool:
    """A cheap sufficient test of ``check_size``: a character is at most 6 bytes of JSON (``\\u0000``),
    a string adds 3 (quotes, comma or colon). Almost every launch passes it; the exact count runs
    only for those near the limit (it was most of a render's time)."""
    strings = [*value.keys(), *value.values()] if isinstance(value, Mapping) else value
    return (len(value) <= limit.max_entries
            and 2 + sum(6 * len(text) + 3 for text in strings) <= limit.max_bytes)


def _copy_containers(pod_template: Mapping[str, Any]) -> dict[str, Any]:
    """A copy deep enough to write container args and env values into (the spec's stays as it was)."""
    spec = dict(pod_template["spec"])
    spec["containers"] = [{**c, "args": list(c.get("args") or ()), "env": [dict(e) for e in c.get("env") or ()]}
                          if isinstance(c, dict) else c for c in spec["containers"]]
    for c in spec["containers"]:
        for name in ("args", "env"):
            if isinstance(c, dict) and not c[name]:
                del c[name]
    return {**pod_template, "spec": spec}


def _put(pod: dict[str, Any], key: tuple[Segment, ...], text: str) -> None:
    target: Any = pod
    for segment in key[:-1]:
        target = target[segment]
    target[key[-1]] = text
