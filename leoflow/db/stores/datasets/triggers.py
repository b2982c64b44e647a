"""The leader's dataset-triggered runs: DAGs whose condition the queue meets get one run each.

In the leader's fenced step (:mod:`leoflow.scheduler.periodic`):

1. :func:`waiting_dags` scans for DAGs with queued events that are live, not paused, not stopped
   (``schedule_error``), hold a pending cron slot if their schedule is ``combine: and``
   (:mod:`.slots`) and have **no unfinished dataset-triggered run** — the rule that keeps a
   dataset cycle (A feeds B feeds A), or a producer faster than its consumer, from stacking runs:
   while a DAG's dataset-triggered run is queued or running, its events coalesce in the queue,
   and the next run starts from all of them once it ends (Airflow's users got one run per event
   and a growing backlog, apache/airflow#26259).
2. :func:`lock_queues` locks those DAGs' rows (``FOR SHARE``: an apply, pause or delete waits for
   this step) and their queue rows (``FOR UPDATE``: an event for the same row waits too, then
   upserts a fresh row after the delete), and reads the condition of each DAG's current version.
3. The caller decides each condition in Python (all/any, :class:`~leoflow.model.spec.datasets.DatasetCondition`)
   on exactly the rows it locked, and :func:`create_dataset_runs` inserts the runs and deletes the
   rows they consumed in one statement.

Exactly once: the rows a run consumed are deleted in the transaction that creates the run, and
that transaction is fenced. A leader killed before its commit leaves both undone (the next leader
does them); after it, both done. A condition met by rows one leader read and another deleted cannot
happen: the second waits on the row locks and finds nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db import arrays
from leoflow.db.fragments import ACTIVE_RUNS_SQL

_WAITING = text(f"""
    SELECT q.dag_id
    FROM dataset_queue q
    JOIN dags d ON d.dag_id = q.dag_id
    WHERE NOT d.deleted AND NOT d.paused AND d.schedule_error IS NULL
      AND NOT EXISTS (SELECT 1 FROM dag_runs r WHERE r.dag_id = q.dag_id AND r.state IN {ACTIVE_RUNS_SQL}
                      AND r.run_type = 'dataset')
      -- combine: and: events wait for a cron slot (leoflow.db.stores.datasets.slots)
      AND (d.pending_slot_at IS NOT NULL OR d.schedule IS NULL OR d.schedule NOT LIKE '@and %')
    GROUP BY q.dag_id
    ORDER BY min(q.last_at), q.dag_id
    LIMIT :limit
""")

_LOCK_DAGS = text("""
    SELECT d.dag_id, d.current_version_id AS version_id, v.spec->'schedule' AS schedule
    FROM dags d JOIN dag_versions v ON v.id = d.current_version_id
    WHERE d.dag_id = ANY(CAST(:ids AS text[])) AND NOT d.deleted AND NOT d.paused AND d.schedule_error IS NULL
    ORDER BY d.dag_id
    FOR SHARE OF d
""")

_LOCK_QUEUE = text("""
    SELECT q.dag_id, q.uri, q.first_event_id, q.last_event_id, q.events, q.first_at, q.last_at,
           e.source, e.dag_id AS source_dag_id, e.run_id AS source_run_id, e.task_id AS source_task_id,
           e.extra
    FROM dataset_queue q LEFT JOIN dataset_events e ON e.id = q.last_event_id
    WHERE q.dag_id = ANY(CAST(:ids AS text[]))
    ORDER BY q.dag_id, q.uri
    FOR UPDATE OF q
""")

_CREATE = text("""
    WITH consumed AS (
        DELETE FROM dataset_queue q
        USING unnest(CAST(:q_dags AS text[]), CAST(:q_uris AS text[])) AS c(dag_id, uri)
        WHERE q.dag_id = c.dag_id AND q.uri = c.uri
        RETURNING q.dag_id
    ), inserted AS (
        INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, conf,
                              created_at, updated_at, term, triggering_events)
        SELECT p.dag_id, p.run_id, p.version_id, 'dataset', :now, 'queued', v.default_conf, :now, :now, :term,
               CAST(p.events AS jsonb)
        FROM unnest(CAST(:dag_ids AS text[]), CAST(:versions AS bigint[]), CAST(:run_ids AS text[]),
                    CAST(:events AS text[])) AS p(dag_id, version_id, run_id, events)
        JOIN dag_versions v ON v.id = p.version_id
        RETURNING dag_id
    )
    SELECT (SELECT count(*) FROM inserted) AS runs, (SELECT count(*) FROM consumed) AS consumed
""")


@dataclass(frozen=True)
class QueuedUri:
    """One coalesced queue row: the events of one URI waiting for one DAG."""

    uri: str
    first_event_id: int
    last_event_id: int
    events: int
    first_at: datetime
    last_at: datetime
    #: The last event's origin: ``task`` (with the producing DAG, run and task) or ``api``; None if pruned.
    source: str | None
    source_dag_id: str | None
    source_run_id: str | None
    source_task_id: str | None
    #: The last event's ``extra`` (an outside report's details, at most 16 KiB); None when it had none.
    extra: dict[str, Any] | None = None

    def document(self) -> dict[str, Any]:
        """The entry of a run's ``triggering_events`` (and LEOFLOW_TRIGGERING_EVENTS) for this URI."""
        out: dict[str, Any] = {"uri": self.uri, "events": self.events, "first_event_id": self.first_event_id,
                               "last_event_id": self.last_event_id, "first_at": self.first_at.isoformat(),
                               "last_at": self.last_at.isoformat()}
        if self.source is not None:
            out["source"] = self.source
        if self.source == "task":
            out.update(dag_id=self.source_dag_id, run_id=self.source_run_id, task_id=self.source_task_id)
        if self.extra:
            out["extra"] = self.extra
        return out


@dataclass
class LockedDag:
    """A waiting DAG, locked: its current version, its schedule as stored, its queue rows."""

    dag_id: str
    version_id: int
    schedule: object
    queued: dict[str, QueuedUri] = field(default_factory=dict)


@dataclass(frozen=True)
class DatasetRun:
    """A run to create: the DAG, its version, the run id, the queue rows (URIs) it consumes."""

    dag_id: str
    version_id: int
    run_id: str
    consumed: Sequence[QueuedUri]


async def waiting_dags(conn: AsyncConnection, limit: int) -> list[str]:
    """DAGs with queued events that may get a dataset-triggered run now, longest waiting first."""
    return [str(r) for r in (await conn.execute(_WAITING, {"limit": limit})).scalars()]


async def lock_queues(conn: AsyncConnection, dag_ids: Sequence[str]) -> list[LockedDag]:
    """Lock ``dag_ids`` (still live and unpaused) and their queue rows; see the module docstring."""
    if not dag_ids:
        return []
    dags = {r.dag_id: LockedDag(r.dag_id, int(r.version_id), r.schedule)
            for r in await conn.execute(_LOCK_DAGS, {"ids": arrays.texts(dag_ids)})}
    if not dags:
        return []
    for r in await conn.execute(_LOCK_QUEUE, {"ids": arrays.texts(dags)}):
        dags[r.dag_id].queued[r.uri] = QueuedUri(
            r.uri, int(r.first_event_id), int(r.last_event_id), int(r.events), r.first_at, r.last_at, r.source,
            r.source_dag_id, r.source_run_id, r.source_task_id, r.extra)
    return list(dags.values())


async def create_dataset_runs(conn: AsyncConnection, runs: Sequence[DatasetRun], *, now: datetime, term: int,
                              dropped: Sequence[tuple[str, str]] = ()) -> int:
    """Insert ``runs`` (queued, ``run_type = 'dataset'``) and delete the queue rows they consumed,
    plus ``dropped`` (dag_id, uri) rows no condition reads; returns the runs created."""
    if not runs and not dropped:
        return 0
    q_rows = [(r.dag_id, q.uri) for r in runs for q in r.consumed] + list(dropped)
    events = [json.dumps([q.document() for q in r.consumed], separators=(",", ":")) for r in runs]
    row = (await conn.execute(_CREATE, {
        "q_dags": arrays.texts(d for d, _ in q_rows), "q_uris": arrays.texts(u for _, u in q_rows),
        "dag_ids": arrays.texts(r.dag_id for r in runs), "versions": arrays.ints(r.version_id for r in runs),
        "run_ids": arrays.texts(r.run_id for r in runs), "events": arrays.texts(events),
        "now": now, "term": term})).one()
    return int(row.runs)
