"""SQL fragments the stores share: state sets as list literals and predicates written once.

Each is the one spelling of a rule several statements (and the partial indexes of
:mod:`leoflow.db.tables`) must agree on, so a planner can match a statement's predicate to its
index. Inputs are Leoflow's own names (states, table aliases), never user input.
"""

from __future__ import annotations

from leoflow.model.states import (
    ACTIVE_RUN_STATES,
    ACTIVE_TASK_STATES,
    LIVE_TRY_STATES,
    SLOT_TASK_STATES,
    TERMINAL_RUN_STATES,
)


def sql_list(states: tuple[str, ...]) -> str:
    """``('a', 'b')``: a tuple of state names (never user input) as an SQL list literal."""
    return "(" + ", ".join(f"'{s}'" for s in states) + ")"


#: The state sets of leoflow.model.states as SQL list literals, for the stores' statements.
ACTIVE_TASKS_SQL = sql_list(ACTIVE_TASK_STATES)
SLOT_TASKS_SQL = sql_list(SLOT_TASK_STATES)
LIVE_TRIES_SQL = sql_list(LIVE_TRY_STATES)
ACTIVE_RUNS_SQL = sql_list(ACTIVE_RUN_STATES)
TERMINAL_RUNS_SQL = sql_list(TERMINAL_RUN_STATES)


def unobserved_runs_sql(alias: str = "") -> str:
    """Runs the outcome observer has not announced yet (the predicate of their partial index)."""
    p = f"{alias}." if alias else ""
    return f"{p}ended_at IS NOT NULL AND ({p}observed_at IS NULL OR {p}observed_at < {p}ended_at)"


def unobserved_tries_sql(alias: str = "") -> str:
    """Failed tries the outcome observer has not counted yet (the predicate of their partial index)."""
    p = f"{alias}." if alias else ""
    return f"{p}state = 'failed' AND {p}observed_at IS NULL"


def run_deadline_sql(run: str, version: str) -> str:
    """A run's ``deadline_at`` if it starts now (database time): its own ``run_timeout_seconds``,
    else its version's (read defensively: a stored spec cannot break the statement); NULL if none."""
    timeout = (f"CASE WHEN jsonb_typeof({version}.spec->'run_timeout_seconds') = 'number' "
               f"THEN least(greatest(({version}.spec->>'run_timeout_seconds')::float8, 0), 31622400) END")
    return f"now() + make_interval(secs => coalesce({run}.run_timeout_seconds, {timeout}))"
