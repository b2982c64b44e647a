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

Task kinds: ``container`` (the default) needs ``image`` and ``command``; ``empty`` (issue 11,
Airflow's EmptyOperator) must have neither and is marked ``success`` by the scheduler as soon as
its upstreams succeed, without the executor.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from functools import cached_property
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from leoflow.errors import ValidationFailed

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,48}[a-z0-9])?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CRON_PRESETS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
#: Upper bounds that keep one spec from exhausting the scheduler (a run's task instances are
#: created in one statement; 10,000 is far beyond any hand-written DAG).
MAX_TASKS = 10_000
MAX_ACTIVE_RUNS_LIMIT = 100_000
MAX_RETRIES = 1_000
DEFAULT_MAX_ACTIVE_RUNS = 16
DEFAULT_RETRY_DELAY = 30.0

TaskKind = Literal["container", "empty"]

_DAG_FIELDS = {"dag_id", "description", "schedule", "timezone", "catchup", "start_date", "max_active_runs",
               "paused", "default_retries", "tasks"}
_TASK_FIELDS = {"id", "kind", "image", "command", "args", "env", "retries", "retry_delay_seconds",
                "max_retry_delay_seconds", "timeout_seconds", "resources", "depends_on"}


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

    @property
    def max_tries(self) -> int:
        return self.retries + 1

    def retry_delay(self, try_number: int, global_cap: float) -> float:
        """Seconds to wait after failed try ``try_number`` (1-based): doubled per retry, capped."""
        delay = self.retry_delay_seconds * (2.0 ** max(0, try_number - 1))
        cap = global_cap if self.max_retry_delay_seconds is None else min(global_cap, self.max_retry_delay_seconds)
        return min(delay, cap)

    def to_canonical(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind}
        if self.kind == "container":
            out.update(image=self.image, command=list(self.command), args=list(self.args),
                       env=dict(sorted(self.env.items())), resources=_plain(self.resources))
        out.update(retries=self.retries, retry_delay_seconds=_num(self.retry_delay_seconds),
                   depends_on=sorted(self.depends_on))
        if self.max_retry_delay_seconds is not None:
            out["max_retry_delay_seconds"] = _num(self.max_retry_delay_seconds)
        if self.timeout_seconds is not None:
            out["timeout_seconds"] = _num(self.timeout_seconds)
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

    @property
    def tz(self) -> tzinfo:
        return ZoneInfo(self.timezone)

    @cached_property
    def task_map(self) -> dict[str, TaskSpec]:
        return {t.id: t for t in self.tasks}

    def to_canonical(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "dag_id": self.dag_id,
            "schedule": self.schedule,
            "timezone": self.timezone,
            "catchup": self.catchup,
            "start_date": self.start_date.astimezone(UTC).isoformat() if self.start_date else None,
            "max_active_runs": self.max_active_runs,
            "paused": self.paused,
            "default_retries": self.default_retries,
            "tasks": [t.to_canonical() for t in self.tasks],
        }
        if self.description is not None:
            out["description"] = self.description
        return out

    def spec_hash(self) -> str:
        """SHA-256 of the canonical form without ``paused`` (a DAG flag, see the module doc)."""
        body = {k: v for k, v in self.to_canonical().items() if k != "paused"}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def schedule_fields(self) -> tuple[Any, ...]:
        """What the next scheduled run depends on; a change re-plans ``dags.next_run_at``."""
        return (self.schedule, self.timezone, self.catchup, self.start_date)


# --------------------------------------------------------------------------- cron

def cron_expression(schedule: str) -> str:
    return CRON_PRESETS.get(schedule, schedule)


def next_fire_at_or_after(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The first cron fire time ``>= moment``, evaluated in ``timezone``, returned in UTC."""
    local = moment.astimezone(ZoneInfo(timezone)) - timedelta(microseconds=1)
    fire: datetime = croniter(cron_expression(schedule), local).get_next(datetime)
    return fire.astimezone(UTC)


def next_fire_after(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The first cron fire time strictly after ``moment``, in UTC."""
    fire: datetime = croniter(cron_expression(schedule), moment.astimezone(ZoneInfo(timezone))).get_next(datetime)
    return fire.astimezone(UTC)


def last_fire_at_or_before(schedule: str, timezone: str, moment: datetime) -> datetime:
    """The latest cron fire time ``<= moment``, in UTC."""
    local = moment.astimezone(ZoneInfo(timezone)) + timedelta(microseconds=1)
    fire: datetime = croniter(cron_expression(schedule), local).get_prev(datetime)
    return fire.astimezone(UTC)


def first_scheduled_run(spec: DagSpec, now: datetime) -> datetime | None:
    """Where a (re)applied DAG's schedule starts: the first fire at/after ``start_date`` (or now).

    Without catchup the scheduler later skips ahead to the latest due fire time, so a DAG whose
    ``start_date`` lies in the past gets one run for the most recent slot, not a backlog.
    """
    if spec.schedule is None:
        return None
    return next_fire_at_or_after(spec.schedule, spec.timezone, spec.start_date or now)


# --------------------------------------------------------------------------- parsing

def parse_dag_spec(data: object) -> DagSpec:
    """Validate decoded YAML/JSON into a :class:`DagSpec`; raise ValidationFailed(path, problem)."""
    doc = _mapping(data, "")
    _no_unknown(doc, _DAG_FIELDS, "")
    dag_id = _name(_required(doc, "dag_id", ""), "dag_id")
    description = _opt_str(doc.get("description"), "description", max_len=2000)
    timezone = _timezone(doc.get("timezone", "UTC"), "timezone")
    schedule = _schedule(doc.get("schedule"), "schedule")
    catchup = _bool(doc.get("catchup", False), "catchup")
    start_date = _start_date(doc.get("start_date"), "start_date", timezone)
    max_active_runs = _int(doc.get("max_active_runs", DEFAULT_MAX_ACTIVE_RUNS), "max_active_runs",
                           minimum=1, maximum=MAX_ACTIVE_RUNS_LIMIT)
    paused = _bool(doc.get("paused", False), "paused")
    default_retries = _int(doc.get("default_retries", 0), "default_retries", minimum=0, maximum=MAX_RETRIES)
    raw_tasks = _required(doc, "tasks", "")
    if not isinstance(raw_tasks, list):
        raise ValidationFailed("tasks", f"must be a list of tasks, got {_type(raw_tasks)}")
    if not raw_tasks:
        raise ValidationFailed("tasks", "must contain at least one task")
    if len(raw_tasks) > MAX_TASKS:
        raise ValidationFailed("tasks", f"has {len(raw_tasks)} tasks; at most {MAX_TASKS} are allowed")
    tasks = tuple(_task(raw, f"tasks[{i}]", default_retries) for i, raw in enumerate(raw_tasks))
    _check_graph(tasks)
    return DagSpec(dag_id=dag_id, tasks=tasks, schedule=schedule, timezone=timezone, catchup=catchup,
                   start_date=start_date, max_active_runs=max_active_runs, paused=paused,
                   default_retries=default_retries, description=description)


def _task(raw: object, path: str, default_retries: int) -> TaskSpec:
    doc = _mapping(raw, path)
    _no_unknown(doc, _TASK_FIELDS, path)
    task_id = _name(_required(doc, "id", path), f"{path}.id")
    kind = doc.get("kind", "container")
    if kind not in ("container", "empty"):
        raise ValidationFailed(f"{path}.kind", f"must be 'container' or 'empty', got {kind!r}")
    image: str | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    resources: dict[str, Any] = {}
    if kind == "empty":
        for key in ("image", "command", "args", "env", "resources"):
            if doc.get(key) not in (None, [], {}):
                raise ValidationFailed(f"{path}.{key}", "is not allowed on an empty task (kind: empty)")
    else:
        image = _opt_str(doc.get("image"), f"{path}.image", max_len=500)
        if not image:
            raise ValidationFailed(f"{path}.image", "is required (or set kind: empty)")
        if doc.get("command") is None:
            raise ValidationFailed(f"{path}.command", "is required (or set kind: empty)")
        command = _str_list(doc.get("command"), f"{path}.command")
        if not command:
            raise ValidationFailed(f"{path}.command", "must not be empty")
        args = _str_list(doc.get("args", []), f"{path}.args")
        env = _env(doc.get("env", {}), f"{path}.env")
        resources = _resources(doc.get("resources", {}), f"{path}.resources")
    retries = _int(doc.get("retries", default_retries), f"{path}.retries", minimum=0, maximum=MAX_RETRIES)
    retry_delay = _number(doc.get("retry_delay_seconds", DEFAULT_RETRY_DELAY), f"{path}.retry_delay_seconds",
                          minimum=0.0)
    max_delay = doc.get("max_retry_delay_seconds")
    max_retry_delay = None if max_delay is None else _number(max_delay, f"{path}.max_retry_delay_seconds",
                                                             minimum=0.0)
    timeout_raw = doc.get("timeout_seconds")
    timeout = None if timeout_raw is None else _number(timeout_raw, f"{path}.timeout_seconds", minimum=0.0,
                                                       positive=True)
    deps_raw = doc.get("depends_on", [])
    if not isinstance(deps_raw, list):
        raise ValidationFailed(f"{path}.depends_on", f"must be a list of task ids, got {_type(deps_raw)}")
    deps: list[str] = []
    for j, dep in enumerate(deps_raw):
        if not isinstance(dep, str):
            raise ValidationFailed(f"{path}.depends_on[{j}]", f"must be a task id string, got {_type(dep)}")
        if dep in deps:
            raise ValidationFailed(f"{path}.depends_on[{j}]", f"duplicate dependency {dep!r}")
        deps.append(dep)
    return TaskSpec(id=task_id, kind=kind, image=image, command=command, args=args, env=env, retries=retries,
                    retry_delay_seconds=retry_delay, max_retry_delay_seconds=max_retry_delay,
                    timeout_seconds=timeout, resources=resources, depends_on=tuple(deps))


def _check_graph(tasks: Sequence[TaskSpec]) -> None:
    index: dict[str, int] = {}
    for i, task in enumerate(tasks):
        if task.id in index:
            raise ValidationFailed(f"tasks[{i}].id", f"duplicate task id {task.id!r} (also tasks[{index[task.id]}])")
        index[task.id] = i
    for i, task in enumerate(tasks):
        for j, dep in enumerate(task.depends_on):
            if dep not in index:
                raise ValidationFailed(f"tasks[{i}].depends_on[{j}]", f"unknown task {dep!r}")
            if dep == task.id:
                raise ValidationFailed(f"tasks[{i}].depends_on[{j}]", f"task {task.id!r} depends on itself")
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
            if color.get(dep) == 1:
                names = [n for n, _ in stack]
                cycle = [*names[names.index(dep):], dep]
                raise ValidationFailed(f"tasks[{index[node]}].depends_on[{pos}]",
                                       "dependency cycle " + " -> ".join(reversed(cycle)))
            if not color.get(dep):
                color[dep] = 1
                stack.append((dep, 0))


# --------------------------------------------------------------------------- field helpers

def _type(value: object) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _mapping(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        what = "a DAG spec" if not path else "a task"
        raise ValidationFailed(path, f"{what} must be a mapping, got {_type(value)}")
    for key in value:
        if not isinstance(key, str):
            raise ValidationFailed(path, f"field names must be strings, got {key!r}")
    return value


def _no_unknown(doc: Mapping[str, Any], allowed: set[str], path: str) -> None:
    for key in doc:
        if key not in allowed:
            raise ValidationFailed(f"{path}.{key}" if path else key,
                                   f"unknown field (allowed: {', '.join(sorted(allowed))})")


def _required(doc: Mapping[str, Any], key: str, path: str) -> Any:
    if doc.get(key) is None:
        raise ValidationFailed(f"{path}.{key}" if path else key, "is required")
    return doc[key]


def _name(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a string, got {_type(value)}")
    if not NAME_RE.match(value):
        raise ValidationFailed(path, f"{value!r} is not a valid name: use 1-50 of a-z, 0-9 and '-', "
                               "starting and ending with a letter or digit")
    return value


def _opt_str(value: object, path: str, *, max_len: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a string, got {_type(value)}")
    if len(value) > max_len:
        raise ValidationFailed(path, f"must be at most {max_len} characters")
    return value


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(path, f"must be true or false, got {_type(value)}")
    return value


def _int(value: object, path: str, *, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(path, f"must be an integer, got {_type(value)}")
    if not minimum <= value <= maximum:
        raise ValidationFailed(path, f"must be between {minimum} and {maximum}, got {value}")
    return value


def _number(value: object, path: str, *, minimum: float, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValidationFailed(path, f"must be a number, got {_type(value)}")
    if value in (float("inf"), float("-inf")) or value < minimum or (positive and value <= 0):
        raise ValidationFailed(path, f"must be {'greater than' if positive else 'at least'} {minimum:g}, got {value}")
    return float(value)


def _num(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _str_list(value: object, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValidationFailed(path, f"must be a list of strings, got {_type(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ValidationFailed(f"{path}[{i}]", f"must be a string, got {_type(item)}")
    return tuple(value)


def _env(value: object, path: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a mapping of names to strings, got {_type(value)}")
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise ValidationFailed(f"{path}.{key}", "is not a valid environment variable name")
        if not isinstance(item, str):
            raise ValidationFailed(f"{path}.{key}", f"must be a string (quote it in YAML), got {_type(item)}")
    return dict(value)


def _resources(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a mapping with requests/limits, got {_type(value)}")
    out: dict[str, Any] = {}
    for group, amounts in value.items():
        if group not in ("requests", "limits"):
            raise ValidationFailed(f"{path}.{group}", "unknown field (allowed: limits, requests)")
        if not isinstance(amounts, dict):
            raise ValidationFailed(f"{path}.{group}",
                                   f"must be a mapping of resource to quantity, got {_type(amounts)}")
        for name, qty in amounts.items():
            if not isinstance(name, str) or not re.match(r"^[a-zA-Z0-9][a-zA-Z0-9./_-]*$", name):
                raise ValidationFailed(f"{path}.{group}.{name}", "is not a valid resource name")
            if isinstance(qty, bool) or not isinstance(qty, str | int | float):
                raise ValidationFailed(f"{path}.{group}.{name}",
                                       f"must be a quantity like 100m or 128Mi, got {_type(qty)}")
            if isinstance(qty, str) and not re.match(r"^[0-9]+(\.[0-9]+)?([a-zA-Z]{1,2})?$", qty):
                raise ValidationFailed(f"{path}.{group}.{name}", f"{qty!r} is not a quantity like 100m or 128Mi")
        out[group] = {str(k): (str(v) if not isinstance(v, str) else v) for k, v in sorted(amounts.items())}
    return out


def _plain(value: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (_plain(v) if isinstance(v, Mapping) else v) for k, v in sorted(value.items())}


def _timezone(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationFailed(path, f"must be an IANA time zone name like UTC or Europe/Berlin, got {_type(value)}")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationFailed(path, f"unknown time zone {value!r}") from None
    return value


def _schedule(value: object, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a cron expression, a preset like @daily, or null; got {_type(value)}")
    if value.startswith("@"):
        if value not in CRON_PRESETS:
            raise ValidationFailed(path, f"unknown preset {value!r} (allowed: {', '.join(CRON_PRESETS)})")
        return value
    if len(value.split()) != 5:
        raise ValidationFailed(path, f"{value!r} is not a 5-field cron expression (minute hour day month weekday)")
    try:
        valid = croniter.is_valid(value)
    except Exception:  # croniter raises assorted types for odd input; any of them means invalid
        valid = False
    if not valid:
        raise ValidationFailed(path, f"{value!r} is not a valid cron expression")
    return " ".join(value.split())


def _start_date(value: object, path: str, timezone: str) -> datetime | None:
    """ISO 8601 string, YAML timestamp or date; a value without offset is in the DAG's time zone."""
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        except ValueError:
            raise ValidationFailed(path, f"{value!r} is not an ISO 8601 date/time like 2026-01-01T00:00:00Z") from None
    else:
        raise ValidationFailed(path, f"must be an ISO 8601 date/time, got {_type(value)}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(timezone))
    return moment.astimezone(UTC)
