"""The outcome observer's reads and writes: endings not yet announced, and what they become.

The leader's observer (:mod:`leoflow.notify.observer`) reads a batch of run endings and failed
tries that have not been observed yet — the partial indexes ``ix_dag_runs_unobserved`` and
``ix_task_tries_unobserved_failures`` hold exactly those — and, in the same fenced
transaction, marks them observed, adds their notifications to the outbox and their counts to
the per-DAG metric tables. Because the mark is a compare-and-set on the rows it read (locked
``FOR UPDATE SKIP LOCKED``, so the scheduler and the backfill service are never waited for),
every ending is counted and notified exactly once per term, and a crash before the commit
only means the next leader does it.

The notify rules come from the DAG's *current* version (fixing a webhook URL applies to runs
that are already going); the payload facts come from the run and its first failed task.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays
from leoflow.db.fragments import unobserved_runs_sql, unobserved_tries_sql


@dataclass(frozen=True)
class RunEnding:
    run_pk: int
    dag_id: str
    run_id: str
    state: str
    reason: str | None
    logical_date: datetime | None
    ended_at: datetime
    duration_seconds: float
    #: The DAG's current ``notify`` rules as stored (None: absent, the cluster default applies).
    notify: list[dict[str, Any]] | None
    failed_task_id: str | None
    failed_try_number: int | None
    failed_reason: str | None


@dataclass(frozen=True)
class FailedTry:
    try_pk: int
    run_pk: int
    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    reason: str | None
    exit_code: int | None
    logical_date: datetime | None
    #: True when the task instance went on (to another try), False when this was its last.
    retried: bool
    notify: list[dict[str, Any]] | None


@dataclass(frozen=True)
class OutboxRow:
    run_pk: int
    dag_id: str
    run_id: str
    task_id: str | None
    try_number: int | None
    event: str
    target: str
    webhook: dict[str, Any]
    payload: dict[str, Any]


@dataclass(frozen=True)
class RunStatsDelta:
    dag_id: str
    state: str
    runs: int
    duration_sum: float
    bins: list[int]
    last_ended_at: datetime


async def lock_run_endings(conn: AsyncConnection, limit: int) -> list[RunEnding]:
    """Up to ``limit`` unobserved run endings, oldest first, row-locked (locked ones skipped)."""
    rows = await conn.execute(text(f"""
        SELECT r.id AS run_pk, r.dag_id, r.run_id, r.state, r.reason, r.logical_date, r.ended_at,
               greatest(extract(epoch FROM r.ended_at - coalesce(r.started_at, r.created_at)), 0)::float8
                   AS duration_seconds,
               v.spec->'notify' AS notify,
               f.task_id AS failed_task_id, f.try_number AS failed_try_number, f.reason AS failed_reason
        FROM dag_runs r
        JOIN dags d ON d.dag_id = r.dag_id
        LEFT JOIN dag_versions v ON v.id = d.current_version_id
        LEFT JOIN LATERAL (
            SELECT ti.task_id, ti.try_number, ti.reason FROM task_instances ti
            WHERE ti.run_pk = r.id AND ti.state = 'failed'
            ORDER BY ti.ended_at NULLS LAST, ti.id LIMIT 1
        ) f ON r.state = 'failed'
        WHERE {unobserved_runs_sql("r")}
        ORDER BY r.id
        LIMIT :limit
        FOR UPDATE OF r SKIP LOCKED
    """), {"limit": limit})
    return [RunEnding(**r._mapping) for r in rows]


async def lock_failed_tries(conn: AsyncConnection, limit: int) -> list[FailedTry]:
    """Up to ``limit`` unobserved failed tries, oldest first, row-locked (locked ones skipped)."""
    rows = await conn.execute(text(f"""
        SELECT tt.id AS try_pk, r.id AS run_pk, r.dag_id, r.run_id, ti.task_id, tt.try_number, tt.reason,
               tt.exit_code, r.logical_date,
               (ti.try_number > tt.try_number OR ti.state = 'up_for_retry') AS retried,
               v.spec->'notify' AS notify
        FROM task_tries tt
        JOIN task_instances ti ON ti.id = tt.task_instance_id
        JOIN dag_runs r ON r.id = ti.run_pk
        JOIN dags d ON d.dag_id = r.dag_id
        LEFT JOIN dag_versions v ON v.id = d.current_version_id
        WHERE {unobserved_tries_sql("tt")}
        ORDER BY tt.id
        LIMIT :limit
        FOR UPDATE OF tt SKIP LOCKED
    """), {"limit": limit})
    return [FailedTry(**r._mapping) for r in rows]


async def mark_runs_observed(conn: AsyncConnection, run_pks: Sequence[int]) -> None:
    if run_pks:
        await conn.execute(text("UPDATE dag_runs SET observed_at = ended_at WHERE id = ANY(CAST(:ids AS bigint[]))"),
                           {"ids": list(run_pks)})


async def mark_tries_observed(conn: AsyncConnection, try_pks: Sequence[int], now: datetime) -> None:
    if try_pks:
        await conn.execute(text("UPDATE task_tries SET observed_at = :now WHERE id = ANY(CAST(:ids AS bigint[]))"),
                           {"ids": list(try_pks), "now": now})


async def add_run_stats(conn: AsyncConnection, deltas: Sequence[RunStatsDelta]) -> None:
    """Add run counts, duration sums and histogram bins per (DAG, state), in one statement.

    One row per delta used to be one statement each: 10,000 DAGs' runs ending at one boundary made
    10,000 round trips here (~1 s of database time and as much of the leader's CPU, beside the
    scheduler). The deltas are unique per (DAG, state) (:func:`~leoflow.notify.observer.run_stats`
    sums them), as one ``ON CONFLICT DO UPDATE`` needs, and go in sorted, so two writers lock rows
    in the same order.
    """
    if not deltas:
        return
    ordered = sorted(deltas, key=lambda d: (d.dag_id, d.state))
    await conn.execute(text("""
        INSERT INTO dag_run_stats AS s (dag_id, state, runs, duration_sum, bins, last_ended_at)
        SELECT x.dag_id, x.state, x.runs, x.duration_sum, CAST(x.bins AS bigint[]), x.last_ended_at
        FROM unnest(CAST(:dag_ids AS text[]), CAST(:states AS text[]), CAST(:runs AS bigint[]),
                    CAST(:sums AS float8[]), CAST(:bins AS text[]), CAST(:ended AS timestamptz[])) WITH ORDINALITY
            AS x(dag_id, state, runs, duration_sum, bins, last_ended_at, n)
        ORDER BY x.n
        ON CONFLICT (dag_id, state) DO UPDATE SET
            runs = s.runs + excluded.runs,
            duration_sum = s.duration_sum + excluded.duration_sum,
            bins = ARRAY(SELECT coalesce(a, 0) + coalesce(b, 0)
                         FROM unnest(s.bins, excluded.bins) WITH ORDINALITY AS t(a, b, i) ORDER BY i),
            last_ended_at = greatest(s.last_ended_at, excluded.last_ended_at)
    """), {"dag_ids": arrays.texts(d.dag_id for d in ordered), "states": arrays.texts(d.state for d in ordered),
           "runs": arrays.ints(d.runs for d in ordered), "sums": arrays.floats(d.duration_sum for d in ordered),
           "bins": arrays.texts(arrays.ints(d.bins) for d in ordered),
           "ended": arrays.timestamps(d.last_ended_at for d in ordered)})


async def add_task_failures(conn: AsyncConnection, counts: dict[tuple[str, str], int]) -> None:
    if not counts:
        return
    await conn.execute(text("""
        INSERT INTO task_failure_counts AS c (dag_id, task_id, failures) VALUES (:dag_id, :task_id, :n)
        ON CONFLICT (dag_id, task_id) DO UPDATE SET failures = c.failures + excluded.failures
    """), [{"dag_id": d, "task_id": t, "n": n} for (d, t), n in sorted(counts.items())])


async def add_to_outbox(conn: AsyncConnection, rows: Sequence[OutboxRow], now: datetime,
                        give_up_after: timedelta) -> None:
    if not rows:
        return
    await conn.execute(text("""
        INSERT INTO notifications (run_pk, dag_id, run_id, task_id, try_number, event, target, webhook, payload,
                                   next_attempt_at, created_at, give_up_at)
        VALUES (:run_pk, :dag_id, :run_id, :task_id, :try_number, :event, :target, CAST(:webhook AS jsonb),
                CAST(:payload AS jsonb), :now, :now, :give_up_at)
    """), [{"run_pk": r.run_pk, "dag_id": r.dag_id, "run_id": r.run_id, "task_id": r.task_id,
            "try_number": r.try_number, "event": r.event, "target": r.target, "webhook": json.dumps(r.webhook),
            "payload": json.dumps(r.payload), "now": now, "give_up_at": now + give_up_after} for r in rows])
