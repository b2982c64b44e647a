"""Retention: the metadata database keeps ``LEOFLOW_RETENTION_DAYS`` of history, not all of it.

:class:`RetentionService` is a leader service: a little after a replica becomes leader, and
then every :data:`ROUND_INTERVAL`, it deletes what ended more than ``LEOFLOW_RETENTION_DAYS``
ago — finished runs with their task instances, tries and logs, DAG versions nothing refers to
any more, deleted DAGs without runs (the rules, and what is kept, are in
:mod:`leoflow.db.retention_store`). ``leoflow db purge --before DATE`` runs the same
:func:`purge` once, from the command line.

Work is cut into small batches, each its own short transaction (:data:`RUN_BATCH` runs), and
after each batch retention rests :data:`REST_FACTOR` times as long as the batch took (at least
``pause``): however large a backlog (the first round after enabling retention, or after
lowering it), retention keeps the database busy at most a third of the time and never holds a
lock for long, so the scheduler and the API keep their share. The leader's batches are fenced
(a replica that lost its term deletes nothing more). Rows deleted are counted in
``leoflow_retention_purged_rows_total{table}``. ``bench/retention.py`` measures the batches and
what scheduling notices meanwhile.

Failure semantics: a database error ends the round (logged); the next round starts after
:data:`RETRY_INTERVAL`. :class:`~leoflow.errors.FencedOut` ends the service.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta

from leoflow.db import retention_store
from leoflow.db.database import Connection, Database
from leoflow.db.retention_store import START, PurgeCounts, RetentionPolicy
from leoflow.errors import DatabaseError, FencedOut
from leoflow.leadership import LeaderContext
from leoflow.metrics.housekeeping import PURGED_ROWS

log = logging.getLogger(__name__)

#: Runs per batch: 20 runs of 20 tasks (1,200 rows with their tries and logs) take ~50 ms to
#: delete on a loaded 2-core machine (bench/retention.py); a 1,000-task DAG's runs bring
#: ~60,000 rows, still about a second.
RUN_BATCH = 20
#: DAG versions / deleted DAGs per batch.
VERSION_BATCH = 200
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


def policy_for(cutoff: datetime, executor_kind: str) -> RetentionPolicy:
    """The policy of a purge: pods must be collected first only where tries have pods."""
    return RetentionPolicy(cutoff=cutoff, wait_for_pod_cleanup=executor_kind == "kubernetes")


@asynccontextmanager
async def _batch(db: Database, fence: Fence | None) -> AsyncIterator[Connection]:
    if fence is None:
        async with db.transaction() as conn:
            yield conn
    else:
        async with db.fenced(*fence) as conn:
            yield conn


async def purge(db: Database, policy: RetentionPolicy, *, now: datetime, fence: Fence | None = None,
                dry_run: bool = False, run_batch: int = RUN_BATCH, version_batch: int = VERSION_BATCH,
                pause: float = BATCH_PAUSE, on_batch: Callable[[PurgeCounts], None] | None = None) -> PurgeCounts:
    """Delete (or with ``dry_run`` count) everything ``policy`` allows, batch by batch; the totals.

    ``on_batch`` sees each committed batch's counts (the leader's metrics).
    """
    total = PurgeCounts()
    after = START

    async def runs(conn: Connection) -> tuple[PurgeCounts, bool]:
        nonlocal after
        batch = await retention_store.purge_runs(conn, policy, after=after, limit=run_batch, now=now, dry_run=dry_run)
        after = batch.after
        return batch.counts, batch.examined == run_batch

    async def versions(conn: Connection) -> tuple[PurgeCounts, bool]:
        deleted = await retention_store.purge_versions(conn, policy, limit=version_batch, dry_run=dry_run)
        # Dry runs count each kind once: without deleting, the same rows would be found again.
        return PurgeCounts(dag_versions=deleted), not dry_run and deleted == version_batch

    async def deleted_dags(conn: Connection) -> tuple[PurgeCounts, bool]:
        counts = await retention_store.purge_deleted_dags(conn, policy, limit=version_batch, dry_run=dry_run)
        return counts, not dry_run and counts.dags == version_batch

    for step in (runs, versions, deleted_dags):
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

def _count_purged(counts: PurgeCounts) -> None:
    for table, rows in counts.items():
        if rows:
            PURGED_ROWS.labels(table=table).inc(rows)


class RetentionService:
    """LeaderService: deletes history older than ``days`` days, every :data:`ROUND_INTERVAL`."""

    name = "retention"

    def __init__(self, days: int, *, interval: float = ROUND_INTERVAL, first_delay: float = FIRST_ROUND_DELAY,
                 retry_interval: float = RETRY_INTERVAL, run_batch: int = RUN_BATCH,
                 pause: float = BATCH_PAUSE) -> None:
        if days < 1:
            raise ValueError("retention needs at least one day (0 means keep forever: run no service)")
        self.days = days
        self.interval = interval
        self.first_delay = first_delay
        self.retry_interval = retry_interval
        self.run_batch = run_batch
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
            except DatabaseError as exc:
                log.warning("retention round failed; trying again later", extra={"error": str(exc)[:300]})
                wait = min(self.interval, self.retry_interval)
            await asyncio.sleep(wait)

    async def purge_once(self, ctx: LeaderContext) -> PurgeCounts:
        """One round: everything that ended more than ``days`` days ago, in fenced batches."""
        now = ctx.clock.now()
        policy = policy_for(now - timedelta(days=self.days), ctx.settings.executor.kind)
        counts = await purge(ctx.db, policy, now=now, fence=(ctx.cluster, ctx.term), run_batch=self.run_batch,
                             pause=self.pause, on_batch=_count_purged)
        if counts.total:
            log.info("retention purged old history",
                     extra={"days": self.days, "cutoff": policy.cutoff.isoformat(), "rows": dict(counts.items())})
        return counts
