"""How runs are named: deterministic ids for scheduled runs, readable ids for manual ones.

A scheduled run's id is a pure function of its logical date, so two leaders (or a leader that
crashed between creating a run and advancing the schedule) can never create the same run twice:
the second insert hits the unique ``(dag_id, run_id)``. Manual runs are named after the moment
they were triggered unless the caller chose an id.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

#: Run ids a caller may choose, and what the scheduler itself produces.
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+~-]{0,249}$")
RUN_ID_RULE = "must be 1-250 characters of letters, digits and _.:+~- starting with a letter or digit"


def scheduled_run_id(logical_date: datetime) -> str:
    """Deterministic id of the scheduled run for ``logical_date`` (two leaders agree on it)."""
    return f"scheduled__{logical_date.astimezone(UTC).isoformat()}"


def manual_run_id(now: datetime) -> str:
    return f"manual__{now.astimezone(UTC).isoformat()}"
