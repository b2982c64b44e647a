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


def map_states_sql(ti: str) -> str:
    """A mapped task's instances counted by state (a JSON object), NULL for a task that is not (or
    not yet) expanded: what the API shows on the task's one row (ADR 0014, decision 3)."""
    return (f"CASE WHEN {ti}.map_count IS NULL THEN NULL ELSE (SELECT json_object_agg(m.state, m.n) FROM ("
            f"SELECT i.state, count(*) AS n FROM task_instances i WHERE i.run_pk = {ti}.run_pk "
            f"AND i.task_id = {ti}.task_id GROUP BY i.state ORDER BY i.state) m) END")


def task_state_sql(ti: str) -> str:
    """The state a task shows on its one row: its own, or the one that sums up a mapped task's
    instances (the most active of them; once all ended: failed, cancelled, upstream_failed, all
    skipped, else success)."""
    return (f"CASE WHEN {ti}.map_count IS NULL THEN {ti}.state ELSE (SELECT CASE "
            "WHEN bool_or(m.state = 'running') THEN 'running' WHEN bool_or(m.state = 'queued') THEN 'queued' "
            "WHEN bool_or(m.state = 'up_for_retry') THEN 'up_for_retry' "
            "WHEN bool_or(m.state IN ('pending', 'cancelling')) THEN 'pending' "
            "WHEN bool_or(m.state = 'failed') THEN 'failed' WHEN bool_or(m.state = 'cancelled') THEN 'cancelled' "
            "WHEN bool_or(m.state = 'upstream_failed') THEN 'upstream_failed' "
            "WHEN bool_and(m.state = 'skipped') THEN 'skipped' ELSE 'success' END "
            f"FROM task_instances m WHERE m.run_pk = {ti}.run_pk AND m.task_id = {ti}.task_id) END")


def task_summary_json_sql(ti: str) -> str:
    """A task's row in a run document (``json_build_object``): one per task, a mapped task's summing
    up its instances (rows with ``map_index`` <= 0 only: -1 unmapped, 0 the first instance)."""
    return (f"json_build_object('task_id', {ti}.task_id, 'state', {task_state_sql(ti)}, "
            f"'try_number', {ti}.try_number, 'max_tries', {ti}.max_tries, 'queued_at', {ti}.queued_at, "
            f"'started_at', {ti}.started_at, 'ended_at', {ti}.ended_at, 'next_try_at', {ti}.next_try_at, "
            f"'reason', {ti}.reason, 'map_count', {ti}.map_count, 'map_states', {map_states_sql(ti)})")
