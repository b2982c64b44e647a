"""Backfills: the user's writes (create, cancel), the reads, and the leader's steps.

Creating and cancelling are user writes made by the API on any replica (unfenced, like
triggering a run); the runs themselves are created by the leader's backfill service
(:mod:`leoflow.backfill.service`) in fenced transactions, one step per backfill:

1. lock the backfill row (``FOR UPDATE``: a concurrent cancel waits, and is seen after);
2. count its unfinished runs; take as many next slots as ``max_active_runs`` leaves room for;
3. insert those slots' scheduled runs (``ON CONFLICT DO NOTHING``: the unique run id and
   logical date make this idempotent, whoever created a run first); a slot whose run exists
   is re-run when it failed and ``rerun_failed`` is on, otherwise skipped;
4. move the cursor (``next_logical_date``), and mark the backfill ``completed`` when the cursor
   is past the end and none of its runs is unfinished.

Re-running a failed run (:func:`rerun_failed_runs`) puts it back to ``running`` at once (the
backfill's own ``max_active_runs`` bounds how many) with its failed, upstream-failed and
cancelled task instances ``pending`` again, each with a fresh retry budget and its count of
unfinished upstreams recomputed; try numbers keep counting, so pod names stay unique and the
history of earlier tries is kept. The run's outcome will be observed (and notified) again.

Failure semantics: everything here is compare-and-set on states; a step that lost its term
(``FencedOut``) writes nothing, and the next leader's step recomputes from the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.fragments import ACTIVE_RUNS_SQL, run_deadline_sql
from leoflow.db.stores.runs.lifecycle import cancel_runs
from leoflow.errors import Conflict, NotFound
from leoflow.model.run_ids import scheduled_run_id
from leoflow.model.spec.timetable import previous_fire

_COLUMNS = """b.id, b.dag_id, b.start_at, b.end_at, b.max_active_runs, b.rerun_failed, b.state,
    b.next_logical_date, b.slots_total, b.runs_created, b.runs_rerun, b.slots_skipped, b.created_by,
    b.created_at, b.updated_at, b.completed_at"""


@dataclass(frozen=True)
class NewBackfill:
    dag_id: str
    start_at: datetime
    end_at: datetime
    first_slot: datetime
    slots_total: int
    max_active_runs: int
    rerun_failed: bool
    created_by: str


async def create_backfill(conn: AsyncConnection, new: NewBackfill) -> int:
    """Insert a running backfill; Conflict when the DAG already has one running."""
    row = (await conn.execute(text("""
        INSERT INTO backfills (dag_id, start_at, end_at, max_active_runs, rerun_failed, state, next_logical_date,
                               slots_total, created_by)
        SELECT d.dag_id, :start_at, :end_at, :max_active_runs, :rerun_failed, 'running', :first_slot, :slots_total,
               :created_by
        FROM dags d WHERE d.dag_id = :dag_id AND NOT d.deleted
        ON CONFLICT (dag_id) WHERE state = 'running' DO NOTHING
        RETURNING id
    """), {"dag_id": new.dag_id, "start_at": new.start_at, "end_at": new.end_at,
           "max_active_runs": new.max_active_runs, "rerun_failed": new.rerun_failed, "first_slot": new.first_slot,
           "slots_total": new.slots_total, "created_by": new.created_by[:100]})).first()
    if row is not None:
        return int(row.id)
    running = (await conn.execute(text(
        "SELECT id FROM backfills WHERE dag_id = :dag_id AND state = 'running'"), {"dag_id": new.dag_id})).first()
    if running is None:
        raise NotFound(f"DAG {new.dag_id!r} not found")
    raise Conflict(f"DAG {new.dag_id!r} already has a running backfill ({running.id}); "
                   "wait for it or cancel it first")


async def cancel_backfill(conn: AsyncConnection, dag_id: str, backfill_id: int) -> None:
    """Stop creating runs and cancel the backfill's queued runs; running runs finish."""
    row = (await conn.execute(text(
        "SELECT state FROM backfills WHERE id = :id AND dag_id = :dag_id FOR UPDATE"),
        {"id": backfill_id, "dag_id": dag_id})).first()
    if row is None:
        raise NotFound(f"backfill {backfill_id} of DAG {dag_id!r} not found")
    if row.state != "running":
        raise Conflict(f"backfill {backfill_id} of DAG {dag_id!r} already ended ({row.state})")
    await conn.execute(text("""
        UPDATE backfills SET state = 'cancelled', completed_at = now(), updated_at = now(), next_logical_date = NULL
        WHERE id = :id
    """), {"id": backfill_id})
    queued = list((await conn.execute(text(
        "SELECT id FROM dag_runs WHERE backfill_id = :id AND state = 'queued' ORDER BY id FOR UPDATE"),
        {"id": backfill_id})).scalars())
    await cancel_runs(conn, queued, reason="backfill cancelled")


# --------------------------------------------------------------------------- reads

def _document(row: Any, counts: dict[str, int]) -> dict[str, Any]:
    doc = dict(row._mapping)
    doc["start"] = doc.pop("start_at")
    doc["end"] = doc.pop("end_at")
    doc["runs"] = counts
    return doc


async def _run_counts(conn: AsyncConnection, ids: Sequence[int]) -> dict[int, dict[str, int]]:
    rows = await conn.execute(text("""
        SELECT backfill_id, state, count(*) AS n FROM dag_runs
        WHERE backfill_id = ANY(CAST(:ids AS bigint[])) GROUP BY backfill_id, state
    """), {"ids": list(ids)})
    counts: dict[int, dict[str, int]] = {i: {} for i in ids}
    for r in rows:
        counts[int(r.backfill_id)][r.state] = int(r.n)
    return counts


async def get_backfill(conn: AsyncConnection, dag_id: str, backfill_id: int) -> dict[str, Any] | None:
    row = (await conn.execute(text(f"SELECT {_COLUMNS} FROM backfills b WHERE b.id = :id AND b.dag_id = :dag_id"),
                              {"id": backfill_id, "dag_id": dag_id})).first()
    if row is None:
        return None
    return _document(row, (await _run_counts(conn, [backfill_id]))[backfill_id])


async def list_backfills(conn: AsyncConnection, dag_id: str, *, before_id: int | None,
                         limit: int) -> list[dict[str, Any]]:
    """A DAG's backfills, newest first, up to ``limit + 1`` older than ``before_id``."""
    rows = (await conn.execute(text(f"""
        SELECT {_COLUMNS} FROM backfills b
        WHERE b.dag_id = :dag_id AND (CAST(:before AS bigint) IS NULL OR b.id < :before)
        ORDER BY b.id DESC LIMIT :limit
    """), {"dag_id": dag_id, "before": before_id, "limit": limit + 1})).all()
    counts = await _run_counts(conn, [int(r.id) for r in rows])
    return [_document(r, counts[int(r.id)]) for r in rows]


# --------------------------------------------------------------------------- the leader's steps

@dataclass(frozen=True)
class RunningBackfill:
    """A running backfill as the leader's step sees it (row locked), with what it needs."""

    id: int
    dag_id: str
    end_at: datetime
    max_active_runs: int
    rerun_failed: bool
    next_logical_date: datetime | None
    active_runs: int
    schedule: str | None
    timezone: str
    version_id: int | None


async def running_backfill_ids(conn: AsyncConnection) -> list[int]:
    return [int(i) for i in (await conn.execute(text(
        "SELECT id FROM backfills WHERE state = 'running' ORDER BY id"))).scalars()]


async def lock_running_backfill(conn: AsyncConnection, backfill_id: int) -> RunningBackfill | None:
    """The backfill, row-locked, if it is still running (None once cancelled or completed)."""
    row = (await conn.execute(text(f"""
        SELECT b.id, b.dag_id, b.end_at, b.max_active_runs, b.rerun_failed, b.next_logical_date,
               (SELECT count(*) FROM dag_runs r WHERE r.backfill_id = b.id AND r.state IN {ACTIVE_RUNS_SQL})
                   AS active_runs,
               d.schedule, coalesce(v.spec->>'timezone', 'UTC') AS timezone, d.current_version_id AS version_id
        FROM backfills b
        JOIN dags d ON d.dag_id = b.dag_id
        LEFT JOIN dag_versions v ON v.id = d.current_version_id
        WHERE b.id = :id AND b.state = 'running' AND NOT d.deleted
        FOR UPDATE OF b
    """), {"id": backfill_id})).first()
    return RunningBackfill(**row._mapping) if row else None


async def insert_backfill_runs(conn: AsyncConnection, backfill: RunningBackfill, slots: Sequence[datetime],
                               now: datetime, term: int) -> set[datetime]:
    """The scheduled runs of ``slots`` (queued, conf = the version's defaults); returns the slots inserted."""
    if not slots or backfill.version_id is None:
        return set()
    rows = await conn.execute(text("""
        INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, conf, backfill_id,
                              created_at, updated_at, term, data_interval_start, data_interval_end)
        SELECT :dag_id, x.run_id, v.id, 'scheduled', x.logical_date, 'queued', v.default_conf, :bid, :now, :now, :term,
               x.interval_start, x.logical_date
        FROM unnest(CAST(:run_ids AS text[]), CAST(:dates AS timestamptz[]), CAST(:starts AS timestamptz[]))
            AS x(run_id, logical_date, interval_start)
        JOIN dag_versions v ON v.id = :vid
        ON CONFLICT DO NOTHING
        RETURNING logical_date
    """), {"dag_id": backfill.dag_id, "run_ids": [scheduled_run_id(s) for s in slots], "dates": list(slots),
           # The data interval a scheduled run of the slot gets (leoflow.model.spec.timetable).
           "starts": [previous_fire(backfill.schedule or "", backfill.timezone, s) for s in slots],
           "vid": backfill.version_id, "bid": backfill.id, "now": now, "term": term})
    return {r.logical_date for r in rows}


async def existing_runs(conn: AsyncConnection, dag_id: str,
                        slots: Sequence[datetime]) -> dict[datetime, tuple[int, str]]:
    """``{slot: (run pk, state)}`` of the runs that already hold those slots (by scheduled run id)."""
    if not slots:
        return {}
    by_id = {scheduled_run_id(s): s for s in slots}
    rows = await conn.execute(text("""
        SELECT id, run_id, state FROM dag_runs WHERE dag_id = :dag_id AND run_id = ANY(CAST(:ids AS text[]))
    """), {"dag_id": dag_id, "ids": list(by_id)})
    return {by_id[r.run_id]: (int(r.id), str(r.state)) for r in rows}


async def rerun_failed_runs(conn: AsyncConnection, run_pks: Sequence[int], backfill_id: int, now: datetime,
                            term: int) -> list[int]:
    """failed → running, their unsuccessful task instances pending again (see the module doc)."""
    if not run_pks:
        return []
    rows = await conn.execute(text(f"""
        WITH reopened AS (
            UPDATE dag_runs r SET state = 'running', ended_at = NULL, reason = NULL, observed_at = NULL,
                   body_state = NULL, body_reason = NULL,  -- exit tasks run again after the rerun
                   backfill_id = :bid, updated_at = :now, term = :term, deadline_at = {run_deadline_sql("r", "v")}
            FROM dag_versions v
            WHERE r.id = ANY(CAST(:ids AS bigint[])) AND r.state = 'failed' AND v.id = r.dag_version_id
            RETURNING r.id, r.dag_version_id
        ), spec_tasks AS (
            SELECT o.id AS run_pk, t->>'id' AS task_id, coalesce((t->>'retries')::int, 0) AS retries,
                   coalesce(t->'depends_on', '[]'::jsonb) AS deps
            FROM reopened o
            JOIN dag_versions v ON v.id = o.dag_version_id
            CROSS JOIN LATERAL jsonb_array_elements(v.spec->'tasks') AS t
        ), reset AS (
            UPDATE task_instances ti
            SET state = 'pending', max_tries = ti.try_number + st.retries + 1,
                pending_upstreams = (SELECT count(*) FROM jsonb_array_elements_text(st.deps) AS d(task_id)
                                     JOIN task_instances up ON up.run_pk = ti.run_pk AND up.task_id = d.task_id
                                     WHERE up.state <> 'success'),
                -- every upstream is either kept (it succeeded) or reset with it (pending again)
                upstream_successes = (SELECT count(*) FROM jsonb_array_elements_text(st.deps) AS d(task_id)
                                      JOIN task_instances up ON up.run_pk = ti.run_pk AND up.task_id = d.task_id
                                      WHERE up.state = 'success'),
                upstream_failures = 0, upstream_skips = 0,
                queued_at = NULL, started_at = NULL, ended_at = NULL, timeout_at = NULL, next_try_at = NULL,
                retry_deadline_at = NULL, reason = NULL, updated_at = :now, term = :term
            FROM spec_tasks st
            WHERE ti.run_pk = st.run_pk AND ti.task_id = st.task_id
              AND ti.state IN ('failed', 'upstream_failed', 'skipped', 'cancelled')
            RETURNING ti.id
        )
        SELECT id FROM reopened
    """), {"ids": list(run_pks), "bid": backfill_id, "now": now, "term": term})
    return [int(r.id) for r in rows]


async def record_step(conn: AsyncConnection, backfill_id: int, *, next_logical_date: datetime | None,
                      created: int, rerun: int, skipped: int, completed: bool, now: datetime, term: int) -> None:
    await conn.execute(text("""
        UPDATE backfills SET next_logical_date = :next, runs_created = runs_created + :created,
               runs_rerun = runs_rerun + :rerun, slots_skipped = slots_skipped + :skipped,
               state = CASE WHEN :completed THEN 'completed' ELSE state END,
               completed_at = CASE WHEN :completed THEN :now ELSE completed_at END,
               updated_at = :now, term = :term
        WHERE id = :id AND state = 'running'
    """), {"id": backfill_id, "next": next_logical_date, "created": created, "rerun": rerun, "skipped": skipped,
           "completed": completed, "now": now, "term": term})

