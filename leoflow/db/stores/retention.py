"""Deleting old history in small batches: every SQL statement of retention.

What goes (:mod:`leoflow.housekeeping.retention` drives it, batch after batch):

- **finished runs** that ended before the cutoff, with their task instances, tries and logs —
  unless one of their tries still has work in flight: a try the executor may still be running
  or killing (``queued``, ``running``, ``cancelling``), whatever its age; or, for tries that
  ended within :data:`CLEANUP_GRACE`, logs not collected yet or (Kubernetes) a pod the garbage
  collector has not deleted yet — the collector and the log shipper work from these rows, so
  deleting them early would leave pods and lose logs. Past the grace, pending clean-up is
  considered abandoned and no longer holds the run (otherwise one broken pod would pin its run
  forever);
- **DAG versions** no run references any more, that stopped being current before the cutoff
  (a newer version of the DAG was applied before it); current versions are never deleted;
- **deleted DAGs** with no runs left, deleted before the cutoff, with their versions;
- **audit events** recorded before their own, longer cutoff (``LEOFLOW_AUDIT_RETENTION_DAYS``),
  oldest first through ``ix_audit_events_ts``;
- **dataset events** recorded before the runs' cutoff, oldest first by id, except those a consuming
  DAG's queue still points at (its first or last event): the history of a URI is for people and
  the list's "last event", and runs keep what triggered them in their own document.

Every time retention compares with "now" is the database's own clock (``now()`` in SQL): the
leader's wall clock may be days off (a broken NTP), and a cutoff computed from it would delete
runs that ended minutes ago. :func:`days_ago` gives the service its cutoff; :func:`database_now`
lets a purge refuse a cutoff in the future, whoever computed it.

Each batch is one short transaction: candidate runs are taken oldest-ended first through the
partial index ``ix_dag_runs_finished`` with ``FOR UPDATE SKIP LOCKED`` (a run someone else is
touching is skipped, never waited for), and ``lock_timeout`` is lowered for the batch, so
retention never queues behind the scheduler or holds locks the scheduler needs for long: it
only ever locks finished rows the scheduler no longer touches. Batches page through the
candidates with a keyset cursor, so a protected run is examined once per round, not once per
batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import cast

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.db.fragments import LIVE_TRIES_SQL, TERMINAL_RUNS_SQL
from leoflow.db.stores.log_archive import artifacts as archive_artifacts
from leoflow.db.stores.log_archive import garbage as archive_garbage

#: How long after a try ended pending executor clean-up (log collection, pod deletion) keeps
#: its run: far beyond the pod retention (1 h by default) and a log shipper's retries.
CLEANUP_GRACE = timedelta(days=7)
#: Longest a retention statement waits for a row lock before the batch gives up (and the
#: next round tries again): retention must never queue behind live work.
LOCK_TIMEOUT_MS = 5000
#: The beginning of time for the keyset cursor.
START = (datetime.min.replace(tzinfo=UTC), 0)


@dataclass(frozen=True)
class RetentionPolicy:
    """What a purge deletes: history that ended before ``cutoff``."""

    cutoff: datetime
    #: Tries of the Kubernetes executor own a pod until the garbage collector marks it deleted.
    wait_for_pod_cleanup: bool = True
    #: Queue the runs' archived log objects for deletion (LEOFLOW_LOG_ARCHIVE_RETENTION=delete);
    #: otherwise only their rows go, and a bucket lifecycle rule deletes the objects.
    delete_archived_logs: bool = False


@dataclass
class PurgeCounts:
    """Rows deleted (or, in a dry run, that would be) per table."""

    dag_runs: int = 0
    task_instances: int = 0
    task_tries: int = 0
    task_logs: int = 0
    dag_versions: int = 0
    dags: int = 0
    audit_events: int = 0
    dataset_events: int = 0

    def add(self, other: PurgeCounts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def items(self) -> list[tuple[str, int]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]

    @property
    def total(self) -> int:
        return sum(n for _, n in self.items())


@dataclass
class RunBatch:
    """One batch of runs: what it deleted and where the next batch starts."""

    counts: PurgeCounts = field(default_factory=PurgeCounts)
    #: Candidate runs examined (deleted or protected); 0 means the round is done.
    examined: int = 0
    after: tuple[datetime, int] = START


async def _lower_lock_timeout(conn: AsyncConnection) -> None:
    await conn.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))


def _claiming(select: str, alias: str, lock: bool) -> TextClause:
    """``select``, locking the rows it returns (skipping rows others hold) unless this is a dry run."""
    return text(f"{select} FOR UPDATE OF {alias} SKIP LOCKED" if lock else select)


async def database_now(conn: AsyncConnection) -> datetime:
    """The database's clock (its transaction's start), the one clock every replica shares."""
    return cast(datetime, (await conn.execute(text("SELECT now()"))).scalar_one())


async def days_ago(conn: AsyncConnection, days: int) -> datetime:
    """``days`` days before the database's clock: a retention cutoff no replica's clock can move."""
    return cast(datetime, (await conn.execute(text("SELECT now() - make_interval(days => :days)"),
                                              {"days": days})).scalar_one())


_CANDIDATES = f"""
    SELECT r.id, r.ended_at FROM dag_runs r
    WHERE r.state IN {TERMINAL_RUNS_SQL} AND r.ended_at < :cutoff
      AND (r.ended_at, r.id) > (:after_ended, :after_id)
    ORDER BY r.ended_at, r.id
    LIMIT :limit
"""


_PROTECTED = text(f"""
    SELECT DISTINCT ti.run_pk FROM task_instances ti JOIN task_tries tt ON tt.task_instance_id = ti.id
    WHERE ti.run_pk = ANY(:ids) AND (
        tt.state IN {LIVE_TRIES_SQL}
        OR (tt.ended_at > now() - CAST(:grace AS interval)
            AND tt.claimed_by IS NOT NULL AND tt.executor_ref IS NOT NULL AND tt.resource_deleted_at IS NULL
            AND (tt.logs_shipped_at IS NULL OR CAST(:pods AS boolean))))
""")
_DELETE_RUN_ROWS = (
    ("task_logs", text("""
        DELETE FROM task_logs l USING task_tries tt, task_instances ti
        WHERE l.task_try_id = tt.id AND tt.task_instance_id = ti.id AND ti.run_pk = ANY(:ids)""")),
    ("task_tries", text("""
        DELETE FROM task_tries tt USING task_instances ti
        WHERE tt.task_instance_id = ti.id AND ti.run_pk = ANY(:ids)""")),
    ("task_instances", text("DELETE FROM task_instances WHERE run_pk = ANY(:ids)")),
    ("dag_runs", text("DELETE FROM dag_runs WHERE id = ANY(:ids)")),
)
_COUNT_RUN_ROWS = (
    ("task_logs", text("""
        SELECT count(*) FROM task_logs l JOIN task_tries tt ON l.task_try_id = tt.id
        JOIN task_instances ti ON tt.task_instance_id = ti.id WHERE ti.run_pk = ANY(:ids)""")),
    ("task_tries", text("""
        SELECT count(*) FROM task_tries tt JOIN task_instances ti ON tt.task_instance_id = ti.id
        WHERE ti.run_pk = ANY(:ids)""")),
    ("task_instances", text("SELECT count(*) FROM task_instances WHERE run_pk = ANY(:ids)")),
    ("dag_runs", text("SELECT count(*) FROM dag_runs WHERE id = ANY(:ids)")),
)


async def purge_runs(conn: AsyncConnection, policy: RetentionPolicy, *, after: tuple[datetime, int], limit: int,
                     dry_run: bool = False) -> RunBatch:
    """Examine up to ``limit`` finished runs after the cursor; delete (or count) the unprotected ones."""
    await _lower_lock_timeout(conn)
    rows = (await conn.execute(_claiming(_CANDIDATES, "r", lock=not dry_run), {
        "cutoff": policy.cutoff, "after_ended": after[0], "after_id": after[1], "limit": limit})).all()
    batch = RunBatch(examined=len(rows), after=(rows[-1].ended_at, rows[-1].id) if rows else after)
    if not rows:
        return batch
    ids = [r.id for r in rows]
    protected = set((await conn.execute(_PROTECTED, {
        "ids": ids, "grace": CLEANUP_GRACE, "pods": policy.wait_for_pod_cleanup})).scalars())
    doomed = [i for i in ids if i not in protected]
    if not doomed:
        return batch
    if policy.delete_archived_logs and not dry_run:  # in this transaction, before the rows cascade away
        await archive_garbage.queue_run_objects(conn, doomed)
        await archive_artifacts.queue_run_artifacts(conn, doomed)  # the artifacts share the bucket and the queue
    for table, statement in (_COUNT_RUN_ROWS if dry_run else _DELETE_RUN_ROWS):
        result = await conn.execute(statement, {"ids": doomed})
        setattr(batch.counts, table, int(result.scalar_one()) if dry_run else result.rowcount)
    return batch


async def _claim(conn: AsyncConnection, select: str, alias: str, policy: RetentionPolicy, *, limit: int,
                 dry_run: bool) -> list[object]:
    """The keys ``select`` finds for ``policy`` (at most ``limit``), locked unless this is a dry run."""
    await _lower_lock_timeout(conn)
    return list((await conn.execute(_claiming(select, alias, lock=not dry_run),
                                    {"cutoff": policy.cutoff, "limit": limit})).scalars())


_OLD_VERSIONS = """
    SELECT v.id FROM dag_versions v JOIN dags d ON d.dag_id = v.dag_id
    WHERE v.created_at < :cutoff AND d.current_version_id IS DISTINCT FROM v.id
      AND EXISTS (SELECT 1 FROM dag_versions n
                  WHERE n.dag_id = v.dag_id AND n.version > v.version AND n.created_at < :cutoff)
      AND NOT EXISTS (SELECT 1 FROM dag_runs r WHERE r.dag_version_id = v.id)
    ORDER BY v.id LIMIT :limit
"""


async def purge_versions(conn: AsyncConnection, policy: RetentionPolicy, *, limit: int,
                         dry_run: bool = False) -> int:
    """Delete (or count) up to ``limit`` DAG versions nothing needs any more; returns how many."""
    ids = await _claim(conn, _OLD_VERSIONS, "v", policy, limit=limit, dry_run=dry_run)
    if ids and not dry_run:
        await conn.execute(text("DELETE FROM dag_versions WHERE id = ANY(:ids)"), {"ids": ids})
    return len(ids)


_DELETED_DAGS = """
    SELECT d.dag_id FROM dags d
    WHERE d.deleted AND d.updated_at < :cutoff
      AND NOT EXISTS (SELECT 1 FROM dag_runs r WHERE r.dag_id = d.dag_id)
    ORDER BY d.dag_id LIMIT :limit
"""


async def purge_deleted_dags(conn: AsyncConnection, policy: RetentionPolicy, *, limit: int,
                             dry_run: bool = False) -> PurgeCounts:
    """Remove (or count) up to ``limit`` deleted DAGs without runs, and their versions."""
    dag_ids = await _claim(conn, _DELETED_DAGS, "d", policy, limit=limit, dry_run=dry_run)
    counts = PurgeCounts(dags=len(dag_ids))
    if not dag_ids:
        return counts
    if dry_run:
        counts.dag_versions = int((await conn.execute(text(
            "SELECT count(*) FROM dag_versions WHERE dag_id = ANY(:ids)"), {"ids": dag_ids})).scalar_one())
        return counts
    # Versions first (their FK sets dags.current_version_id to NULL), then the DAG rows.
    result = await conn.execute(text("DELETE FROM dag_versions WHERE dag_id = ANY(:ids)"), {"ids": dag_ids})
    counts.dag_versions = result.rowcount
    await conn.execute(text("DELETE FROM dags WHERE dag_id = ANY(:ids)"), {"ids": dag_ids})
    return counts


_OLD_AUDIT_EVENTS = text("""
    SELECT id FROM audit_events WHERE ts < :cutoff ORDER BY ts, id LIMIT :limit FOR UPDATE SKIP LOCKED
""")


async def purge_audit_events(conn: AsyncConnection, cutoff: datetime, *, limit: int) -> int:
    """Delete up to ``limit`` audit events recorded before ``cutoff``, oldest first; returns how many."""
    await _lower_lock_timeout(conn)
    ids = list((await conn.execute(_OLD_AUDIT_EVENTS, {"cutoff": cutoff, "limit": limit})).scalars())
    if ids:
        await conn.execute(text("DELETE FROM audit_events WHERE id = ANY(:ids)"), {"ids": ids})
    return len(ids)


_OLD_DATASET_EVENTS = text("""
    SELECT e.id FROM dataset_events e
    WHERE e.created_at < :cutoff
      AND NOT EXISTS (SELECT 1 FROM dataset_queue q WHERE q.first_event_id = e.id OR q.last_event_id = e.id)
    ORDER BY e.id
    LIMIT :limit
""")


async def purge_dataset_events(conn: AsyncConnection, cutoff: datetime, *, limit: int, dry_run: bool = False) -> int:
    """Delete (or count) up to ``limit`` dataset events recorded before ``cutoff`` that no queue row
    points at, oldest first; returns how many."""
    await _lower_lock_timeout(conn)
    ids = list((await conn.execute(_OLD_DATASET_EVENTS, {"cutoff": cutoff, "limit": limit})).scalars())
    if ids and not dry_run:
        await conn.execute(text("DELETE FROM dataset_events WHERE id = ANY(:ids)"), {"ids": ids})
    return len(ids)
