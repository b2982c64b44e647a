"""What a trigger request may ask for: a run id of the caller's choosing and a ``conf``.

``POST /api/v2/dags/{dag_id}/runs`` (``leoflow runs trigger``) sends ``{"run_id"?, "conf"?,
"run_timeout_seconds"?, "logical_date"?}`` (the deadline within :data:`leoflow.model.limits.RUN_TIMEOUT`;
the logical date an ISO 8601 time with an offset within :data:`leoflow.model.limits.LOGICAL_DATE` —
without an offset it would mean a different moment on every replica's clock setting).
The run id follows :data:`leoflow.model.limits.RUN_ID` (it becomes a URL segment and
``LEOFLOW_RUN_ID``) and may not start with ``scheduled__``, the scheduler's prefix for a slot's
run (:mod:`leoflow.model.run_ids`: a trigger must never take a slot); the conf must be plain
JSON within :data:`leoflow.model.limits.CONF`, because every try of the run receives it as one
environment variable (``LEOFLOW_RUN_CONF``), the scheduler reads it back from ``jsonb``, and
nothing downstream should have to recurse through a value nested thousands deep.

Every problem is a :class:`~leoflow.errors.ValidationFailed` naming the field (``run_id``,
``conf``, ``conf.a.b``); nothing else escapes :func:`parse_run_request`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model.bounds import check_moment, check_size, shown, shown_repr, type_name, within
from leoflow.model.limits import CONF, LOGICAL_DATE, RUN_ID, RUN_TIMEOUT
from leoflow.model.run_ids import SCHEDULED_PREFIX, is_reserved_run_id

_FIELDS = ("run_id", "conf", "run_timeout_seconds", "logical_date")


@dataclass(frozen=True)
class RunRequest:
    """A validated trigger request; ``run_id`` None means "name it after the trigger time"."""

    run_id: str | None = None
    conf: dict[str, Any] = field(default_factory=dict)
    #: This run's deadline in seconds from its start (None: the DAG's ``run_timeout_seconds``).
    run_timeout_seconds: float | None = None
    #: The moment the run is for (its data interval starts and ends there); None: the trigger time.
    logical_date: datetime | None = None


def check_logical_date(value: object, path: str = "logical_date") -> datetime:
    """An ISO 8601 date-time with an offset (``Z`` or ``+02:00``) within :data:`LOGICAL_DATE`, in UTC."""
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be an ISO 8601 date-time string like 2026-01-01T00:00:00Z, "
                               f"got {type_name(value)}")
    try:
        moment = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith("Z") else value) \
            if len(value) <= 64 else None
    except ValueError:
        moment = None
    if moment is None:
        raise ValidationFailed(path, f"{shown(value)} is not an ISO 8601 date-time like 2026-01-01T00:00:00Z")
    if moment.tzinfo is None:
        raise ValidationFailed(path, f"{shown(value)} has no offset: add Z (UTC) or one like +02:00")
    try:
        in_utc = moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:00-05:00 is in the year 10000 in UTC
        raise ValidationFailed(path, f"must be {LOGICAL_DATE.rule}, got {value}") from None
    return check_moment(in_utc, path, LOGICAL_DATE)


def check_conf(value: object, path: str = "conf") -> dict[str, Any]:
    """A run's conf: null means ``{}``; otherwise a JSON object within :data:`CONF`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be an object, got {type_name(value)}")
    check_size(value, path, CONF, plain=True)
    return value


def check_run_id(value: object, path: str = "run_id") -> str:
    """A run id a user chose (a trigger's): within :data:`RUN_ID`, and not one the scheduler gives."""
    if not isinstance(value, str) or not RUN_ID.matches(value):
        raise ValidationFailed(path, f"must be {RUN_ID.rule}")
    if is_reserved_run_id(value):
        raise ValidationFailed(path, f"must not start with {SCHEDULED_PREFIX!r}: that prefix names the runs the "
                               "scheduler and backfills create for a schedule's slots")
    return value


def parse_run_request(body: object) -> RunRequest:
    """Validate a decoded trigger body (None for an empty body)."""
    if body is None:
        return RunRequest()
    if not isinstance(body, dict):
        raise ValidationFailed("body", f"must be an object, got {type_name(body)}")
    for key in body:
        if not isinstance(key, str):  # a decoder's number key (YAML); str() of 10^5000 would raise
            raise ValidationFailed("body", f"field names must be strings, got {shown_repr(key)}")
    unknown = sorted(k for k in body if k not in _FIELDS)
    if unknown:
        name = unknown[0] if len(unknown[0]) <= 60 else unknown[0][:60] + "..."
        raise ValidationFailed(name, "unknown field (expected run_id, conf, run_timeout_seconds, logical_date)")
    run_id = body.get("run_id")
    timeout = body.get("run_timeout_seconds")
    logical = body.get("logical_date")
    return RunRequest(run_id=None if run_id is None else check_run_id(run_id), conf=check_conf(body.get("conf")),
                      run_timeout_seconds=None if timeout is None else float(within(timeout, "run_timeout_seconds",
                                                                                    RUN_TIMEOUT)),
                      logical_date=None if logical is None else check_logical_date(logical))
