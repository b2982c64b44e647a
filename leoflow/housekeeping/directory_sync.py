"""The leader keeps the DAGs in step with ``LEOFLOW_DAGS_DIR``: DAGs as code without a restart.

A :class:`~leoflow.leadership.LeaderService`: when a replica becomes leader it reads the
directory (:mod:`.dag_directory`) and syncs it — every DAG file, one all-or-nothing fenced
transaction, DAGs of ``LEOFLOW_DAGS_SOURCE`` whose files are gone deleted
(:func:`leoflow.db.stores.dags.sync_dags` with ``prune``) — and from then on reads it again every
:data:`POLL_INTERVAL` seconds, syncing whenever the content hash changed. That is how an
updated ConfigMap (the kubelet swaps the mounted files within about a minute) or a ``git-sync``
checkout reaches the cluster. Polling a hash instead of watching inotify events works the same
on every volume type and costs a few small reads every few seconds.

Outcomes, each counted in ``leoflow_dag_directory_syncs_total{outcome}`` and visible as
cluster events (``GET /api/v2/cluster/events``, the dashboard's Cluster page):

- ``applied``: something changed (event ``dags_synced`` with the counts);
- ``unchanged``: the files changed but the DAGs they define did not;
- ``invalid``: a file does not parse or validate, or defines a DAG another source owns —
  *nothing* is applied, every problem is logged with its file, line and column (event
  ``dags_sync_rejected``, gauge ``leoflow_dag_directory_problems``), and the same content is
  not retried: the next sync happens when the files change again;
- ``failed``: the directory cannot be read (missing, too large) or the database failed; tried
  again at the next poll.

Failure semantics: a newer term (:class:`~leoflow.errors.FencedOut`) ends the service, which
has then written nothing. Whatever the files contain, they never cost the leadership: an
unexpected error while handling them is contained here, logged and counted as ``failed``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from leoflow.db.stores import cluster_events, dags, task_templates
from leoflow.errors import DagOwnershipConflict, DatabaseError, FencedOut
from leoflow.housekeeping.dag_directory import DagDirectoryError, DirectorySnapshot, read_dag_directory
from leoflow.leadership import LeaderContext
from leoflow.metrics.housekeeping import DAG_DIRECTORY_PROBLEMS, DAG_DIRECTORY_SYNCS
from leoflow.model.files import dag_sync
from leoflow.model.files.dag_files import cluster_templates_named, parse_dag_files
from leoflow.model.files.documents import describe
from leoflow.model.spec.reuse import ClusterTemplates

log = logging.getLogger(__name__)

#: Seconds between reads of the directory: a ConfigMap update takes about a minute to reach
#: the volume anyway, so a few seconds more are not noticed, and a read costs little.
POLL_INTERVAL = 5.0
#: Problems written into a ``dags_sync_rejected`` event (the log has all of them).
EVENT_PROBLEMS = 20


class DagDirectorySync:
    """LeaderService: syncs ``directory`` under ``source`` at startup and on every change."""

    name = "dag-directory-sync"

    def __init__(self, directory: Path, source: str, *, poll_interval: float = POLL_INTERVAL) -> None:
        self.directory = directory
        self.source = source
        self.poll_interval = poll_interval

    async def run(self, ctx: LeaderContext) -> None:
        last: str | None = None
        try:
            while True:
                try:
                    last = await self.sync_once(ctx, last)
                except FencedOut:
                    log.info("DAG directory sync stops: fenced out", extra={"term": ctx.term})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:
            # A follower exports 0: only the leader's gauge says something about the files.
            DAG_DIRECTORY_PROBLEMS.set(0)

    async def sync_once(self, ctx: LeaderContext, last: str | None) -> str | None:
        """Read the directory; sync it if its fingerprint differs from ``last``. Returns the new ``last``."""
        try:
            snapshot = await asyncio.to_thread(read_dag_directory, self.directory)
        except DagDirectoryError as exc:
            DAG_DIRECTORY_SYNCS.labels(outcome="failed").inc()
            log.error("cannot read the DAG directory; nothing synced", extra={"error": str(exc)})
            return last
        if snapshot.fingerprint == last:
            return last
        try:
            await self._sync(ctx, snapshot)
        except FencedOut:
            raise
        except DatabaseError as exc:
            DAG_DIRECTORY_SYNCS.labels(outcome="failed").inc()
            log.warning("DAG directory sync failed; retrying", extra={"error": str(exc)[:300]})
            return last
        except Exception:  # boundary: whatever the files contain must never cost the leadership
            DAG_DIRECTORY_SYNCS.labels(outcome="failed").inc()
            log.exception("DAG directory sync failed unexpectedly; waiting for the files to change",
                          extra={"directory": str(self.directory)})
        return snapshot.fingerprint

    async def _sync(self, ctx: LeaderContext, snapshot: DirectorySnapshot) -> None:
        refs = cluster_templates_named(snapshot.files)
        catalog: ClusterTemplates = {}
        if refs:  # uses: cluster/NAME[@V]: read before parsing (the files are parsed off the event loop)
            async with ctx.db.connect() as conn:
                catalog = await task_templates.find_templates(conn, refs)
        dag_set = await asyncio.to_thread(parse_dag_files, snapshot.files, cluster_templates=catalog,
                                          pod_policy=ctx.settings.executor.kubernetes.pod_policy())
        problems = [p.to_json() for p in (*snapshot.problems, *dag_set.errors)]
        if problems:
            await self._rejected(ctx, problems)
            return
        options = dag_sync.SyncOptions(self.source, prune=True)
        try:
            async with ctx.db.fenced(ctx.cluster, ctx.term) as conn:
                plan = await dags.sync_dags(conn, dag_set.dags, options, clock=ctx.clock)
                counts: dict[str, int] = {a: plan.count(a) for a in dag_sync.ACTIONS}
                changed = counts["created"] + counts["changed"] + counts["deleted"] > 0
                if changed:
                    await cluster_events.record_event_async(conn, ctx.cluster, "dags_synced", ctx.node_id, ctx.term,
                                                            {"source": self.source, **counts})
        except DagOwnershipConflict as exc:
            await self._rejected(ctx, exc.problems)
            return
        DAG_DIRECTORY_PROBLEMS.set(0)
        DAG_DIRECTORY_SYNCS.labels(outcome="applied" if changed else "unchanged").inc()
        log.info("DAG directory synced" if changed else "DAG directory unchanged",
                 extra={"directory": str(self.directory), "source": self.source, "counts": counts,
                        "changes": [f"{c.action} {c.dag_id}" for c in plan.changes if c.action != "unchanged"][:100]})

    async def _rejected(self, ctx: LeaderContext, problems: list[dict[str, Any]]) -> None:
        DAG_DIRECTORY_PROBLEMS.set(len(problems))
        DAG_DIRECTORY_SYNCS.labels(outcome="invalid").inc()
        lines = [describe(p) for p in problems]
        log.error("DAG directory rejected; nothing was applied",
                  extra={"directory": str(self.directory), "source": self.source, "count": len(problems),
                         "problems": lines})
        async with ctx.db.fenced(ctx.cluster, ctx.term) as conn:
            await cluster_events.record_event_async(conn, ctx.cluster, "dags_sync_rejected", ctx.node_id, ctx.term,
                                                    {"source": self.source, "count": len(problems),
                                                     "problems": lines[:EVENT_PROBLEMS]})

