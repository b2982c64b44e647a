"""Task instances as the leader's scheduling loop reads and moves them (``task_instances``).

The loop (:mod:`leoflow.scheduler.service`) decides; this module reads and writes. Functions
take an ``AsyncConnection`` inside a transaction the caller owns and has already fenced with
:func:`leoflow.db.connection.fencing.check_term_async`.

Rules every write here follows:

- **Compare-and-set.** A state change names the state (and try number) it expects; a row that
  moved meanwhile (a user cancelled the run, a duplicate report, a racing ex-leader) is simply
  not updated, and callers act only on the ``RETURNING`` rows. A lost race is a no-op.
- **Batched.** Each statement handles a whole batch through ``unnest`` of parallel arrays, so a
  tick costs a handful of round trips whatever the batch size.
- **Bounded.** Every read has a ``LIMIT`` (keyset by ``id`` where it pages), and the hot scans
  are served by partial indexes (``ix_task_instances_ready``, ``ix_task_tries_live``,
  ``ix_dag_runs_active``) that only hold work in flight, so the cost of a tick does not grow
  with the number of waiting or finished rows.

Task-try states written here: ``queued`` (created with the queue transition), ``running``,
``success``/``failed`` (reported), ``cancelling`` (the executor must kill it: the run was
cancelled or the try timed out) and ``cancelled`` (killed). Runs are started in :mod:`leoflow.db.stores.runs.lifecycle`;
how runs and tasks *end* (completion, ``upstream_failed``, failures the scheduler contained) lives in
:mod:`leoflow.db.stores`.

Values the scheduler reads from a DAG version's JSON spec are read so that no stored value can
make a statement fail for every row (a spec written by an older release, or by hand): scans cast
defensively, and specs and confs are returned as JSON *text* for the scheduler to decode per
entity, where one undecodable document fails only its own version or run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays
from leoflow.db.fragments import LIVE_TRIES_SQL
from leoflow.db.queued_tries import TRY_ID_SEQUENCE
from leoflow.model.tries import TryKey


@dataclass(slots=True)
class TaskInstanceRow:
    """A task instance as the scheduler reads it: its current state and try, and where it belongs.

    Not ``frozen``, like the other records a scheduling step builds by the hundred (rows read,
    transitions, tries queued, counts): a frozen dataclass sets each field through
    ``object.__setattr__``, 1.8 µs for twelve fields against 0.23 µs, and those constructors were
    a fifth of the leader's CPU under ``bench/scheduler.py``. Nothing mutates them; none is hashed.
    """

    id: int
    run_pk: int
    task_id: str
    state: str
    try_number: int
    max_tries: int
    dag_id: str
    run_id: str
    version_id: int


@dataclass(slots=True)
class ReadyTask(TaskInstanceRow):
    """A task instance that may be queued now (upstreams done, or its retry delay is over).

    The upstream counters let the queue check the task's trigger rule once more: a writer that
    reset task instances (a backfill's rerun, a clear) only has to leave the counters right.
    """

    upstream_successes: int = 0
    upstream_failures: int = 0
    upstream_skips: int = 0

    #: False: the row has no pool yet (an empty task, or written by an older release).
    classified: bool = True
    #: Which instance of a mapped task (-1: unmapped, or not expanded yet) and how many it has
    #: (None: not expanded yet) — ADR 0014, decision 3.
    map_index: int = -1
    map_count: int | None = None


@dataclass(slots=True)
class LiveTaskInstance(TaskInstanceRow):
    """A task instance locked for a status change."""

    started_at: datetime | None = None
    map_index: int = -1


@dataclass(slots=True)
class Transition:
    """One compare-and-set on ``task_instances``: from (expected, try_number) to new_state.

    Deadlines are durations (seconds from now): the database sets ``timeout_at`` /
    ``next_try_at`` on its own clock, so no leader's wall clock is compared with another's.
    """

    ti_id: int
    expected: str
    try_number: int
    new_state: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    timeout_after: float | None = None
    retry_after: float | None = None
    reason: str | None = None
    #: ``retry_policy.max_duration_seconds`` of the task (None: no budget): the first transition
    #: recording a start sets ``retry_deadline_at`` from it, on the database's clock.
    retry_budget: float | None = None


@dataclass(slots=True)
class TryChange:
    """What the executor reported about one try (folded per try)."""

    ti_id: int
    try_number: int
    state: str
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    reason: str | None
    executor_ref: str | None
    #: A success's checked outputs (leoflow.model.outputs), as JSON text, and their size as written;
    #: None for every other try.
    outputs: str | None = None
    outputs_bytes: int | None = None


# --------------------------------------------------------------------------- queueing

async def ready_task_instances(conn: AsyncConnection, limit: int) -> list[ReadyTask]:
    """Pending tasks with every upstream succeeded, and retries whose delay is over (database clock); oldest
    first (whatever their pool: the scheduler's isolation of a failing step bisects over them)."""
    rows = await conn.execute(text("""
        SELECT * FROM (
            (SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries,
                    r.dag_id, r.run_id, r.dag_version_id AS version_id, ti.upstream_successes,
                    ti.upstream_failures, ti.upstream_skips, ti.pool IS NOT NULL AS classified,
                    ti.map_index, ti.map_count
             FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
             WHERE ti.state = 'pending' AND ti.pending_upstreams = 0
             ORDER BY ti.id LIMIT :limit)
            UNION ALL
            (SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries,
                    r.dag_id, r.run_id, r.dag_version_id AS version_id, 0, 0, 0, ti.pool IS NOT NULL,
                    ti.map_index, ti.map_count
             FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
             WHERE ti.state = 'up_for_retry' AND ti.next_try_at <= now()
             ORDER BY ti.id LIMIT :limit)
        ) AS ready ORDER BY id LIMIT :limit
    """), {"limit": limit})
    return [ReadyTask(**r._mapping) for r in rows]


# --------------------------------------------------------------------------- status changes

async def lock_task_instances(conn: AsyncConnection, keys: Sequence[TryKey]) -> list[LiveTaskInstance]:
    """The task instances the keys refer to, row-locked in id order (no deadlock between batches)."""
    return await _task_instances_by_key(conn, keys, lock=True)


async def task_instances_by_key(conn: AsyncConnection, keys: Sequence[TryKey]) -> list[LiveTaskInstance]:
    """The task instances the keys refer to, read without a lock (a plan, not a change)."""
    return await _task_instances_by_key(conn, keys, lock=False)


async def _task_instances_by_key(conn: AsyncConnection, keys: Sequence[TryKey], *,
                                 lock: bool) -> list[LiveTaskInstance]:
    if not keys:
        return []
    rows = await conn.execute(text("""
        SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries, ti.started_at,
               r.dag_id, r.run_id, r.dag_version_id AS version_id, ti.map_index
        FROM (SELECT DISTINCT * FROM unnest(CAST(:dags AS text[]), CAST(:runs AS text[]), CAST(:tasks AS text[]),
                                            CAST(:maps AS int[]))
              AS k(dag_id, run_id, task_id, map_index)) AS k
        JOIN dag_runs r ON r.dag_id = k.dag_id AND r.run_id = k.run_id
        JOIN task_instances ti ON ti.run_pk = r.id AND ti.task_id = k.task_id AND ti.map_index = k.map_index
        ORDER BY ti.id
    """ + ("FOR UPDATE OF ti" if lock else "")),
        {"dags": [k.dag_id for k in keys], "runs": [k.run_id for k in keys], "tasks": [k.task_id for k in keys],
         "maps": [k.map_index for k in keys]})
    return [LiveTaskInstance(**r._mapping) for r in rows]


async def lock_task_instances_by_id(conn: AsyncConnection, ids: Sequence[int]) -> list[LiveTaskInstance]:
    rows = await conn.execute(text("""
        SELECT ti.id, ti.run_pk, ti.task_id, ti.state, ti.try_number, ti.max_tries, ti.started_at,
               r.dag_id, r.run_id, r.dag_version_id AS version_id, ti.map_index
        FROM task_instances ti JOIN dag_runs r ON r.id = ti.run_pk
        WHERE ti.id = ANY(CAST(:ids AS bigint[]))
        ORDER BY ti.id
        FOR UPDATE OF ti
    """), {"ids": list(ids)})
    return [LiveTaskInstance(**r._mapping) for r in rows]


#: When no retry may start any more (ADR 0014, decision 5): set by the first transition of a task
#: with a ``retry_policy.max_duration_seconds`` (``retry_budget``), counted back to its try's start
#: when the report says how long the try ran; kept until a clear resets it.
_RETRY_DEADLINE = """CASE WHEN ti.retry_deadline_at IS NULL AND c.retry_budget IS NOT NULL
             THEN now() + make_interval(secs => c.retry_budget) - coalesce(c.ended_at - c.started_at, interval '0')
             ELSE ti.retry_deadline_at END"""
#: A retry that would start at or after the deadline is refused: the try's failure is final.
_TOO_LATE = f"""(c.new_state = 'up_for_retry' AND {_RETRY_DEADLINE} <= now() + make_interval(secs => c.retry_after))"""
_TOO_LATE_REASON = " (not retried: retry_policy.max_duration_seconds has passed)"

_TRANSITIONS = f"""
    UPDATE task_instances ti
    SET state = CASE WHEN {_TOO_LATE} THEN 'failed' ELSE c.new_state END,
        started_at = coalesce(c.started_at, ti.started_at), ended_at = c.ended_at,
        timeout_at = now() + make_interval(secs => c.timeout_after),
        next_try_at = CASE WHEN {_TOO_LATE} THEN NULL ELSE now() + make_interval(secs => c.retry_after) END,
        reason = CASE WHEN {_TOO_LATE} THEN left(coalesce(c.reason, 'failed') || '{_TOO_LATE_REASON}', 500)
                      ELSE c.reason END,
        retry_deadline_at = {_RETRY_DEADLINE},
        updated_at = :now, term = :term
    FROM unnest(CAST(:ids AS bigint[]), CAST(:expected AS text[]), CAST(:tries AS int[]),
                CAST(:states AS text[]), CAST(:started AS timestamptz[]), CAST(:ended AS timestamptz[]),
                CAST(:timeouts AS float8[]), CAST(:next_tries AS float8[]),
                CAST(:reasons AS text[]), CAST(:budgets AS float8[]))
         AS c(id, expected, try_number, new_state, started_at, ended_at, timeout_after, retry_after, reason,
              retry_budget)
    WHERE ti.id = c.id AND ti.state = c.expected AND ti.try_number = c.try_number
    RETURNING ti.id, ti.state
"""

#: The reported tries, found by the unique (task_instance_id, try_number) index — or written, when
#: the report is the first word on a queued try whose row is implicit (ADR 0013,
#: :mod:`leoflow.db.queued_tries`): with the id, term and queue time its task instance keeps. Only a
#: live try changes: the conflict clause's condition, as a finished try is never reopened (so a
#: success's outputs, written here with it, are never rewritten by a re-report).
#:
#: Two forms: with outputs (when a change in the batch carries some) and without, so tries of
#: tasks that declare none send no extra arrays and the statement is the one it always was.
_TRY_CHANGES_TEMPLATE = f"""
    INSERT INTO task_tries AS tt (id, task_instance_id, try_number, state, term, queued_at, started_at, ended_at,
                                  exit_code, reason, executor_ref{{columns}})
    SELECT CASE WHEN ti.try_number = c.try_number THEN coalesce(ti.queued_try_id, nextval({TRY_ID_SEQUENCE}))
                ELSE nextval({TRY_ID_SEQUENCE}) END,
           c.ti_id, c.try_number, c.state, ti.term, coalesce(ti.queued_at, now()), c.started_at, c.ended_at,
           c.exit_code, c.reason, c.executor_ref{{values}}
    FROM unnest(CAST(:t_ids AS bigint[]), CAST(:t_tries AS int[]), CAST(:t_states AS text[]),
                CAST(:t_started AS timestamptz[]), CAST(:t_ended AS timestamptz[]), CAST(:t_codes AS int[]),
                CAST(:t_reasons AS text[]), CAST(:t_refs AS text[]){{arrays}})
         AS c(ti_id, try_number, state, started_at, ended_at, exit_code, reason, executor_ref{{names}})
    JOIN task_instances ti ON ti.id = c.ti_id
    -- a new row only for the task instance's implicit try; a report about any other try changes
    -- its row if it has one, and writes nothing if not (a stray try number is no try)
    WHERE (ti.try_number = c.try_number AND ti.state = 'queued' AND ti.queued_try_id IS NOT NULL)
       OR EXISTS (SELECT 1 FROM task_tries x WHERE x.task_instance_id = c.ti_id AND x.try_number = c.try_number)
    ON CONFLICT (task_instance_id, try_number) DO UPDATE
    SET state = CASE WHEN tt.state = 'cancelling' AND excluded.state = 'running' THEN 'cancelling'
                     -- the kill's own report may arrive before the scheduler marks the try killed
                     WHEN tt.state = 'cancelling' AND excluded.state = 'failed' THEN 'cancelled'
                     ELSE excluded.state END,
        started_at = coalesce(tt.started_at, excluded.started_at),
        ended_at = coalesce(tt.ended_at, excluded.ended_at),
        exit_code = coalesce(excluded.exit_code, tt.exit_code),
        reason = coalesce(tt.reason, excluded.reason),
        executor_ref = coalesce(tt.executor_ref, excluded.executor_ref){{updates}}
    WHERE tt.state IN {LIVE_TRIES_SQL}
"""
_TRY_CHANGES = _TRY_CHANGES_TEMPLATE.format(columns="", values="", arrays="", names="", updates="")
_TRY_CHANGES_WITH_OUTPUTS = _TRY_CHANGES_TEMPLATE.format(
    columns=", outputs, outputs_bytes", values=", CAST(c.outputs AS jsonb), c.outputs_bytes",
    arrays=", CAST(:t_outputs AS text[]), CAST(:t_output_bytes AS int[])", names=", outputs, outputs_bytes",
    updates=""",
        outputs = CASE WHEN excluded.state = 'success' THEN excluded.outputs END,
        outputs_bytes = CASE WHEN excluded.state = 'success' THEN excluded.outputs_bytes END""")


def _transition_params(transitions: Sequence[Transition], now: datetime, term: int,
                       iso: dict[int, str]) -> dict[str, Any]:
    return {
        "ids": arrays.ints(t.ti_id for t in transitions), "expected": arrays.texts(t.expected for t in transitions),
        "tries": arrays.ints(t.try_number for t in transitions),
        "states": arrays.texts(t.new_state for t in transitions),
        "started": arrays.timestamps((t.started_at for t in transitions), iso),
        "ended": arrays.timestamps((t.ended_at for t in transitions), iso),
        "timeouts": arrays.floats(t.timeout_after for t in transitions),
        "next_tries": arrays.floats(t.retry_after for t in transitions),
        "reasons": arrays.texts(t.reason for t in transitions), "now": now, "term": term,
        "budgets": arrays.floats(t.retry_budget for t in transitions),
    }


def _try_params(changes: Sequence[TryChange], iso: dict[int, str]) -> dict[str, Any]:
    return {
        "t_ids": arrays.ints(c.ti_id for c in changes), "t_tries": arrays.ints(c.try_number for c in changes),
        "t_states": arrays.texts(c.state for c in changes),
        "t_started": arrays.timestamps((c.started_at for c in changes), iso),
        "t_ended": arrays.timestamps((c.ended_at for c in changes), iso),
        "t_codes": arrays.optional_ints(c.exit_code for c in changes),
        "t_reasons": arrays.texts(c.reason for c in changes), "t_refs": arrays.texts(c.executor_ref for c in changes),
    }


def _output_params(changes: Sequence[TryChange]) -> dict[str, Any]:
    return {"t_outputs": arrays.texts(c.outputs for c in changes),
            "t_output_bytes": arrays.optional_ints(c.outputs_bytes for c in changes)}


#: Built once: ``text()`` finds a statement's bind parameters with a regular expression on every
#: call (0.5 ms for the combined one), and every step that applies reports runs one of these.
_TRY_CHANGES_SQL = text(_TRY_CHANGES)
_TRANSITIONS_SQL = text(_TRANSITIONS)
_TRIES_AND_TRANSITIONS_SQL = text(
    f"WITH tries AS ({_TRY_CHANGES} RETURNING tt.id), changed AS ({_TRANSITIONS}) SELECT id, state FROM changed")
_TRY_CHANGES_WITH_OUTPUTS_SQL = text(_TRY_CHANGES_WITH_OUTPUTS)
_TRIES_WITH_OUTPUTS_AND_TRANSITIONS_SQL = text(
    f"WITH tries AS ({_TRY_CHANGES_WITH_OUTPUTS} RETURNING tt.id), changed AS ({_TRANSITIONS}) "
    "SELECT id, state FROM changed")


async def apply_transitions(conn: AsyncConnection, transitions: Sequence[Transition], now: datetime,
                            term: int, *, try_changes: Sequence[TryChange] = ()) -> set[int]:
    """Batched compare-and-set on task instances (plus, in the same statement, reported try facts).

    Returns the task instance ids actually changed. Try facts only move forward: a finished try is
    never reopened. A success's outputs are written by the statement that records it.

    An ``up_for_retry`` whose retry would start after the task's ``retry_deadline_at`` (the
    database's clock) is written ``failed`` instead, and its :class:`Transition` is changed to say
    so (state, no retry, the reason), so the caller carries the failure downstream.
    """
    if not transitions and not try_changes:
        return set()
    iso: dict[int, str] = {}  # a report's time is in up to four arrays (arrays.timestamps)
    tries = _try_params(try_changes, iso)
    with_outputs = any(c.outputs is not None for c in try_changes)
    if with_outputs:
        tries.update(_output_params(try_changes))
    if not transitions:
        await conn.execute(_TRY_CHANGES_WITH_OUTPUTS_SQL if with_outputs else _TRY_CHANGES_SQL, tries)
        return set()
    if not try_changes:
        rows = await conn.execute(_TRANSITIONS_SQL, _transition_params(transitions, now, term, iso))
    else:
        statement = _TRIES_WITH_OUTPUTS_AND_TRANSITIONS_SQL if with_outputs else _TRIES_AND_TRANSITIONS_SQL
        rows = await conn.execute(statement, {**_transition_params(transitions, now, term, iso), **tries})
    states = {int(r.id): r.state for r in rows}
    for t in transitions:
        if states.get(t.ti_id, t.new_state) != t.new_state:  # a retry past the deadline: failed
            t.new_state, t.retry_after = states[t.ti_id], None
            t.reason = f"{t.reason or 'failed'}{_TOO_LATE_REASON}"[:500]
    return set(states)


async def timed_out_task_instances(conn: AsyncConnection, limit: int) -> list[int]:
    """Running tasks past their ``timeout_at`` — on the database's clock, which set it."""
    rows = await conn.execute(text("""
        SELECT id FROM task_instances WHERE state = 'running' AND timeout_at <= now() ORDER BY id LIMIT :limit
    """), {"limit": limit})
    return [int(r.id) for r in rows]
