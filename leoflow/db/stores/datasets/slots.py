"""Pending slots: the cron slot of a ``combine: and`` schedule waiting for the DAG's datasets.

A DAG whose schedule is ``{cron, datasets, combine: and}`` keeps at most one slot in
``dags.pending_slot_at``/``pending_slot_start`` (its logical date and data interval start). Both
writes are the leader's, in its fenced step:

1. :func:`set_slots` — in the step that moves ``next_run_at`` past the slot (after the
   compare-and-set of :func:`~leoflow.db.stores.runs.lifecycle.create_due_runs`, and only for the
   DAGs it moved): the slot becomes the pending one, replacing an older slot still waiting;
2. :func:`create_slot_runs` — in the dataset part of a step, once the condition is met by the
   DAG's queue rows (locked by :func:`~leoflow.db.stores.datasets.triggers.lock_queues`): the slot
   is cleared by compare-and-set on its logical date, the scheduled run of the slot inserted (its
   run id is the slot's, so a redone step conflicts instead of running it twice) and the queue rows
   it consumed deleted — all in one statement, each part only if the one before it happened.

Exactly once across leader changes: both writes are in fenced transactions, and each is a
compare-and-set on what the other wrote (``next_run_at`` for 1, ``pending_slot_at`` for 2), so a
leader killed at any point leaves either the slot pending or its run created, never both, never two.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays
from leoflow.db.stores.datasets.triggers import QueuedUri


@dataclass(frozen=True)
class PendingSlot:
    """A DAG's pending slot with the version's ``starting_deadline_seconds`` (stored text, or None)."""

    dag_id: str
    logical_date: datetime | None
    interval_start: datetime | None
    deadline: str | None


@dataclass(frozen=True)
class SlotRun:
    """The run of a pending slot: its DAG and version, run id, slot and the queue rows it consumes."""

    dag_id: str
    version_id: int
    run_id: str
    logical_date: datetime
    interval_start: datetime
    consumed: Sequence[QueuedUri]


_SET = text("""
    UPDATE dags d SET pending_slot_at = s.at, pending_slot_start = s.start
    FROM unnest(CAST(:ids AS text[]), CAST(:ats AS timestamptz[]), CAST(:starts AS timestamptz[]))
        AS s(dag_id, at, start)
    WHERE d.dag_id = s.dag_id
    RETURNING d.dag_id, (SELECT o.pending_slot_at FROM dags o WHERE o.dag_id = d.dag_id) AS replaced
""")

_READ = text("""
    SELECT d.dag_id, d.pending_slot_at, d.pending_slot_start, v.spec->>'starting_deadline_seconds' AS deadline
    FROM dags d JOIN dag_versions v ON v.id = d.current_version_id
    WHERE d.dag_id = ANY(CAST(:ids AS text[]))
""")

_CLEAR = text("""
    UPDATE dags d SET pending_slot_at = NULL, pending_slot_start = NULL
    FROM unnest(CAST(:ids AS text[]), CAST(:ats AS timestamptz[])) AS s(dag_id, at)
    WHERE d.dag_id = s.dag_id AND d.pending_slot_at = s.at
""")

_CREATE = text("""
    WITH cleared AS (
        UPDATE dags d SET pending_slot_at = NULL, pending_slot_start = NULL
        FROM unnest(CAST(:dag_ids AS text[]), CAST(:ats AS timestamptz[])) AS s(dag_id, at)
        WHERE d.dag_id = s.dag_id AND d.pending_slot_at = s.at AND NOT d.deleted
        RETURNING d.dag_id
    ), inserted AS (
        INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, conf,
                              created_at, updated_at, term, data_interval_start, data_interval_end, triggering_events)
        SELECT p.dag_id, p.run_id, p.version_id, 'scheduled', p.at, 'queued', v.default_conf, :now, :now, :term,
               p.start, p.at, CAST(p.events AS jsonb)
        FROM unnest(CAST(:dag_ids AS text[]), CAST(:versions AS bigint[]), CAST(:run_ids AS text[]),
                    CAST(:ats AS timestamptz[]), CAST(:starts AS timestamptz[]), CAST(:events AS text[]))
            AS p(dag_id, version_id, run_id, at, start, events)
        JOIN cleared c ON c.dag_id = p.dag_id
        JOIN dag_versions v ON v.id = p.version_id
        ON CONFLICT DO NOTHING
        RETURNING dag_id
    ), consumed AS (
        DELETE FROM dataset_queue q
        USING unnest(CAST(:q_dags AS text[]), CAST(:q_uris AS text[])) AS c(dag_id, uri)
        WHERE q.dag_id = c.dag_id AND q.uri = c.uri AND q.dag_id IN (SELECT dag_id FROM inserted)
        RETURNING q.dag_id
    )
    SELECT (SELECT count(*) FROM inserted) AS runs, (SELECT count(*) FROM consumed) AS consumed
""")


async def set_slots(conn: AsyncConnection, slots: Sequence[tuple[str, datetime, datetime]]) -> dict[str, datetime]:
    """Make each (dag_id, logical date, interval start) its DAG's pending slot; returns the slots replaced."""
    if not slots:
        return {}
    seen: dict[int, str] = {}
    rows = await conn.execute(_SET, {"ids": arrays.texts(d for d, _, _ in slots),
                                     "ats": arrays.timestamps((a for _, a, _ in slots), seen),
                                     "starts": arrays.timestamps((s for _, _, s in slots), seen)})
    return {str(r.dag_id): r.replaced for r in rows if r.replaced is not None}


async def pending_slots(conn: AsyncConnection, dag_ids: Sequence[str]) -> dict[str, PendingSlot]:
    """The pending slots of ``dag_ids`` (locked by the caller), with their versions' starting deadline."""
    if not dag_ids:
        return {}
    rows = await conn.execute(_READ, {"ids": arrays.texts(dag_ids)})
    return {str(r.dag_id): PendingSlot(str(r.dag_id), r.pending_slot_at, r.pending_slot_start, r.deadline)
            for r in rows}


async def clear_slots(conn: AsyncConnection, slots: Sequence[tuple[str, datetime]]) -> None:
    """Drop pending slots (dag_id, logical date) that passed their starting deadline (compare-and-set)."""
    if slots:
        seen: dict[int, str] = {}
        await conn.execute(_CLEAR, {"ids": arrays.texts(d for d, _ in slots),
                                    "ats": arrays.timestamps((a for _, a in slots), seen)})


async def create_slot_runs(conn: AsyncConnection, runs: Sequence[SlotRun], *, now: datetime, term: int) -> int:
    """Create the runs of met pending slots (see the module docstring); returns the runs created."""
    if not runs:
        return 0
    seen: dict[int, str] = {}
    q_rows = [(r.dag_id, q.uri) for r in runs for q in r.consumed]
    events = [json.dumps([q.document() for q in r.consumed], separators=(",", ":")) for r in runs]
    row = (await conn.execute(_CREATE, {
        "dag_ids": arrays.texts(r.dag_id for r in runs), "versions": arrays.ints(r.version_id for r in runs),
        "run_ids": arrays.texts(r.run_id for r in runs),
        "ats": arrays.timestamps((r.logical_date for r in runs), seen),
        "starts": arrays.timestamps((r.interval_start for r in runs), seen), "events": arrays.texts(events),
        "q_dags": arrays.texts(d for d, _ in q_rows), "q_uris": arrays.texts(u for _, u in q_rows),
        "now": now, "term": term})).one()
    return int(row.runs)
