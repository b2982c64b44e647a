"""DAG specifications: parsing, validation, the canonical form and its hash.

A DAG spec arrives as YAML or JSON (already decoded into Python objects by the caller) and
leaves as a frozen :class:`DagSpec`. Validation is strict and names the offending path the way a
user would point at it in their file (``tasks[1].depends_on[0]: unknown task 'extrct'``); it
rejects unknown fields, wrong types (a bool is not an integer), bad names, bad cron expressions
and time zones, duplicate task ids, unknown or duplicate dependencies and cycles. Every failure
raises :class:`~leoflow.errors.ValidationFailed` — never a bare ``KeyError``/``TypeError`` — so
the API can answer 422 and the CLI can print one line.

The **canonical form** (:meth:`DagSpec.to_canonical`) is the spec with every default filled in,
numbers normalised and ``depends_on`` sorted; it is what ``dag_versions.spec`` stores and what
the scheduler re-parses. Its hash (:meth:`DagSpec.spec_hash`) decides whether applying a spec
creates a new version: two files that mean the same DAG hash alike, so re-applying is a no-op.
``paused`` is deliberately *not* part of the hash: it is a flag of the DAG (``leoflow dags
pause``), honoured from the spec only when the DAG is created, so re-applying a file never
unpauses a DAG someone paused.

Task kinds: ``container`` (the default) needs ``image`` (without ``command`` the image's entrypoint
runs with ``args``: canonical ``command: []``, Kubernetes only); ``empty`` (issue 11,
Airflow's EmptyOperator) must have neither and is marked ``success`` by the scheduler as soon as
its upstreams succeed, without the executor.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, tzinfo
from functools import cached_property
from typing import Any, Literal, TypeVar
from zoneinfo import ZoneInfo

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.artifacts.declared import NO_ARTIFACTS, TaskArtifacts, check_artifact_sources, parse_artifacts
from leoflow.model.bounds import check_count, check_cron_fires, check_name, check_size, shown_repr, within
from leoflow.model.cron import cron_expression
from leoflow.model.fields import (
    as_mapping,
    bool_field,
    exit_codes_field,
    name_field,
    no_unknown,
    opt_str,
    plain_mapping,
    plain_number,
    required,
    resources_field,
    schedule_field,
    start_date_field,
    str_list,
    timezone_field,
    type_name,
)
from leoflow.model.k8s.pod import DEFAULTS_FIELDS, POD_FIELDS, PodFields, parse_own, resolve
from leoflow.model.outputs import OutputDecl, canonical_decls, parse_output_decls
from leoflow.model.spec.datasets import DatasetCondition, is_dataset_schedule, parse_dataset_schedule, parse_produces
from leoflow.model.spec.expressions import Condition, compile_conditions
from leoflow.model.spec.fairness import DEFAULT_POOL, max_active_tasks_field, pool_name, priority_field
from leoflow.model.spec.mapping import MapSource, check_map_sources, parse_map_over, parse_max_parallel
from leoflow.model.spec.notify import NotifyRule, parse_notify
from leoflow.model.spec.params import check_scheduled_defaults, parse_params
from leoflow.model.spec.retry_policy import DEFAULT_FACTOR, RetryPolicy, parse_retry_policy
from leoflow.model.spec.reuse import (
    NOT_IN_TEMPLATE,
    ClusterTemplates,
    Shape,
    TaskCheck,
    expand_task,
    local_shapes,
    parse_shape,
    uses_record,
)
from leoflow.model.spec.schedules.forms import (
    Timetable,
    check_awaiting_slot,
    combine_field,
    encode,
    end_date_field,
    overlap_field,
    parse_time_schedule,
    starting_deadline_field,
)
from leoflow.model.spec.templating import (
    SYNTAX_FIELD,
    SYNTAX_VERSION,
    TaskTemplates,
    check_references,
    check_syntax_field,
    task_templates,
)
from leoflow.model.spec.trigger_rules import DEFAULT_TRIGGER_RULE, TRIGGER_RULES, TriggerRule
from leoflow.model.spec.waits.conditions import Wait, parse_depends_on_past, parse_wait_for, waits_of

MAX_TASKS = limits.TASKS.maximum
DEFAULT_MAX_ACTIVE_RUNS = 16
DEFAULT_RETRY_DELAY = 30.0
#: Where "the next N years" of a schedule start when the caller passes no clock (the scheduler
#: re-validating a stored spec): a fixed moment keeps validation a pure function of the spec.
SCHEDULE_CHECK_FROM = datetime(2026, 1, 1, tzinfo=UTC)

TaskKind = Literal["container", "empty"]

_DAG_FIELDS = {"dag_id", "description", "schedule", "timezone", "catchup", "start_date", "max_active_runs",
               "paused", "default_retries", "defaults", "tasks", "notify", "params", "run_timeout_seconds",
               "max_active_tasks", "on_exit", "templates", "team", "end_date", "overlap", "starting_deadline_seconds"}
_TASK_FIELDS = {"id", "kind", "image", "command", "args", "env", "retries", "retry_delay_seconds",
                "max_retry_delay_seconds", "timeout_seconds", "resources", "depends_on", "trigger_rule", *POD_FIELDS,
                "pool", "priority", "outputs", "when", "skip_on_exit_code", "retry_policy", "uses", "inputs",
                "map_over", "max_parallel", "produces", "wait_for", "depends_on_past", "artifacts"}
#: What a template (``templates:``, a cluster template) may set: a task's shape, not its place in the graph.
_TEMPLATE_FIELDS = (_TASK_FIELDS - NOT_IN_TEMPLATE) | {"name", "inputs", "description"}


@dataclass(frozen=True)
class TaskSpec:
    """One task of a DAG, defaults resolved."""

    id: str
    kind: TaskKind = "container"
    image: str | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    retries: int = 0
    retry_delay_seconds: float = DEFAULT_RETRY_DELAY
    max_retry_delay_seconds: float | None = None
    timeout_seconds: float | None = None
    resources: Mapping[str, Any] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    #: The pod fields with the DAG's defaults applied (leoflow.model.k8s.pod), and the task's own
    #: fields (``env`` included) in canonical form: what the stored spec keeps.
    pod: PodFields = field(default_factory=PodFields)
    pod_own: Mapping[str, Any] = field(default_factory=dict)
    #: When the task may run given how its upstream tasks ended (leoflow.model.spec.trigger_rules).
    trigger_rule: TriggerRule = DEFAULT_TRIGGER_RULE
    #: The pool whose slot a try holds (leoflow.model.spec.fairness); None for ``kind: empty`` tasks.
    pool: str | None = DEFAULT_POOL
    #: Higher runs first among the ready tasks of a pool.
    priority: int = 0
    #: The strings of command/args/env/pod_template that hold ``{{`` (leoflow.model.spec.templating),
    #: parsed; None for a task without any, which launches without rendering.
    templates: TaskTemplates | None = field(default=None, compare=False)
    #: Declared outputs (leoflow.model.outputs); empty: the task gets no LEOFLOW_OUTPUTS and its
    #: successes store nothing.
    outputs: Mapping[str, OutputDecl] = field(default_factory=dict)
    #: ``when:``, compiled (leoflow.model.spec.expressions); None: the task runs when its rule says so.
    when: Condition | None = None
    #: Exit codes that end a try as ``skipped`` instead of ``failed`` (no retry).
    skip_on_exit_code: tuple[int, ...] = ()
    #: Which failed tries are retried and how the delay grows (leoflow.model.spec.retry_policy);
    #: None: every failure while tries remain, the delay doubling.
    retry_policy: RetryPolicy | None = None
    #: The template the task's fields were inlined from (leoflow.model.spec.reuse): ``{template: etl}``
    #: or ``{template: cluster/etl, version: 4}``; None: written in full.
    uses: Mapping[str, Any] | None = None
    #: ``map_over:`` (leoflow.model.spec.mapping): one instance per item; None: one task instance.
    map_over: MapSource | None = None
    #: At most this many of its instances queued or running at once (None: pools and DAG limits only).
    max_parallel: int | None = None
    #: Dataset URIs each success of the task records an event for (leoflow.model.spec.datasets).
    produces: tuple[str, ...] = ()
    #: ``wait_for:`` conditions and ``depends_on_past:`` (leoflow.model.spec.waits): the task waits,
    #: holding no slot, until they are met.
    wait_for: tuple[Wait, ...] = ()
    depends_on_past: bool = False
    #: ``artifacts:`` (leoflow.model.artifacts.declared): files handed to later tasks through object storage.
    artifacts: TaskArtifacts = NO_ARTIFACTS

    @property
    def waits(self) -> tuple[Wait, ...]:
        """Every condition the task waits for before it is queued (its index is its place in storage)."""
        return waits_of(self.wait_for, self.depends_on_past)

    @property
    def mapped(self) -> bool:
        return self.map_over is not None

    @property
    def has_references(self) -> bool:
        return self.templates is not None

    @property
    def max_tries(self) -> int:
        return self.retries + 1

    def retry_delay(self, try_number: int, global_cap: float) -> float:
        """Seconds to wait after failed try ``try_number`` (1-based): multiplied by the policy's
        ``factor`` (2 unless it says otherwise) per retry, capped."""
        factor = self.retry_policy.factor if self.retry_policy is not None else DEFAULT_FACTOR
        delay = self.retry_delay_seconds * (factor ** max(0, try_number - 1))
        cap = global_cap if self.max_retry_delay_seconds is None else min(global_cap, self.max_retry_delay_seconds)
        return min(delay, cap)

    def to_canonical(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind}
        if self.kind == "container":
            env = self.pod_own.get("env", dict(sorted(self.env.items())))
            out.update(image=self.image, command=list(self.command), args=list(self.args),
                       env=env, resources=plain_mapping(self.resources))
            out.update({k: v for k, v in self.pod_own.items() if k != "env"})
        out.update(retries=self.retries, retry_delay_seconds=plain_number(self.retry_delay_seconds),
                   depends_on=sorted(self.depends_on))
        if self.max_retry_delay_seconds is not None:
            out["max_retry_delay_seconds"] = plain_number(self.max_retry_delay_seconds)
        if self.timeout_seconds is not None:
            out["timeout_seconds"] = plain_number(self.timeout_seconds)
        if self.trigger_rule != DEFAULT_TRIGGER_RULE:  # absent when default: existing hashes stay
            out["trigger_rule"] = self.trigger_rule
        # Only when not the default, so specs written before pools existed keep their hash.
        if self.kind == "container" and self.pool != DEFAULT_POOL:
            out["pool"] = self.pool
        if self.priority:
            out["priority"] = self.priority
        if self.outputs:  # absent when none: existing hashes stay
            out["outputs"] = canonical_decls(self.outputs)
        if self.when is not None:  # absent when none: existing hashes stay
            out["when"] = self.when.source
        if self.skip_on_exit_code:
            out["skip_on_exit_code"] = sorted(self.skip_on_exit_code)
        if self.retry_policy is not None:  # absent when none: existing hashes stay
            out["retry_policy"] = self.retry_policy.to_canonical()
        if self.uses is not None:  # absent when none: existing hashes stay
            out["uses"] = dict(self.uses)
        if self.map_over is not None:  # absent when none: existing hashes stay
            out["map_over"] = self.map_over.canonical()
        if self.max_parallel is not None:
            out["max_parallel"] = self.max_parallel
        if self.produces:  # absent when none: existing hashes stay
            out["produces"] = list(self.produces)
        if self.wait_for:  # absent when none: existing hashes stay
            out["wait_for"] = [w.canonical() for w in self.wait_for]
        if self.depends_on_past:
            out["depends_on_past"] = True
        if self.artifacts:  # absent when none: existing hashes stay
            out["artifacts"] = self.artifacts.to_canonical()
        return out


@dataclass(frozen=True)
class DagSpec:
    """A validated DAG: what ``apply_dag`` stores and the scheduler runs."""

    dag_id: str
    tasks: tuple[TaskSpec, ...]
    schedule: str | None = None
    timezone: str = "UTC"
    catchup: bool = False
    start_date: datetime | None = None
    max_active_runs: int = DEFAULT_MAX_ACTIVE_RUNS
    paused: bool = False
    default_retries: int = 0
    description: str | None = None
    #: Webhook rules (leoflow.model.spec.notify); None: the cluster default applies, (): none at all.
    notify: tuple[NotifyRule, ...] | None = None
    #: JSON Schema of the runs' conf (leoflow.model.spec.params); None: any object.
    params: Mapping[str, Any] | None = None
    #: The ``defaults:`` block (pod fields every container task inherits), canonical form.
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: Seconds a run may take from its start before it is failed (``run deadline exceeded``).
    run_timeout_seconds: float | None = None
    #: Most task instances of this DAG queued or running at once, all runs together; None: no limit.
    max_active_tasks: int | None = None
    #: Exit tasks: created once every task of ``tasks`` is final, whatever the outcome; they may
    #: depend on each other only, and can turn the run's success into a failure, never the reverse
    #: (ADR 0014, decision 7).
    on_exit: tuple[TaskSpec, ...] = ()
    #: The team owning the DAG (leoflow.model.access.teams), over its DAG-id prefix; None: the prefix decides.
    team: str | None = None
    #: ``schedule: {datasets: …}`` (leoflow.model.spec.datasets); then ``schedule`` (the cron) is None.
    dataset_schedule: DatasetCondition | None = None
    #: A time schedule in another form than one cron (leoflow.model.spec.schedules.forms): its
    #: canonical value; then ``schedule`` is its encoding (what ``dags.schedule`` keeps).
    schedule_form: Any = None
    #: No scheduled slot after it; None: none.
    end_date: datetime | None = None
    #: What a due slot does while an earlier run is queued or running: allow, skip or replace.
    overlap: str = "allow"
    #: A slot reached later than this after its time is skipped; None: always run late.
    starting_deadline_seconds: float | None = None

    @property
    def tz(self) -> tzinfo:
        return ZoneInfo(self.timezone)

    @cached_property
    def task_map(self) -> dict[str, TaskSpec]:
        return {t.id: t for t in self.tasks}

    def to_canonical(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dag_id": self.dag_id,
            "schedule": self._canonical_schedule(),
            "timezone": self.timezone,
            "catchup": self.catchup,
            "start_date": self.start_date.astimezone(UTC).isoformat() if self.start_date else None,
            "max_active_runs": self.max_active_runs,
            "paused": self.paused,
            "default_retries": self.default_retries,
            "tasks": [t.to_canonical() for t in self.tasks],
        }
        if any(t.has_references for t in self.tasks):  # absent without templates: existing hashes stay
            out[SYNTAX_FIELD] = SYNTAX_VERSION
        if self.description is not None:
            out["description"] = self.description
        if self.notify is not None:
            out["notify"] = [rule.to_canonical() for rule in self.notify]
        if self.params is not None:
            out["params"] = plain_mapping(self.params)
        if self.defaults:
            out["defaults"] = dict(self.defaults)
        if self.run_timeout_seconds is not None:
            out["run_timeout_seconds"] = plain_number(self.run_timeout_seconds)
        if self.max_active_tasks is not None:
            out["max_active_tasks"] = self.max_active_tasks
        if self.on_exit:  # absent when none: existing hashes stay
            out["on_exit"] = [t.to_canonical() for t in self.on_exit]
        if self.team is not None:  # absent when none: existing hashes stay
            out["team"] = self.team
        if self.end_date is not None:  # these three absent when unset: existing hashes stay
            out["end_date"] = self.end_date.astimezone(UTC).isoformat()
        if self.overlap != "allow":
            out["overlap"] = self.overlap
        if self.starting_deadline_seconds is not None:
            out["starting_deadline_seconds"] = plain_number(self.starting_deadline_seconds)
        return out

    def _canonical_schedule(self) -> Any:
        if self.schedule_form is not None:  # a list, @once, every:, or a cron and datasets
            return self.schedule_form
        if self.dataset_schedule is not None and self.schedule is not None:  # cron or datasets
            return {"cron": self.schedule, **self.dataset_schedule.canonical()}
        if self.dataset_schedule is not None:
            return self.dataset_schedule.canonical()
        return self.schedule_form if self.schedule_form is not None else self.schedule

    def spec_hash(self) -> str:
        """SHA-256 of the canonical form without ``paused`` (a DAG flag, see the module doc)."""
        body = {k: v for k, v in self.to_canonical().items() if k != "paused"}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def schedule_fields(self) -> tuple[Any, ...]:
        """What the next scheduled run depends on; a change re-plans ``dags.next_run_at``."""
        return (self.schedule, self.timezone, self.catchup, self.start_date, self.end_date)


# --------------------------------------------------------------------------- parsing

_T = TypeVar("_T")

#: Problems one validation reports at most: enough to fix a file in one pass, few enough to read
#: (a spec of 10,000 bad tasks is not answered with 10,000 lines).
MAX_PROBLEMS = 20


class _Problems:
    """The validation problems of one spec, collected rather than raised at the first one."""

    def __init__(self) -> None:
        self.found: list[ValidationFailed] = []

    def add(self, problem: ValidationFailed) -> None:
        self.found += [problem, *problem.also]
        if len(self.found) >= MAX_PROBLEMS:
            raise self.failure()

    def check(self, parse: Callable[[], _T], fallback: _T) -> _T:
        """``parse()``, or ``fallback`` with its problem noted (the rest of the spec is still checked)."""
        try:
            return parse()
        except ValidationFailed as problem:
            self.add(problem)
            return fallback

    def failure(self) -> ValidationFailed:
        first, *rest = self.found[:MAX_PROBLEMS]
        return ValidationFailed(first.path, first.problem, also=tuple(rest))

    def raise_any(self) -> None:
        if self.found:
            raise self.failure()


def parse_dag_spec(data: object, *, now: datetime | None = None, stored: bool = False,
                   cluster_templates: ClusterTemplates | None = None) -> DagSpec:
    """Validate decoded YAML/JSON into a :class:`DagSpec`; raise ValidationFailed(path, problem).

    Every field is held to its row of :mod:`leoflow.model.limits`. ``now`` is where "the
    schedule fires within N years" is counted from (the API passes its clock; without one,
    :data:`SCHEDULE_CHECK_FROM`); a later ``start_date`` moves it.

    A spec that is not a mapping, or too large, fails at once; otherwise every field is checked
    and the one ValidationFailed raised names the first problem in document order, with the
    others (up to :data:`MAX_PROBLEMS` in all) in its ``also`` — a missing field does not hide a
    typo in ``depends_on``.

    ``stored``: ``data`` is a version's stored canonical form (the scheduler's compile); one stored
    before templates existed (no ``template_syntax``) keeps its ``{{`` as text.

    ``cluster_templates``: the cluster templates the spec may name in ``uses: cluster/NAME[@V]``
    (the caller reads them, :func:`leoflow.model.spec.reuse.cluster_refs`); they and the DAG's own
    ``templates:`` are inlined into the tasks that use them (:mod:`leoflow.model.spec.reuse`).
    """
    doc = as_mapping(data, "")
    check_size(doc, "", limits.SPEC)
    problems = _Problems()
    problems.check(lambda: no_unknown(doc, _DAG_FIELDS | {SYNTAX_FIELD}, ""), None)
    dag_id = problems.check(lambda: name_field(required(doc, "dag_id", ""), "dag_id"), "")
    description = problems.check(
        lambda: opt_str(doc.get("description"), "description", max_len=limits.DESCRIPTION.maximum), None)
    team = problems.check(lambda: None if doc.get("team") is None else check_name(doc["team"], "team",
                                                                                  limits.TEAM_NAME), None)
    timezone = problems.check(lambda: timezone_field(doc.get("timezone", "UTC"), "timezone"), "UTC")
    catchup = problems.check(lambda: bool_field(doc.get("catchup", False), "catchup"), False)
    start_date = problems.check(lambda: start_date_field(doc.get("start_date"), "start_date", timezone), None)
    form = problems.check(lambda: _schedule(doc.get("schedule"), timezone, start_date, now), _NO_SCHEDULE)
    schedule, schedule_form, dataset_schedule = form
    end_date = problems.check(lambda: end_date_field(doc.get("end_date"), timezone, start_date), None)
    overlap = problems.check(lambda: overlap_field(doc.get("overlap"), catchup), "allow")
    problems.check(lambda: check_awaiting_slot(schedule, catchup, overlap), None)
    starting_deadline = problems.check(lambda: starting_deadline_field(doc.get("starting_deadline_seconds")), None)
    max_active_runs = problems.check(lambda: int(within(doc.get("max_active_runs", DEFAULT_MAX_ACTIVE_RUNS),
                                                        "max_active_runs", limits.MAX_ACTIVE_RUNS)),
                                     DEFAULT_MAX_ACTIVE_RUNS)
    max_active_tasks = problems.check(lambda: max_active_tasks_field(doc.get("max_active_tasks"),
                                                                     "max_active_tasks"), None)
    paused = problems.check(lambda: bool_field(doc.get("paused", False), "paused"), False)
    default_retries = problems.check(lambda: int(within(doc.get("default_retries", 0), "default_retries",
                                                        limits.RETRIES)), 0)
    no_defaults: dict[str, Any] = {}
    defaults = problems.check(lambda: _defaults(doc.get("defaults")), no_defaults)
    no_tasks: tuple[TaskSpec, ...] = ()
    check_task = _template_check(default_retries, defaults)
    no_shapes: dict[str, Shape] = {}
    shapes = problems.check(lambda: local_shapes(doc.get("templates"), check_task), no_shapes)

    def expand(raw: object, path: str) -> object:
        return expand_task(raw, path, shapes, cluster_templates, check_task)

    tasks = problems.check(lambda: _tasks(doc, default_retries, defaults, problems, expand), no_tasks)
    notify = problems.check(lambda: parse_notify(doc.get("notify")), None)
    params = problems.check(lambda: parse_params(doc.get("params")), None)
    if schedule is not None or dataset_schedule is not None:  # neither kind of run takes a conf
        problems.check(lambda: check_scheduled_defaults(params), None)
    if stored and doc.get(SYNTAX_FIELD) is None:  # stored before templates: its {{ are text, as they ran
        tasks = tuple(replace(t, templates=None) for t in tasks)
    else:
        problems.check(lambda: check_syntax_field(doc.get(SYNTAX_FIELD)), None)
        problems.check(lambda: check_references(tasks, params, outputs={t.id: t.outputs for t in tasks},
                                                written=doc.get("tasks")), None)
        problems.check(lambda: check_map_sources(tasks, params), None)
        problems.check(lambda: check_artifact_sources(tasks, doc.get("tasks")), None)
    tasks = problems.check(lambda: _with_conditions(tasks, params, doc.get("tasks")), tasks)
    on_exit = problems.check(lambda: _exit_tasks(doc, default_retries, defaults, params, {t.id for t in tasks},
                                                 problems, expand), no_tasks)
    run_timeout = problems.check(lambda: run_timeout_field(doc.get("run_timeout_seconds"), "run_timeout_seconds"),
                                 None)
    problems.raise_any()
    return DagSpec(dag_id=dag_id, tasks=tasks, schedule=schedule, timezone=timezone, catchup=catchup,
                   start_date=start_date, max_active_runs=max_active_runs, paused=paused,
                   default_retries=default_retries, description=description, notify=notify, params=params,
                   defaults=defaults, run_timeout_seconds=run_timeout,
                   max_active_tasks=max_active_tasks, on_exit=on_exit, team=team, dataset_schedule=dataset_schedule,
                   schedule_form=schedule_form, end_date=end_date, overlap=overlap,
                   starting_deadline_seconds=starting_deadline)


#: (``schedule``: the cron or the encoded time form; its canonical form when not one cron; the dataset condition).
_ScheduleParts = tuple[str | None, Any, DatasetCondition | None]
_NO_SCHEDULE: _ScheduleParts = (None, None, None)


def _schedule(value: object, timezone: str, start_date: datetime | None, now: datetime | None) -> _ScheduleParts:
    """``schedule:`` in any of its forms (leoflow.model.spec.schedules.forms, .datasets)."""
    if isinstance(value, dict) and "cron" in value:
        unknown = [k for k in value if k not in ("cron", "datasets", "combine")]
        if unknown:
            raise ValidationFailed(f"schedule.{unknown[0]}", "unknown field (a cron with datasets takes cron, "
                                   "datasets and combine)")
        if "datasets" not in value:
            raise ValidationFailed("schedule.datasets", "required with schedule.cron (a plain cron is "
                                   "written as the string itself)")
        cron = schedule_field(value["cron"], "schedule.cron")
        if cron is None:
            raise ValidationFailed("schedule.cron", "must be a cron expression or a preset, got null")
        _check_fires(cron, timezone, start_date, now, "schedule.cron")
        condition = parse_dataset_schedule({"datasets": value["datasets"]})
        if combine_field(value.get("combine"), "schedule.combine") == "and":  # slots wait for the data
            return (encode(Timetable(crons=(cron,), awaits_datasets=True)),
                    {"cron": cron, **condition.canonical(), "combine": "and"}, condition)
        return cron, None, condition
    form = parse_time_schedule(value, "schedule", start_date)
    if form is not None:
        for i, cron in enumerate(form.timetable.crons):
            path = f"schedule[{i}]"
            _check_fires(cron, timezone, start_date, now, path)
        return form.encoded, form.canonical, None
    if is_dataset_schedule(value):
        return None, None, parse_dataset_schedule(value)
    cron = schedule_field(value, "schedule")
    if cron is not None:
        _check_fires(cron, timezone, start_date, now, "schedule")
    return cron, None, None


def _check_fires(cron: str, timezone: str, start_date: datetime | None, now: datetime | None, path: str) -> None:
    reference = max(now or SCHEDULE_CHECK_FROM, start_date or SCHEDULE_CHECK_FROM)
    check_cron_fires(cron_expression(cron), timezone, reference, path, limits.SCHEDULE)


def _tasks(doc: Mapping[str, Any], default_retries: int, defaults: dict[str, Any],
           problems: _Problems, expand: Callable[[object, str], object]) -> tuple[TaskSpec, ...]:
    """The tasks, each checked on its own; the graph checked over those that parsed.

    A dependency on a task that failed to parse is not reported as unknown: the task is there,
    it has its own problem.
    """
    raw_tasks = required(doc, "tasks", "")
    if not isinstance(raw_tasks, list):
        raise ValidationFailed("tasks", f"must be a list of tasks, got {type_name(raw_tasks)}")
    if not raw_tasks:
        raise ValidationFailed("tasks", "must contain at least one task")
    check_count(len(raw_tasks), "tasks", limits.TASKS)
    parsed: list[tuple[int, TaskSpec]] = []
    unparsed: set[str] = set()
    for i, raw in enumerate(raw_tasks):
        try:
            parsed.append((i, _task(expand(raw, f"tasks[{i}]"), f"tasks[{i}]", default_retries, defaults)))
        except ValidationFailed as problem:
            problems.add(problem)
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                unparsed.add(raw["id"])
    tasks = tuple(task for _, task in parsed)
    check_count(sum(len(t.depends_on) for t in tasks), "tasks", limits.EDGES)
    _check_graph(tasks, [i for i, _ in parsed], unparsed)
    return tasks


def _exit_tasks(doc: Mapping[str, Any], default_retries: int, defaults: dict[str, Any],
                params: Mapping[str, Any] | None, body: Collection[str], problems: _Problems,
                expand: Callable[[object, str], object]) -> tuple[TaskSpec, ...]:
    """``on_exit:``: tasks like ``tasks``' (ids unique across both), depending on each other only.

    They run after the body whatever its outcome, so an edge into the body would mean nothing
    (every body task is final by then) and is refused rather than ignored.
    """
    raw_tasks = doc.get("on_exit")
    if raw_tasks is None:
        return ()
    if not isinstance(raw_tasks, list):
        raise ValidationFailed("on_exit", f"must be a list of tasks, got {type_name(raw_tasks)}")
    check_count(len(raw_tasks), "on_exit", limits.ON_EXIT)
    parsed: list[tuple[int, TaskSpec]] = []
    unparsed: set[str] = set()
    for i, raw in enumerate(raw_tasks):
        try:
            task = _task(expand(raw, f"on_exit[{i}]"), f"on_exit[{i}]", default_retries, defaults)
        except ValidationFailed as problem:
            problems.add(problem)
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                unparsed.add(raw["id"])
            continue
        if task.id in body:
            problems.add(ValidationFailed(f"on_exit[{i}].id", f"duplicate task id {task.id!r} (also in tasks)"))
            continue
        if task.map_over is not None:
            problems.add(ValidationFailed(f"on_exit[{i}].map_over", "exit tasks run once each; map in tasks instead"))
            continue
        for j, dep in enumerate(task.depends_on):
            if dep in body:
                raise ValidationFailed(f"on_exit[{i}].depends_on[{j}]",
                                       f"{dep!r} is in tasks: an exit task may depend on other exit tasks only "
                                       "(it runs once every task of tasks is final)")
        parsed.append((i, task))
    tasks = tuple(task for _, task in parsed)
    _check_graph(tasks, [i for i, _ in parsed], unparsed, where="on_exit")
    check_references(tasks, params, outputs={t.id: t.outputs for t in tasks}, written=raw_tasks, exits=True)
    return _with_conditions(tasks, params, raw_tasks, where="on_exit")


def _with_conditions(tasks: tuple[TaskSpec, ...], params: Mapping[str, Any] | None,
                     written: object, where: str = "tasks") -> tuple[TaskSpec, ...]:
    """The tasks with their ``when:`` compiled (it reads its ancestors, so after the graph checks)."""
    conditions = compile_conditions(written, {t.id: t.depends_on for t in tasks}, {t.id: t.outputs for t in tasks},
                                    params, where=where)
    if not conditions:
        return tasks
    return tuple(replace(t, when=conditions[t.id]) if t.id in conditions else t for t in tasks)


def skip_on_exit_code_field(value: object, path: str) -> tuple[int, ...]:
    """``skip_on_exit_code``: distinct exit codes 0..255, at most :data:`limits.SKIP_EXIT_CODES`."""
    return exit_codes_field(value, path, limits.SKIP_EXIT_CODES)


def run_timeout_field(value: object, path: str) -> float | None:
    """``run_timeout_seconds`` (the DAG's, or a trigger's): None, or seconds within :data:`limits.RUN_TIMEOUT`."""
    return None if value is None else float(within(value, path, limits.RUN_TIMEOUT))


def _defaults(raw: object) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValidationFailed("defaults", f"must be a mapping of pod fields, got {type_name(raw)}")
    no_unknown(raw, set(DEFAULTS_FIELDS), "defaults")
    return parse_own(raw, "defaults", fields=DEFAULTS_FIELDS)


def _template_check(default_retries: int, defaults: dict[str, Any]) -> TaskCheck:
    """How a template's fields are checked: as a task's, held to what a template may set."""
    def check(fields: Mapping[str, Any], path: str) -> TaskSpec:
        no_unknown({k: v for k, v in fields.items() if k != "id"}, _TEMPLATE_FIELDS, path)
        return _task(fields, path, default_retries, defaults)
    return check


def parse_cluster_template(data: object, name: str) -> Shape:
    """A cluster template's body (``PUT /api/v2/templates/{name}``), checked as a DAG's template is;
    problems name the body's own fields (``args[0]``, ``inputs.mode.type``)."""
    try:
        return parse_shape(data, "template", _template_check(0, {}), name=name)
    except ValidationFailed as problem:
        def relative(path: str) -> str:
            return path.removeprefix("template").removeprefix(".")
        also = tuple(ValidationFailed(relative(p.path), p.problem) for p in problem.also)
        raise ValidationFailed(relative(problem.path), problem.problem, also=also) from None


def _task(raw: object, path: str, default_retries: int, defaults: dict[str, Any]) -> TaskSpec:
    doc = as_mapping(raw, path)
    no_unknown(doc, _TASK_FIELDS, path)
    task_id = name_field(required(doc, "id", path), f"{path}.id")
    kind = doc.get("kind", "container")
    if kind not in ("container", "empty"):
        raise ValidationFailed(f"{path}.kind", f"must be 'container' or 'empty', got {shown_repr(kind)}")
    image: str | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    resources: dict[str, Any] = {}
    pod, pod_own = PodFields(), {}
    pool: str | None = None
    templates: TaskTemplates | None = None
    if kind == "empty":
        for key in ("image", "command", "args", "env", "resources", "pool", "priority", "outputs",
                    "skip_on_exit_code", "retry_policy", "produces", "artifacts", *POD_FIELDS):
            if doc.get(key) not in (None, [], {}):
                raise ValidationFailed(f"{path}.{key}", "is not allowed on an empty task (kind: empty)")
    else:
        image = opt_str(doc.get("image"), f"{path}.image", max_len=limits.IMAGE.maximum)
        if not image:
            raise ValidationFailed(f"{path}.image", "is required (or set kind: empty)")
        # Absent or []: the image's entrypoint runs with ``args`` (Kubernetes; the local executor
        # refuses it, leoflow.model.spec.entrypoint).
        command = str_list(doc.get("command", []), f"{path}.command")
        args = str_list(doc.get("args", []), f"{path}.args")
        pod_own = {"env": {}, **parse_own(doc, path, fields=DEFAULTS_FIELDS)}
        pod = resolve(defaults, pod_own)
        env = pod.plain_env()
        resources = resources_field(doc.get("resources", {}), f"{path}.resources")
        # After the type checks (clearer messages); the whole spec was already held to limits.SPEC.
        for key, limit in (("command", limits.COMMAND), ("args", limits.COMMAND), ("env", limits.ENV),
                           ("resources", limits.RESOURCES)):
            check_size(doc.get(key), f"{path}.{key}", limit)
        pool = pool_name(doc.get("pool", DEFAULT_POOL), f"{path}.pool")
        templates = task_templates(path, command, args, env, pod.pod_template, own=pod_own, defaults=defaults)
    priority = priority_field(doc.get("priority", 0), f"{path}.priority")
    if "inputs" in doc:  # inputs are consumed by expanding uses: NAME; a stored record takes none
        raise ValidationFailed(f"{path}.inputs", "only a task that says uses: TEMPLATE takes inputs")
    uses = uses_record(doc.get("uses"), f"{path}.uses")
    skip_codes = skip_on_exit_code_field(doc.get("skip_on_exit_code"), f"{path}.skip_on_exit_code")
    retry_policy = parse_retry_policy(doc.get("retry_policy"), f"{path}.retry_policy")
    map_over = None if doc.get("map_over") is None else parse_map_over(doc["map_over"], f"{path}.map_over")
    max_parallel = parse_max_parallel(doc.get("max_parallel"), f"{path}.max_parallel")
    if max_parallel is not None and map_over is None:
        raise ValidationFailed(f"{path}.max_parallel", "bounds the instances of a mapped task: set map_over too")
    outputs = parse_output_decls(doc.get("outputs"), f"{path}.outputs")
    produces = parse_produces(doc.get("produces"), f"{path}.produces")
    artifacts = parse_artifacts(doc.get("artifacts"), f"{path}.artifacts")
    wait_for = parse_wait_for(doc.get("wait_for"), f"{path}.wait_for")
    depends_on_past = parse_depends_on_past(doc.get("depends_on_past"), f"{path}.depends_on_past")
    retries = int(within(doc.get("retries", default_retries), f"{path}.retries", limits.RETRIES))
    retry_delay = float(within(doc.get("retry_delay_seconds", DEFAULT_RETRY_DELAY), f"{path}.retry_delay_seconds",
                               limits.RETRY_DELAY))
    max_delay = doc.get("max_retry_delay_seconds")
    max_retry_delay = None if max_delay is None else float(within(max_delay, f"{path}.max_retry_delay_seconds",
                                                                  limits.MAX_RETRY_DELAY))
    timeout_raw = doc.get("timeout_seconds")
    timeout = None if timeout_raw is None else float(within(timeout_raw, f"{path}.timeout_seconds", limits.TIMEOUT))
    deps_raw = doc.get("depends_on", [])
    if not isinstance(deps_raw, list):
        raise ValidationFailed(f"{path}.depends_on", f"must be a list of task ids, got {type_name(deps_raw)}")
    if len(deps_raw) > limits.TASKS.maximum:
        raise ValidationFailed(f"{path}.depends_on", f"has {len(deps_raw):,} entries; a DAG has at most "
                               f"{limits.TASKS.maximum:,} tasks")
    deps: dict[str, None] = {}  # ordered, with O(1) duplicate checks
    for j, dep in enumerate(deps_raw):
        check_name(dep, f"{path}.depends_on[{j}]", limits.TASK_ID)
        if dep in deps:
            raise ValidationFailed(f"{path}.depends_on[{j}]", f"duplicate dependency {dep!r}")
        deps[dep] = None
    trigger_rule = doc.get("trigger_rule", DEFAULT_TRIGGER_RULE)
    if not isinstance(trigger_rule, str) or trigger_rule not in TRIGGER_RULES:
        got = repr(trigger_rule[:60]) if isinstance(trigger_rule, str) else type_name(trigger_rule)
        raise ValidationFailed(f"{path}.trigger_rule", f"must be one of {', '.join(TRIGGER_RULES)}, got {got}")
    return TaskSpec(id=task_id, kind=kind, image=image, command=command, args=args, env=env, retries=retries,
                    retry_delay_seconds=retry_delay, max_retry_delay_seconds=max_retry_delay,
                    timeout_seconds=timeout, resources=resources, depends_on=tuple(deps), pod=pod,
                    pod_own=pod_own, trigger_rule=trigger_rule, pool=pool, priority=priority, outputs=outputs,
                    templates=templates, skip_on_exit_code=skip_codes, retry_policy=retry_policy, uses=uses,
                    map_over=map_over, max_parallel=max_parallel, produces=produces,
                    wait_for=wait_for, depends_on_past=depends_on_past, artifacts=artifacts)


def _check_graph(tasks: Sequence[TaskSpec], at: Sequence[int] | None = None, unparsed: Collection[str] = (),
                 where: str = "tasks") -> None:
    """Unique ids, known dependencies, no cycle. ``at``: each task's position in the spec (default:
    its position in ``tasks``); ``unparsed``: ids of tasks that failed to parse (known, not checked);
    ``where``: the list they were written in (``tasks`` or ``on_exit``), for the paths."""
    places = list(at) if at is not None else list(range(len(tasks)))
    index: dict[str, int] = {}
    for i, task in zip(places, tasks, strict=True):
        if task.id in index:
            raise ValidationFailed(f"{where}[{i}].id",
                                   f"duplicate task id {task.id!r} (also {where}[{index[task.id]}])")
        index[task.id] = i
    for i, task in zip(places, tasks, strict=True):
        for j, dep in enumerate(task.depends_on):
            if dep not in index:
                if dep in unparsed:
                    continue
                raise ValidationFailed(f"{where}[{i}].depends_on[{j}]", f"unknown task {dep!r}")
            if dep == task.id:
                raise ValidationFailed(f"{where}[{i}].depends_on[{j}]", f"task {task.id!r} depends on itself")
    # Iterative DFS (a 10,000-task chain must not hit the recursion limit); on a back edge, report
    # the dependency that closes the cycle and the cycle itself.
    by_id = {t.id: t for t in tasks}
    color: dict[str, int] = {}  # 1 = on the stack, 2 = done
    for root in tasks:
        if color.get(root.id):
            continue
        stack: list[tuple[str, int]] = [(root.id, 0)]
        color[root.id] = 1
        while stack:
            node, pos = stack[-1]
            deps = by_id[node].depends_on
            if pos == len(deps):
                color[node] = 2
                stack.pop()
                continue
            stack[-1] = (node, pos + 1)
            dep = deps[pos]
            if dep not in by_id:
                continue  # a task that failed to parse: its edges are unknown
            if color.get(dep) == 1:
                names = [n for n, _ in stack]
                cycle = [*names[names.index(dep):], dep]
                raise ValidationFailed(f"{where}[{index[node]}].depends_on[{pos}]",
                                       "dependency cycle " + " -> ".join(reversed(cycle)))
            if not color.get(dep):
                color[dep] = 1
                stack.append((dep, 0))
