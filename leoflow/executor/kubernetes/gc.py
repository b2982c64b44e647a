"""Garbage collection of finished task pods (a leader-only singleton service).

A finished try's pod is deleted once its logs are settled (``logs_shipped_at``: shipped, or marked
unavailable by the shipper) and ``LEOFLOW_K8S_POD_RETENTION`` has passed since the try ended
(measured on the database's clock, so a leader whose clock is off collects nothing early). Only tries claimed by this
cluster are candidates, and before deleting, the pod itself is read back: it is deleted only if
its labels name this cluster and this try (and with a uid precondition, so a pod re-created
under the same name in between is not touched). Another cluster's pods in the same namespace
are therefore never deleted, even if names collided. A pod in a team's namespace is looked for
there, and only there: the try's ``executor_ref`` records where it was created (:mod:`.placement`).

Failure semantics: API errors leave the try for the next round. Deletes go through the
executor's fenced windows (:mod:`.windows`) and the "deleted" mark is a fenced write, so an
ex-leader deletes nothing and stops at its first batch (FencedOut ends the service).
"""

from __future__ import annotations

import asyncio
import logging

from leoflow.db.stores import tries as try_store
from leoflow.errors import DatabaseError, FencedOut
from leoflow.executor.kubernetes import pods
from leoflow.executor.kubernetes.errors import KubernetesError
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.leadership import LeaderContext

log = logging.getLogger(__name__)
#: Pods examined and deleted at once (their deletes share fenced windows).
GC_CONCURRENCY = 8


class PodGarbageCollector:
    """LeaderService: deletes shipped, retained-long-enough pods of this cluster."""

    name = "pod-gc"

    def __init__(self, executor: KubernetesExecutor, *, interval: float = 30.0, batch: int = 200) -> None:
        self.executor = executor
        self.interval = interval
        self.batch = batch

    async def run(self, ctx: LeaderContext) -> None:
        while True:
            try:
                collected = await self.collect_once(ctx)
            except FencedOut:
                log.info("pod GC stops: fenced out", extra={"term": ctx.term})
                return
            except (DatabaseError, KubernetesError) as exc:  # try again next round
                log.warning("pod GC round failed", extra={"error": str(exc)})
                collected = 0
            if collected < self.batch:
                await asyncio.sleep(self.interval)

    async def collect_once(self, ctx: LeaderContext) -> int:
        """Delete one batch of due pods; returns how many tries were collected."""
        retention = ctx.settings.executor.kubernetes.pod_retention
        async with ctx.db.connect() as conn:
            due = await try_store.gc_candidates(conn, ctx.cluster, retention=retention, limit=self.batch)
        # Side by side (bounded), so the deletes share fenced windows instead of one window each.
        gate = asyncio.Semaphore(GC_CONCURRENCY)

        async def collect(record: try_store.TryRecord) -> int | None:
            async with gate:
                return record.task_try_id if await self._collect(ctx, record) else None

        done = [i for i in await asyncio.gather(*(collect(r) for r in due)) if i is not None]
        if done:
            async with ctx.db.transaction() as conn:
                await try_store.mark_resources_deleted(conn, cluster=ctx.cluster, term=ctx.term, task_try_ids=done)
        return len(done)

    async def _collect(self, ctx: LeaderContext, record: try_store.TryRecord) -> bool:
        """Delete one try's pod if it is still there and really its; False to try again next round."""
        name = record.executor_ref or ""  # the pod's ref: namespace/name outside the cluster's namespace
        try:
            pod = await self.executor.api.get_pod(name)
            if pod is not None and pods.is_same_try(pod, ctx.cluster, record.key):
                await self.executor.delete_pod_fenced(name, uid=pod["metadata"].get("uid"), grace_seconds=0)
            elif pod is not None:
                log.warning("not collecting a pod that is not this try's", extra={"pod": name})
        except KubernetesError as err:
            log.warning("pod GC could not delete", extra={"pod": name, "code": err.code})
            return False
        return True
