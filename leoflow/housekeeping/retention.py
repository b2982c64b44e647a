"""Retention: the metadata database keeps ``LEOFLOW_RETENTION_DAYS`` of history, not all of it.

:class:`RetentionService` is a leader service: a little after a replica becomes leader, and
then every :data:`ROUND_INTERVAL`, it deletes what ended more than ``LEOFLOW_RETENTION_DAYS``
ago — finished runs with their task instances, tries and logs, DAG versions nothing refers to
any more, deleted DAGs without runs (the rules, and what is kept, are in
:mod:`leoflow.db.stores.retention`) — and audit events older than
``LEOFLOW_AUDIT_RETENTION_DAYS`` (longer by default: who did what is asked about long after the
runs are gone). Every round also deletes runtime API tokens revoked or expired more than
:data:`TOKEN_GRACE_DAYS` ago (:func:`purge_spent_tokens`): long enough that ``leoflow tokens list``
still shows a recently revoked or expired token to whoever investigates it; the audit log names
each actor itself, so it stays readable without them. ``leoflow db purge --before DATE`` runs
the same :func:`purge` once, from the command line.

**Whose clock.** Cutoffs are computed by the database (``now()``), never from the leader's wall
clock: a leader whose clock is 40 days ahead would otherwise delete every run that ended
minutes ago. And a purge refuses a cutoff that is in the future by the database's clock
(:class:`CutoffInFuture`, logged, nothing deleted), whoever computed it.

Work is cut into small batches, each its own short transaction (:data:`RUN_BATCH` runs), and
after each batch retention rests :data:`REST_FACTOR` times as long as the batch took (at least
``pause``): however large a backlog (the first round after enabling retention, or after
lowering it), retention keeps the database busy at most a third of the time and never holds a
lock for long, so the scheduler and the API keep their share. The leader's batches are fenced
(a replica that lost its term deletes nothing more). Rows deleted are counted in
``leoflow_retention_purged_rows_total{table}``. ``bench/retention.py`` measures the batches and
what scheduling notices meanwhile.

Failure semantics: a database error or a refused cutoff ends the round (logged); the next
round starts after :data:`RETRY_INTERVAL`. :class:`~leoflow.errors.FencedOut` ends the service.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime

from leoflow.db.connection.database import Connection, Database
from leoflow.db.stores import api_tokens as token_store
from leoflow.db.stores import retention as retention_store
from leoflow.db.stores.log_archive import garbage as archive_garbage
from leoflow.db.stores.retention import START, PurgeCounts, RetentionPolicy
from leoflow.errors import DatabaseError, FencedOut, ValidationFailed
from leoflow.leadership import LeaderContext
from leoflow.metrics.housekeeping import PURGED_ROWS
from leoflow.metrics.log_archive import ARCHIVED_OBJECTS_DELETED
from leoflow.settings import Settings
from leoflow.storage.objects import ObjectStore, StorageError

log = logging.getLogger(__name__)

#: Runs per batch: 20 runs of 20 tasks (1,200 rows with their tries and logs) take ~50 ms to
#: delete on a loaded 2-core machine (bench/retention.py); a 1,000-task DAG's runs bring
#: ~60,000 rows, still about a second.
RUN_BATCH = 20
#: DAG versions / deleted DAGs per batch.
VERSION_BATCH = 200
#: Audit events per batch: rows of a few hundred bytes deleted by primary key, a few ms each.
AUDIT_BATCH = 1000
#: Dataset events per batch: small rows deleted by primary key, like audit events.
DATASET_EVENT_BATCH = 1000
#: Archived log objects deleted per storage request (S3's DeleteObjects takes at most 1,000 keys).
ARCHIVE_OBJECT_BATCH = 1000
#: Least seconds between batches, and how many times a batch's own duration retention rests
#: after it (2: busy at most a third of the time).
BATCH_PAUSE = 0.05
REST_FACTOR = 2.0
#: Seconds between rounds: retention is counted in days, so an hour late is never noticed.
ROUND_INTERVAL = 3600.0
#: Seconds after becoming leader before the first round: a failover's catch-up comes first.
FIRST_ROUND_DELAY = 60.0
#: Seconds before trying again after a failed round.
RETRY_INTERVAL = 300.0

Fence = tuple[str, int]
#: One kind of batch: its counts, and whether another batch of the kind may find more.
Step = Callable[[Connection], Awaitable[tuple[PurgeCounts, bool]]]


class CutoffInFuture(ValidationFailed):
    """A purge was asked to delete history up to a time the database's clock has not reached."""


def policy_for(cutoff: datetime, executor_kind: str, *, delete_archived_logs: bool = False) -> RetentionPolicy:
    """The policy of a purge: pods must be collected first only where tries have pods."""
    return RetentionPolicy(cutoff=cutoff, wait_for_pod_cleanup=executor_kind == "kubernetes",
                           delete_archived_logs=delete_archived_logs)


def deletes_archived_logs(settings: Settings) -> bool:
    """Does retention delete archived log objects with their rows (or leave them to a lifecycle rule)?"""
    return settings.log_archive.active_url is not None and settings.log_archive.retention == "delete"


async def delete_archived_objects(db: Database, store: ObjectStore, *, batch: int = ARCHIVE_OBJECT_BATCH,
                                  pause: float = BATCH_PAUSE) -> int:
    """Delete the archived log objects whose rows retention deleted; how many.

    Objects are deleted with no transaction open, then their keys are forgotten: a failure in
    between deletes them again next round (deleting a deleted object is fine). A storage failure
    ends this part of the round (logged; the keys stay queued).
    """
    deleted = 0
    while True:
        async with db.transaction() as conn:
            queued = await archive_garbage.claim_garbage(conn, limit=batch)
        if not queued:
            return deleted
        try:
            await store.delete([key for _, key in queued])
        except StorageError as exc:
            log.warning("could not delete archived log objects; trying again next round",
                        extra={"bucket": store.url, "error": str(exc)[:300], "queued": len(queued)})
            return deleted
        async with db.transaction() as conn:
            await archive_garbage.forget_garbage(conn, [i for i, _ in queued])
        deleted += len(queued)
        ARCHIVED_OBJECTS_DELETED.inc(len(queued))
        if len(queued) < batch:
            return deleted
        await asyncio.sleep(pause)


#: Days a revoked or expired runtime API token is kept before retention deletes it.
TOKEN_GRACE_DAYS = 30
#: Tokens deleted per batch (at most 10,000 usable ones exist; spent ones pile up slowly).
TOKEN_BATCH = 1000


async def purge_spent_tokens(db: Database, *, fence: Fence | None = None, grace_days: int = TOKEN_GRACE_DAYS,
                             batch: int = TOKEN_BATCH) -> int:
    """Delete the runtime API tokens revoked or expired more than ``grace_days`` ago (the database's
    clock), batch by batch; returns how many."""
    total = 0
    while True:
        async with _batch(db, fence) as conn:
            cutoff = await retention_store.days_ago(conn, grace_days)
            deleted = await token_store.purge_spent_tokens(conn, cutoff, limit=batch)
        total += deleted
        if deleted < batch:
            if total:
                PURGED_ROWS.labels(table="api_tokens").inc(total)
            return total


@asynccontextmanager
async def _batch(db: Database, fence: Fence | None) -> AsyncIterator[Connection]:
    if fence is None:
        async with db.transaction() as conn:
            yield conn
    else:
        async with db.fenced(*fence) as conn:
            yield conn


async def _refuse_future(db: Database, cutoff: datetime, fence: Fence | None) -> None:
    """Raise :class:`CutoffInFuture` (logged) when ``cutoff`` is ahead of the database's clock."""
    async with _batch(db, fence) as conn:
        now = await retention_store.database_now(conn)
    if cutoff > now:
        log.error("retention refused a cutoff in the future; nothing deleted",
                  extra={"cutoff": cutoff.isoformat(), "database_now": now.isoformat()})
        raise CutoffInFuture("cutoff", f"{cutoff.isoformat()} is after the database's clock ({now.isoformat()})")


async def _in_batches(db: Database, steps: tuple[Step, ...], *, fence: Fence | None, pause: float,
                      on_batch: Callable[[PurgeCounts], None] | None) -> PurgeCounts:
    """Run each step's batches until it finds no more, resting between batches; the totals."""
    total = PurgeCounts()
    for step in steps:
        while True:
            began = time.monotonic()
            async with _batch(db, fence) as conn:
                counts, more = await step(conn)
            # Counted once committed: the transaction is over here.
            total.add(counts)
            if on_batch is not None and counts.total:
                on_batch(counts)
            if not more:
                break
            await asyncio.sleep(max(pause, (time.monotonic() - began) * REST_FACTOR))
    return total


async def purge(db: Database, policy: RetentionPolicy, *, fence: Fence | None = None, dry_run: bool = False,
                run_batch: int = RUN_BATCH, version_batch: int = VERSION_BATCH, pause: float = BATCH_PAUSE,
                on_batch: Callable[[PurgeCounts], None] | None = None) -> PurgeCounts:
    """Delete (or with ``dry_run`` count) everything ``policy`` allows, batch by batch; the totals.

    Raises :class:`CutoffInFuture` before deleting anything when the policy's cutoff is ahead
    of the database's clock. ``on_batch`` sees each committed batch's counts (the leader's
    metrics).
    """
    await _refuse_future(db, policy.cutoff, fence)
    after = START

    async def runs(conn: Connection) -> tuple[PurgeCounts, bool]:
        nonlocal after
        batch = await retention_store.purge_runs(conn, policy, after=after, limit=run_batch, dry_run=dry_run)
        after = batch.after
        return batch.counts, batch.examined == run_batch

    async def versions(conn: Connection) -> tuple[PurgeCounts, bool]:
        deleted = await retention_store.purge_versions(conn, policy, limit=version_batch, dry_run=dry_run)
        # Dry runs count each kind once: without deleting, the same rows would be found again.
        return PurgeCounts(dag_versions=deleted), not dry_run and deleted == version_batch

    async def deleted_dags(conn: Connection) -> tuple[PurgeCounts, bool]:
        counts = await retention_store.purge_deleted_dags(conn, policy, limit=version_batch, dry_run=dry_run)
        return counts, not dry_run and counts.dags == version_batch

    async def dataset_events(conn: Connection) -> tuple[PurgeCounts, bool]:
        deleted = await retention_store.purge_dataset_events(conn, policy.cutoff, limit=DATASET_EVENT_BATCH,
                                                             dry_run=dry_run)
        return PurgeCounts(dataset_events=deleted), not dry_run and deleted == DATASET_EVENT_BATCH

    return await _in_batches(db, (runs, versions, deleted_dags, dataset_events), fence=fence, pause=pause,
                             on_batch=on_batch)


async def purge_audit(db: Database, cutoff: datetime, *, fence: Fence | None = None, batch: int = AUDIT_BATCH,
                      pause: float = BATCH_PAUSE,
                      on_batch: Callable[[PurgeCounts], None] | None = None) -> PurgeCounts:
    """Delete the audit events recorded before ``cutoff``, batch by batch (refusing a future cutoff)."""
    await _refuse_future(db, cutoff, fence)

    async def events(conn: Connection) -> tuple[PurgeCounts, bool]:
        deleted = await retention_store.purge_audit_events(conn, cutoff, limit=batch)
        return PurgeCounts(audit_events=deleted), deleted == batch

    return await _in_batches(db, (events,), fence=fence, pause=pause, on_batch=on_batch)


def _count_purged(counts: PurgeCounts) -> None:
    for table, rows in counts.items():
        if rows:
            PURGED_ROWS.labels(table=table).inc(rows)


class RetentionService:
    """LeaderService: deletes runs older than ``days`` days and audit events older than
    ``audit_days`` days (0: that kind is kept forever), every :data:`ROUND_INTERVAL`."""

    name = "retention"

    def __init__(self, days: int, *, audit_days: int = 0, interval: float = ROUND_INTERVAL,
                 first_delay: float = FIRST_ROUND_DELAY, retry_interval: float = RETRY_INTERVAL,
                 run_batch: int = RUN_BATCH, audit_batch: int = AUDIT_BATCH, pause: float = BATCH_PAUSE) -> None:
        if days < 0 or audit_days < 0 or not (days or audit_days):
            raise ValueError("retention needs at least one day of runs or audit events "
                             "(0 means keep forever: when both are 0, run no service)")
        self.days = days
        self.audit_days = audit_days
        self.interval = interval
        self.first_delay = first_delay
        self.retry_interval = retry_interval
        self.run_batch = run_batch
        self.audit_batch = audit_batch
        self.pause = pause

    async def run(self, ctx: LeaderContext) -> None:
        await asyncio.sleep(self.first_delay)
        while True:
            try:
                await self.purge_once(ctx)
                wait = self.interval
            except FencedOut:
                log.info("retention stops: fenced out", extra={"term": ctx.term})
                return
            except CutoffInFuture:  # logged where it was refused
                wait = min(self.interval, self.retry_interval)
            except DatabaseError as exc:
                log.warning("retention round failed; trying again later", extra={"error": str(exc)[:300]})
                wait = min(self.interval, self.retry_interval)
            await asyncio.sleep(wait)

    async def _delete_archived_objects(self, ctx: LeaderContext) -> None:
        config = ctx.settings.log_archive
        if config.active_url is None:
            return
        try:
            store = ObjectStore(config.active_url, timeout=config.timeout)
        except (ValueError, OSError) as exc:
            log.warning("cannot reach the log archive to delete old objects", extra={"error": str(exc)[:300]})
            return
        deleted = await delete_archived_objects(ctx.db, store, pause=self.pause)
        if deleted:
            log.info("retention deleted archived log objects", extra={"objects": deleted, "bucket": store.url})

    async def _cutoff(self, ctx: LeaderContext, days: int) -> datetime:
        """``days`` before the database's clock (not ``ctx.clock``: see the module docstring)."""
        async with ctx.db.fenced(ctx.cluster, ctx.term) as conn:
            return await retention_store.days_ago(conn, days)

    async def purge_once(self, ctx: LeaderContext) -> PurgeCounts:
        """One round: everything that ended more than ``days`` days ago, in fenced batches."""
        fence = (ctx.cluster, ctx.term)
        counts = PurgeCounts()
        cutoffs: dict[str, str] = {}
        if self.days:
            policy = policy_for(await self._cutoff(ctx, self.days), ctx.settings.executor.kind,
                                delete_archived_logs=deletes_archived_logs(ctx.settings))
            cutoffs["runs"] = policy.cutoff.isoformat()
            counts.add(await purge(ctx.db, policy, fence=fence, run_batch=self.run_batch, pause=self.pause,
                                   on_batch=_count_purged))
            await self._delete_archived_objects(ctx)
        if self.audit_days:
            cutoff = await self._cutoff(ctx, self.audit_days)
            cutoffs["audit_events"] = cutoff.isoformat()
            counts.add(await purge_audit(ctx.db, cutoff, fence=fence, batch=self.audit_batch, pause=self.pause,
                                         on_batch=_count_purged))
        tokens = await purge_spent_tokens(ctx.db, fence=fence)
        if counts.total or tokens:
            log.info("retention purged old history", extra={
                "days": self.days, "audit_days": self.audit_days, "cutoff": cutoffs,
                "rows": {**dict(counts.items()), "api_tokens": tokens}})
        return counts
