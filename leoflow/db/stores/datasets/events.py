"""Dataset events: recorded, and queued for every consuming DAG in the same statement.

Two ways in, one statement each, so an event and its queue entries commit together or not at all:

- :func:`record_task_events`: a producing task's success, inside the leader's fenced step that
  moves the task instance to ``success`` (the step calls it only for tasks with ``produces``, so
  no other success pays anything). The event names the producing DAG, run, task, map index and try,
  and copies the try's checked outputs (written by the same step just before).
- :func:`record_api_events`: outside systems' reports (``POST /api/v2/datasets/events``), on any
  replica, not fenced: it only appends events and upserts queue rows, which the leader's
  compare-and-delete (:mod:`.triggers`) is built to meet. A replica writes the reports that arrive
  while its previous write commits in one statement (:mod:`leoflow.api.event_batches`): every
  event of one URI upserts the same queue rows, whose row locks serialize their transactions up
  to their commits, so one transaction per report made a burst of one URI wait in line for
  fsyncs (about 70 a second) while holding the replica's pooled connections.

**Coalescing.** The queue keeps one row per (consuming DAG, URI): a new event moves
``last_event_id``/``last_at`` and adds to ``events``. ``INSERT … ON CONFLICT DO UPDATE`` makes two
events racing for the same row both count (Airflow's queue insert could lose one to a unique
violation, apache/airflow#35870), and bounds the queue by what the DAGs wait on whatever the rate
of events: 100,000 events of one URI leave one row per consumer. The event rows themselves are the
history (append-only). A DAG only queues events recorded after its references exist, so a new DAG
does not start from history (the surprise of apache/airflow#38826). A paused DAG keeps queueing:
its runs start from the held events when it is unpaused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays
from leoflow.db.connection.wakeup import WAKEUP_CHANNEL, notify_wakeup

#: Queue the events of ``ev`` (id, uri, created_at) for every live consumer of their URIs.
_QUEUE = """
    q AS (
        INSERT INTO dataset_queue (dag_id, uri, first_event_id, last_event_id, events, first_at, last_at)
        SELECT c.dag_id, e.uri, min(e.id), max(e.id), count(*), min(e.created_at), max(e.created_at)
        FROM ev e
        JOIN dataset_references c ON c.uri = e.uri AND c.role = 'consumer'
        JOIN dags d ON d.dag_id = c.dag_id AND NOT d.deleted
        GROUP BY c.dag_id, e.uri
        ON CONFLICT (dag_id, uri) DO UPDATE SET
            last_event_id = greatest(dataset_queue.last_event_id, excluded.last_event_id),
            last_at = greatest(dataset_queue.last_at, excluded.last_at),
            events = dataset_queue.events + excluded.events
        RETURNING dag_id, uri
    )"""

_QUEUED = _QUEUE + """
    SELECT (SELECT count(*) FROM ev) AS events, (SELECT min(dag_id) FROM q) AS consumer,
           (SELECT count(*) FROM q) AS queued
"""

_TASK_EVENTS = text("""
    WITH p AS (
        SELECT * FROM unnest(CAST(:ti_ids AS bigint[]), CAST(:tries AS int[]), CAST(:uris AS text[]))
            WITH ORDINALITY AS p(ti_id, try_number, uri, n)
    ), ev AS (
        INSERT INTO dataset_events (uri, source, dag_id, run_id, task_id, map_index, try_number, outputs, created_at)
        SELECT p.uri, 'task', r.dag_id, r.run_id, ti.task_id, ti.map_index, p.try_number, tt.outputs, :now
        FROM p
        JOIN task_instances ti ON ti.id = p.ti_id
        JOIN dag_runs r ON r.id = ti.run_pk
        LEFT JOIN task_tries tt ON tt.task_instance_id = p.ti_id AND tt.try_number = p.try_number
        ORDER BY p.n
        RETURNING id, uri, created_at
    ),""" + _QUEUED)

_API_EVENT = text("""
    WITH ev AS (
        INSERT INTO dataset_events (uri, source, extra, created_by, created_at)
        VALUES (:uri, 'api', CAST(:extra AS jsonb), :created_by, :now)
        RETURNING id, uri, created_at
    ),""" + _QUEUED)


_API_EVENTS = text("""
    WITH p AS (
        SELECT * FROM unnest(CAST(:uris AS text[]), CAST(:extras AS text[]), CAST(:created_by AS text[]))
            WITH ORDINALITY AS p(uri, extra, created_by, n)
    ), ev AS (
        INSERT INTO dataset_events (uri, source, extra, created_by, created_at)
        SELECT p.uri, 'api', CAST(p.extra AS jsonb), p.created_by, :now FROM p ORDER BY p.n
        RETURNING id, uri, created_at
    ),""" + _QUEUE + """
    SELECT (SELECT pg_notify(:channel, min(dag_id)) FROM q HAVING count(*) > 0) AS woke,
           (SELECT coalesce(jsonb_object_agg(uri, consumers), '{}')
            FROM (SELECT uri, count(*) AS consumers FROM q GROUP BY uri) s) AS consumers
""")


@dataclass(frozen=True)
class ApiEvent:
    """An outside report to record: the URI and ``extra`` (both validated), and who sent it."""

    uri: str
    extra: Mapping[str, Any]
    created_by: str | None


@dataclass(frozen=True)
class Produced:
    """A success to record: the task instance, its successful try and one URI it produces."""

    ti_id: int
    try_number: int
    uri: str


@dataclass(frozen=True)
class Recorded:
    events: int
    #: Consuming DAGs whose queue took an event.
    queued: int


async def record_task_events(conn: AsyncConnection, produced: Sequence[Produced], now: datetime) -> Recorded:
    """Record the successes' events and queue them for their consumers (the caller's fenced
    transaction); the leader's own LISTEN wakes it for the consumers' runs once it commits."""
    if not produced:
        return Recorded(0, 0)
    row = (await conn.execute(_TASK_EVENTS, {
        "ti_ids": arrays.ints(p.ti_id for p in produced), "tries": arrays.ints(p.try_number for p in produced),
        "uris": arrays.texts(p.uri for p in produced), "now": now})).one()
    if row.queued:
        await notify_wakeup(conn, str(row.consumer))
    return Recorded(int(row.events), int(row.queued))


async def record_api_event(conn: AsyncConnection, uri: str, extra: Mapping[str, Any], *, created_by: str | None,
                           now: datetime) -> Recorded:
    """Record an outside event of ``uri`` (already validated) and queue it; wakes the leader if queued."""
    row = (await conn.execute(_API_EVENT, {"uri": uri, "extra": json.dumps(dict(extra)),
                                           "created_by": None if created_by is None else created_by[:100],
                                           "now": now})).one()
    if row.queued:
        await notify_wakeup(conn, str(row.consumer))
    return Recorded(int(row.events), int(row.queued))


async def record_api_events(conn: AsyncConnection, reports: Sequence[ApiEvent], now: datetime) -> list[int]:
    """Record ``reports`` in one statement and queue them (each consuming DAG's row of a URI takes
    all of that URI's events at once); per report, the DAGs it was queued for. Wakes the leader.

    One statement, one round trip: the wake-up and each URI's consumer count come back from the
    same statement (a burst's batches are a line of commits, so every round trip inside one
    lengthens the line)."""
    if not reports:
        return []
    row = (await conn.execute(_API_EVENTS, {
        "uris": arrays.texts(r.uri for r in reports),
        "extras": arrays.texts(json.dumps(dict(r.extra)) for r in reports),
        "created_by": arrays.texts(None if r.created_by is None else r.created_by[:100] for r in reports),
        "now": now, "channel": WAKEUP_CHANNEL})).one()
    consumers: dict[str, int] = row.consumers
    return [consumers.get(r.uri, 0) for r in reports]
