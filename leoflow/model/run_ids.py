"""How runs are named: deterministic ids for scheduled runs, readable ids for manual ones.

A scheduled run's id is a pure function of its logical date, so two leaders (or a leader that
crashed between creating a run and advancing the schedule) can never create the same run twice:
the second insert hits the unique ``(dag_id, run_id)``. Manual runs are named after the moment
they were triggered unless the caller chose an id.
"""

from __future__ import annotations

from datetime import UTC, datetime

from leoflow.model.limits import RUN_ID_RE, RUN_ID_RULE

__all__ = ["RUN_ID_RE", "RUN_ID_RULE", "manual_run_id", "scheduled_run_id"]  # the rule lives in limits


def scheduled_run_id(logical_date: datetime) -> str:
    """Deterministic id of the scheduled run for ``logical_date`` (two leaders agree on it)."""
    return f"scheduled__{logical_date.astimezone(UTC).isoformat()}"


def manual_run_id(now: datetime) -> str:
    return f"manual__{now.astimezone(UTC).isoformat()}"
