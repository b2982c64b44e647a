"""How runs are named: deterministic ids for scheduled runs, readable ids for manual ones.

A scheduled run's id is a pure function of its logical date, so two leaders (or a leader that
crashed between creating a run and advancing the schedule) can never create the same run twice:
the second insert hits the unique ``(dag_id, run_id)``. Manual runs are named after the moment
they were triggered unless the caller chose an id.

The ``scheduled__`` prefix belongs to the scheduler (and to backfills, which create the very runs
the scheduler would for their slots): a trigger naming its run ``scheduled__<date>`` would take
that slot's id, the scheduler's insert would then do nothing, the slot would never run with its own
logical date, and a backfill would count it as done (issue 44). :func:`is_reserved_run_id` is what
every path that accepts a run id from a user refuses.
"""

from __future__ import annotations

from datetime import UTC, datetime

from leoflow.model.limits import RUN_ID_RE, RUN_ID_RULE

# RUN_ID_RE and RUN_ID_RULE live in limits (the table of every limit); re-exported for callers here.
__all__ = ["RUN_ID_RE", "RUN_ID_RULE", "SCHEDULED_PREFIX", "is_reserved_run_id", "manual_run_id", "scheduled_run_id"]


#: The prefix of the ids the scheduler and backfills give the runs of a schedule's slots.
SCHEDULED_PREFIX = "scheduled__"


def scheduled_run_id(logical_date: datetime) -> str:
    """Deterministic id of the scheduled run for ``logical_date`` (two leaders agree on it)."""
    return f"{SCHEDULED_PREFIX}{logical_date.astimezone(UTC).isoformat()}"


def is_reserved_run_id(run_id: str) -> bool:
    """Whether ``run_id`` is one only the scheduler may give (a user's run would take a slot's id)."""
    return run_id.startswith(SCHEDULED_PREFIX)


def manual_run_id(now: datetime) -> str:
    return f"manual__{now.astimezone(UTC).isoformat()}"
