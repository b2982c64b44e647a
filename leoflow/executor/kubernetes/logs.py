"""Pod logs into the database before the pods go away: the log shipper (runs on every replica).

A finished try's pod keeps its logs only as long as the pod exists; garbage collection deletes
it once ``logs_shipped_at`` is set and the retention has passed. The shipper therefore copies
the log tail (``LEOFLOW_TASK_LOG_MAX_BYTES``) of every finished, unshipped try of this cluster
into ``task_logs``. Any replica may ship: each batch is claimed with ``FOR UPDATE SKIP LOCKED``
inside one transaction, so two replicas never ship the same try and a replica that dies
mid-batch simply releases its rows (its transaction aborts) for another to take.

Failure semantics: a pod that no longer exists (404) or whose container never started (400) is
recorded with a one-line note instead of logs, so the try does not block GC forever; any other
API error leaves the try unshipped for the next round.
"""

from __future__ import annotations

import asyncio
import logging

from leoflow.db import executor_store
from leoflow.db.database import Connection, Database
from leoflow.errors import DatabaseError
from leoflow.executor.kubernetes.client import KubernetesApi
from leoflow.executor.kubernetes.errors import KubernetesError, ObjectNotFound, RequestRefused
from leoflow.executor.output import CappedOutput, cap_tail
from leoflow.settings import Settings

log = logging.getLogger(__name__)


async def fetch_pod_logs(api: KubernetesApi, pod_name: str, max_bytes: int) -> CappedOutput:
    """The capped tail of the pod's log, or a one-line note when it will never have one.

    Raises :class:`~.errors.KubernetesError` when the read failed for a reason that may pass
    (5xx, no answer, 403 while RBAC is being fixed). Network only: call it outside transactions.
    """
    try:
        tail, size = await api.read_log_tail(pod_name, max_bytes)
    except ObjectNotFound:
        return CappedOutput(f"[leoflow] no logs: pod {pod_name} no longer exists\n", False, 0)
    except RequestRefused as err:
        if err.code != 400:  # 403 (no pods/log access) and the like: may be fixed, try again later
            raise
        return CappedOutput(f"[leoflow] no logs: the container never started ({err.message})\n", False, 0)
    capped = cap_tail(tail, max_bytes)
    return CappedOutput(capped.text, size > max_bytes, size)


async def store_pod_logs(db: Database, task_try_id: int, logs: CappedOutput) -> None:
    """Store a try's final logs (and mark them shipped) in one short transaction."""
    async with db.transaction() as conn:
        await executor_store.store_logs(conn, task_try_id, logs.text, truncated=logs.truncated,
                                        size_bytes=logs.size_bytes)


async def ship_pod_logs(conn: Connection, api: KubernetesApi, task_try_id: int, pod_name: str,
                        max_bytes: int) -> bool:
    """Store the capped tail of the pod's log (or why there is none); False on a transient error."""
    try:
        logs = await fetch_pod_logs(api, pod_name, max_bytes)
    except KubernetesError as err:
        log.warning("could not read pod logs", extra={"pod": pod_name, "code": err.code, "error": err.message})
        return False
    await executor_store.store_logs(conn, task_try_id, logs.text, truncated=logs.truncated, size_bytes=logs.size_bytes)
    return True


class PodLogShipper:
    """ReplicaService: ships finished pods' logs into ``task_logs``."""

    name = "pod-log-shipper"

    def __init__(self, *, interval: float = 2.0, batch: int = 20, api: KubernetesApi | None = None) -> None:
        self.interval = interval
        self.batch = batch
        self._api = api

    async def run(self, settings: Settings, db: Database) -> None:
        api = self._api or KubernetesApi(settings, concurrency=4)
        try:
            while True:
                try:
                    shipped = await self.ship_once(settings, db, api)
                except DatabaseError as exc:  # try again next round
                    log.warning("log shipping round failed", extra={"error": str(exc)})
                    shipped = 0
                if shipped < self.batch:
                    await asyncio.sleep(self.interval)
        finally:
            if self._api is None:
                api.close()

    async def ship_once(self, settings: Settings, db: Database, api: KubernetesApi) -> int:
        """Ship one batch; returns how many tries were shipped."""
        max_bytes = settings.executor.task_log_max_bytes
        shipped = 0
        async with db.transaction() as conn:
            for record in await executor_store.lock_unshipped(conn, settings.cluster.name, self.batch):
                assert record.executor_ref is not None
                if await ship_pod_logs(conn, api, record.task_try_id, record.executor_ref, max_bytes):
                    shipped += 1
        return shipped
