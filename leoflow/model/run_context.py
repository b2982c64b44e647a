"""What a task try learns about its run: ``LEOFLOW_*`` variables in its environment.

A task triggered with ``leoflow runs trigger DAG --conf '{"day": "2026-11-21"}'`` (or the API's
``conf``) must be able to read that conf, and a task that writes somewhere wants a stable
identity (to name outputs, to make a retry idempotent). Every try therefore gets, on top of its
spec's ``env``:

============================  ==============================================================
``LEOFLOW_DAG_ID``            the DAG id
``LEOFLOW_RUN_ID``            the run id (``scheduled__<logical date>`` or the trigger's id)
``LEOFLOW_TASK_ID``           the task id
``LEOFLOW_TRY_NUMBER``        1 for the first try, 2 for the first retry, ...
``LEOFLOW_LOGICAL_DATE``      ISO 8601 in UTC: the schedule slot of a scheduled run, the
                              trigger time of a manual one
``LEOFLOW_DATA_INTERVAL_START`` ISO 8601 in UTC: the start of the span of data the run is for
                              (a scheduled run's previous fire time; a manual run's logical date)
``LEOFLOW_DATA_INTERVAL_END``   ISO 8601 in UTC: its end, the logical date
``LEOFLOW_RUN_CONF``          the run's conf as compact JSON (``{}`` when none was given)
``LEOFLOW_MAP_INDEX``         instances of a mapped task (``map_over``) only: which one, from 0
``LEOFLOW_RUN_STATE``         exit tasks (``on_exit``) only: what the run's other tasks decided,
                              ``success`` or ``failed``
``LEOFLOW_RUN_REASON``        exit tasks only: why, when ``failed`` (the failed task and its
                              reason, or ``run deadline exceeded``); empty on a success
``LEOFLOW_TRIGGERING_EVENTS`` dataset-triggered runs only: the run document's
                              ``triggering_events`` as JSON (per URI: events coalesced, first and
                              last event id and time, the last event's source); past 64 KiB,
                              ``{"truncated": true}`` (read the run document instead)
============================  ==============================================================

The names are a contract with task authors. DAG specs may not define ``LEOFLOW_*`` variables
themselves (validation refuses them), so a task can trust these values; Leoflow's own settings
(``LEOFLOW_DATABASE_URL``, tokens) are never passed to tasks (see the executors).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from leoflow.model.env_names import DATA_INTERVAL_END_ENV, DATA_INTERVAL_START_ENV
from leoflow.model.tries import TryKey

#: The most LEOFLOW_TRIGGERING_EVENTS carries; a longer list is replaced by ``{"truncated":true}``.
TRIGGERING_ENV_BYTES = 64 * 1024


@dataclass(frozen=True)
class RunContext:
    """The run-level facts every try of the run gets."""

    conf: Mapping[str, Any]
    #: Nullable in the schema (every run written today has one); None renders as an empty string.
    logical_date: datetime | None
    #: The run's body verdict (``dag_runs.body_state``/``body_reason``), set once every task but the
    #: exit tasks is final: only exit tasks run then, and only they get LEOFLOW_RUN_STATE/REASON.
    state: str | None = None
    reason: str | None = None
    #: ``dag_runs.triggering_events`` as stored JSON text; None for runs datasets did not trigger.
    triggering_events: str | None = None
    #: ``dag_runs.data_interval_start``/``_end``; None (a run written before they were stored): the logical date.
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None

    @cached_property
    def interval(self) -> tuple[str, str]:
        """``LEOFLOW_DATA_INTERVAL_START`` and ``_END``, rendered once per run."""
        logical, _ = self.rendered
        start, end = self.data_interval_start, self.data_interval_end
        return (start.astimezone(UTC).isoformat() if start else logical,
                end.astimezone(UTC).isoformat() if end else logical)

    @cached_property
    def rendered(self) -> tuple[str, str]:
        """``LEOFLOW_LOGICAL_DATE`` and ``LEOFLOW_RUN_CONF``, rendered once per run, not per try
        (a step queues hundreds of a run's tasks; rendering the conf for each was 9% of the
        leader's CPU under ``bench/scheduler.py``)."""
        logical = self.logical_date.astimezone(UTC).isoformat() if self.logical_date else ""
        return logical, json.dumps(self.conf, separators=(",", ":"), ensure_ascii=False, sort_keys=True)

    @cached_property
    def triggering_env(self) -> str:
        """LEOFLOW_TRIGGERING_EVENTS: compact, and within :data:`TRIGGERING_ENV_BYTES` (the kernel takes
        128 KiB per variable; 100 URIs of 1,000 characters would not fit)."""
        text = self.triggering_events or "null"
        try:
            text = json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
        except ValueError:
            return '{"truncated":true}'
        return text if len(text.encode()) <= TRIGGERING_ENV_BYTES else '{"truncated":true}'


def task_environment(key: TryKey, run: RunContext, spec_env: Mapping[str, str]) -> dict[str, str]:
    """The spec's env plus the run context (which wins; specs cannot define these names)."""
    logical, conf = run.rendered
    env = {
        **spec_env,
        "LEOFLOW_DAG_ID": key.dag_id,
        "LEOFLOW_RUN_ID": key.run_id,
        "LEOFLOW_TASK_ID": key.task_id,
        "LEOFLOW_TRY_NUMBER": str(key.try_number),
        "LEOFLOW_LOGICAL_DATE": logical,
        DATA_INTERVAL_START_ENV: run.interval[0],
        DATA_INTERVAL_END_ENV: run.interval[1],
        "LEOFLOW_RUN_CONF": conf,
    }
    if key.map_index >= 0:
        env["LEOFLOW_MAP_INDEX"] = str(key.map_index)
    if run.state is not None:
        env["LEOFLOW_RUN_STATE"] = run.state
        env["LEOFLOW_RUN_REASON"] = run.reason or ""
    if run.triggering_events is not None:
        env["LEOFLOW_TRIGGERING_EVENTS"] = run.triggering_env
    return env
