"""Launches of tasks whose command, args or env hold ``{{ … }}``: rendered by the leader, once per try.

A task without references launches as it always did: :func:`~leoflow.scheduler.queueing.build_launch`
and nothing else. A task with references (``TaskSpec.has_references``, decided when its DAG was
applied) is built the same way and set aside as :class:`Unrendered`; before the step commits,
:func:`render_launches` reads what all of the step's references need in **one** statement (the
referenced upstream task instances' states and current outputs,
:func:`leoflow.db.stores.tries.upstream_outputs`; the run's conf, id and logical date came with the
queued row) and renders each (:func:`leoflow.model.spec.rendering.render_task`).

The render is a pure function of stored facts — the spec version, the run's conf, the upstreams'
stored outputs — none of which change while the try lives (an upstream's clear would reset this
task too), so a new leader resubmitting a queued try after a failover renders the same argv.

A reference that cannot be resolved (an absent optional output, an upstream that was skipped, a
value too large for an argv element) fails **that try** with the reason, through the same report
an executor's refusal makes; the step, the run's other tasks and the scheduler carry on. Retries
apply like for any failed try.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from leoflow.db.connection.database import Connection
from leoflow.db.stores import tries as try_store
from leoflow.model.run_context import RunContext
from leoflow.model.spec.mapping import Instance, MapFailed, MapSource, SourceFacts, item_at
from leoflow.model.spec.rendering import RunFacts, Upstream, render_task
from leoflow.model.spec.templating import TaskTemplates, TemplateUnresolved
from leoflow.model.tries import StatusUpdate, TaskLaunch


@dataclass(frozen=True, slots=True)
class Unrendered:
    """A launch built from the spec's strings, to be rendered before it is handed over."""

    launch: TaskLaunch
    templates: TaskTemplates
    run_pk: int
    run: RunContext
    #: The task's ``map_over`` when the launch is a mapped instance's (its item is rendered too).
    map_over: MapSource | None = None


async def render_launches(conn: Connection, pending: Sequence[Unrendered],
                          now: datetime) -> tuple[list[TaskLaunch], list[StatusUpdate]]:
    """The rendered launches, and a ``failed`` report for each try whose references cannot be resolved."""
    if not pending:
        return [], []
    wanted = sorted({(p.run_pk, task_id) for p in pending for task_id in p.templates.upstream}
                    | {(p.run_pk, p.map_over.upstream) for p in pending
                       if p.map_over is not None and p.map_over.upstream is not None})
    found = await try_store.upstream_outputs(conn, wanted)
    failed = await try_store.failed_tasks(conn, {p.run_pk for p in pending if p.templates.reads_failed_tasks})
    launches: list[TaskLaunch] = []
    refused: list[StatusUpdate] = []
    by_run: dict[int, dict[str, Upstream]] = {}
    for (run_pk, task_id), row in found.items():
        by_run.setdefault(run_pk, {})[task_id] = Upstream(row.state, row.outputs, row.instances)
    for p in pending:
        upstream = by_run.get(p.run_pk, {})
        try:
            launches.append(render_launch(p, upstream, failed.get(p.run_pk, ())))
        except MapFailed as exc:
            refused.append(StatusUpdate(key=p.launch.key, state="failed", at=now, reason=str(exc)[:2000]))
        except TemplateUnresolved as exc:
            refused.append(StatusUpdate(key=p.launch.key, state="failed", at=now, reason=str(exc)[:2000]))
        except Exception as exc:  # containment: a defect rendering one try fails that try, not the step
            reason = f"scheduler error rendering templates: {type(exc).__name__}: {exc}"
            refused.append(StatusUpdate(key=p.launch.key, state="failed", at=now, reason=reason[:2000]))
    return launches, refused


def render_launch(p: Unrendered, upstream: Mapping[str, Upstream], failed_tasks: Sequence[str] = ()) -> TaskLaunch:
    """One launch with its templates rendered (raises TemplateUnresolved)."""
    launch = p.launch
    logical_date, _ = p.run.rendered
    index = launch.key.map_index if launch.key.map_index >= 0 else None
    item = None if index is None or p.map_over is None else item_at(
        p.map_over, _source_facts(p, upstream), launch.key.task_id, index)
    triggering = p.run.triggering_env if p.run.triggering_events is not None else "[]"
    facts = RunFacts(params=p.run.conf, run_id=launch.key.run_id, logical_date=logical_date, upstream=upstream,
                     map_index=index, item=item, triggering_events=triggering, run_state=p.run.state,
                     run_reason=p.run.reason, failed_tasks=failed_tasks, data_interval_start=p.run.interval[0],
                     data_interval_end=p.run.interval[1])
    pod = launch.pod
    pod_template: Mapping[str, Any] = pod.pod_template if pod is not None else {}
    # The spec's variables: the run context's LEOFLOW_* ones are Leoflow's (specs cannot set them).
    spec_env = {k: v for k, v in launch.env.items() if not k.startswith("LEOFLOW_")}
    out = render_task(p.templates, launch.command, launch.args, spec_env, pod_template, facts)
    if pod is not None and out.pod_template is not pod_template:
        pod = dataclasses.replace(pod, pod_template=out.pod_template)
    return launch._replace(command=out.command, args=out.args, env={**launch.env, **out.env}, pod=pod)



def _source_facts(p: Unrendered, upstream: Mapping[str, Upstream]) -> SourceFacts:
    """What the task's ``map_over`` reads, from what the step read for its templates."""
    assert p.map_over is not None
    name = p.map_over.upstream
    found = upstream.get(name) if name is not None else None
    if found is None:
        return SourceFacts(p.run.conf)
    if found.instances is not None:
        return SourceFacts(p.run.conf, instances=[Instance(s, o) for s, o in found.instances])
    return SourceFacts(p.run.conf, upstream_state=found.state, upstream_outputs=found.outputs)
