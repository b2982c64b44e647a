"""Pod logs into the database before the pods go away: the log shipper (runs on every replica).

A finished try's pod keeps its logs only as long as the pod exists; garbage collection deletes
it once its logs are settled (``logs_shipped_at``) and the retention has passed. The shipper
therefore copies the log tail (``LEOFLOW_TASK_LOG_MAX_BYTES``) of every finished, unshipped try
of this cluster into ``task_logs``. Any replica may ship.

Logs never block each other:

- **each try has its own backoff and attempt budget**: a replica claims due tries in a short
  transaction of its own (:func:`leoflow.db.stores.tries.claim_unshipped`: the attempt is
  counted and the try is pushed :data:`CLAIM_SECONDS` ahead, so no other replica takes it
  meanwhile; the claim is a lease, renewed :data:`RENEWALS_PER_CLAIM` times a claim while its read and
  store go on), commits, and only then reads the logs — no transaction is ever held across a call
  to the API server. A read that fails for a reason that may pass (a ``NotReady`` node answering
  500, no answer, 403) makes that try due again after its own backoff (``backoff_base`` doubling
  up to ``backoff_cap`` seconds, on the database's clock); the other tries are shipped meanwhile;
- **reads run side by side** (``concurrency`` at once, new tries claimed as slots free), so one
  slow read does not hold up the rest;
- **after** ``LEOFLOW_LOG_SHIP_ATTEMPTS`` **failed attempts** the try's logs are marked
  unavailable with the reason (``task_tries.logs_unavailable``; the API shows it) and count as
  settled, so garbage collection proceeds instead of waiting forever while pods pile up.

With a log archive (``LEOFLOW_LOG_ARCHIVE_URL``), the whole log of **every container** of the pod —
init containers and sidecars too — is archived before the tail is stored (:func:`archive_pod_logs`):
after the pod ended, while it still exists, so its garbage collection waits for it. The leader
streams running containers into the archive meanwhile (:mod:`.live_archive`); this then reads
past what is archived already and completes each log.

A pod that no longer exists (404) or whose container never started (400) is settled at once with
a one-line note instead of logs. Logs read while the database is away (a restart, a partition)
are kept and their store retried; a replica that dies mid-read stops renewing its claim, so
another replica ships that try within :data:`CLAIM_SECONDS` (a fixed claim long enough for any
read held a dead replica's tries for five minutes).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from leoflow import tracing
from leoflow.aiotasks import Registry, cancel_and_wait, start_guarded
from leoflow.db.connection.database import Connection, Database
from leoflow.db.stores import task_logs as log_store
from leoflow.db.stores.task_logs import ShippingClaim
from leoflow.errors import DatabaseError
from leoflow.executor.kubernetes.errors import KubernetesError, ObjectNotFound, RequestRefused
from leoflow.executor.kubernetes.kube_client import LOG_READ_TIMEOUT, KubernetesApi
from leoflow.executor.kubernetes.live_archive import archived_end, keep_previous_log
from leoflow.executor.log_archive import LogArchiver
from leoflow.executor.log_tail import CappedOutput, cap_tail
from leoflow.metrics.executor import TASK_LOGS_UNAVAILABLE
from leoflow.settings import Settings
from leoflow.storage.log_chunks import MAX_RESTARTS, attempt_name
from leoflow.storage.objects import ObjectStore

log = logging.getLogger(__name__)

#: Seconds a claim keeps a try from other replicas unless renewed: a lease, renewed while its
#: read (connect 5 s + reads of up to 120 s) and store go on, so two live replicas never read the
#: same log at once, and a replica that died mid-read holds its tries only this long.
CLAIM_SECONDS = 30.0
#: How often a live claim is renewed within one claim's length: three chances before it lapses.
RENEWALS_PER_CLAIM = 3
#: How long logs already read are kept while their store fails (the database away): longer than
#: the claim, so a short outage costs no second read; if the claim lapsed meanwhile and another
#: replica stored the same log first, the late store writes the same log again (never a shorter one).
STORE_RETRY_SECONDS = 150.0
#: Seconds a finished pod's log archive keeps retrying a failing storage before the tail is stored
#: anyway (the archive stays incomplete): shorter than a claim renewed a few times, so a storage
#: outage delays a pod's garbage collection by a minute, not forever.
ARCHIVE_GIVE_UP = 60.0


async def fetch_pod_logs(api: KubernetesApi, pod_name: str, max_bytes: int, *,
                         read_timeout: float = LOG_READ_TIMEOUT) -> CappedOutput:
    """The capped tail of the pod's log, or a one-line note when it will never have one.

    Raises :class:`~.errors.KubernetesError` when the read failed for a reason that may pass
    (5xx, no answer within ``read_timeout``, 403 while RBAC is being fixed). Network only: call
    it outside transactions.
    """
    try:
        tail, size = await api.read_log_tail(pod_name, max_bytes, read_timeout=read_timeout)
    except ObjectNotFound:
        return CappedOutput(f"[leoflow] no logs: pod {pod_name} no longer exists\n", False, 0)
    except RequestRefused as err:
        if err.code != 400:  # 403 (no pods/log access) and the like: may be fixed, try again later
            raise
        return CappedOutput(f"[leoflow] no logs: the container never started ({err.message})\n", False, 0)
    capped = cap_tail(tail, max_bytes)
    return CappedOutput(capped.text, size > max_bytes, size)


async def archive_pod_logs(archiver: LogArchiver, api: KubernetesApi, task_try_id: int, pod: str) -> None:
    """Archive the whole log of every container of ``pod`` (init containers and sidecars too).

    Each log is streamed from the API server into a spool file (never held in memory), then
    shipped by the archiver, which resumes where the index ends: a replica that died mid-way left
    a claim that lapses, and the next one archives what is missing, once. A container whose log
    cannot be read is skipped (logged); the tail in PostgreSQL is stored either way.
    """
    try:
        spec = await api.get_pod(pod)
    except KubernetesError as err:
        log.warning("cannot list the pod's containers to archive their logs", extra={"pod": pod, "error": str(err)})
        return
    if spec is None:
        return
    containers = [c["name"] for group in ("initContainers", "containers")
                  for c in (spec.get("spec", {}).get(group) or [])]
    statuses = [*(spec.get("status", {}).get("initContainerStatuses") or []),
                *(spec.get("status", {}).get("containerStatuses") or [])]
    restarts = {cs.get("name"): int(cs.get("restartCount") or 0) for cs in statuses if isinstance(cs, dict)}
    ended = asyncio.Event()
    ended.set()
    with tempfile.TemporaryDirectory(prefix="leoflow-log-spool-") as spool:
        for container in containers:
            count = restarts.get(container, 0)
            if count > MAX_RESTARTS:
                continue
            if count > 0:  # the run before the last restart, if the leader did not keep it yet
                await keep_previous_log(archiver, api, task_try_id, pod, container, attempt_name(container, count - 1))
            name = attempt_name(container, count)  # the last run's log: ``name#N`` after N restarts
            path = Path(spool) / f"{name}.log"
            try:
                # What the live archive shipped while the pod ran is read past, not written again:
                # the spool is sparse below it and its offsets stay the output's (see .live_archive).
                done = await archived_end(archiver.db, task_try_id, name)
            except DatabaseError:
                done = 0
            if done is None:
                continue  # complete already
            try:
                with path.open("wb") as sink:
                    sink.truncate(done)  # sparse, and as long as the output even if nothing more comes
                    sink.seek(done)
                    await api.copy_log(pod, container, sink, skip=done)
            except (KubernetesError, OSError) as err:
                log.warning("cannot read a container's log to archive it",
                            extra={"pod": pod, "container": name, "error": str(err)[:300]})
                continue
            await archiver.follow_file(task_try_id, name, path, ended, archived=done)
            path.unlink()


async def store_pod_logs(db: Database, task_try_id: int, logs: CappedOutput) -> None:
    """Store a try's final logs (and mark them shipped) in one short transaction."""
    async with db.transaction() as conn:
        await log_store.store_logs(conn, task_try_id, logs.text, truncated=logs.truncated,
                                        size_bytes=logs.size_bytes)


class PodLogShipper:
    """ReplicaService: ships finished pods' logs into ``task_logs`` (see the module docstring)."""

    name = "pod-log-shipper"

    def __init__(self, *, interval: float = 2.0, batch: int = 20, concurrency: int = 4,
                 api: KubernetesApi | None = None, backoff_base: float = 2.0, backoff_cap: float = 60.0,
                 store_retry_base: float = 0.5, claim_seconds: float = CLAIM_SECONDS,
                 archive_give_up: float = ARCHIVE_GIVE_UP) -> None:
        self.interval = interval
        self.claim_seconds = claim_seconds
        self.store_retry_base = store_retry_base
        self.batch = batch
        self.concurrency = concurrency
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._api = api
        #: Seconds a pod's archive keeps retrying a failing storage before its tail is stored anyway.
        self.archive_give_up = archive_give_up
        self._archive_store: ObjectStore | None = None

    async def run(self, settings: Settings, db: Database) -> None:
        api = self._api or KubernetesApi(settings, concurrency=self.concurrency)
        readers: Registry = set()
        try:
            while True:
                free = self.concurrency - len(readers)
                claimed: list[ShippingClaim] = []
                if free > 0:
                    try:
                        claimed = await self._claim(settings, db, free)
                    except DatabaseError as exc:  # try again next round
                        log.warning("claiming logs to ship failed", extra={"error": str(exc)[:300]})
                for claim in claimed:
                    start_guarded(self.ship(settings, db, api, claim), f"ship-logs:{claim.record.task_try_id}",
                                  may_return=True, registry=readers)
                if readers:  # wake when a read ends (a slot is free) or after the interval
                    await asyncio.wait(set(readers), timeout=self.interval, return_when=asyncio.FIRST_COMPLETED)
                else:
                    await asyncio.sleep(self.interval)
        finally:
            await cancel_and_wait(readers)
            if self._api is None:
                api.close()

    async def ship_once(self, settings: Settings, db: Database, api: KubernetesApi) -> int:
        """Claim one batch and ship it (reads side by side); returns how many tries were settled."""
        claimed = await self._claim(settings, db, self.batch)
        gate = asyncio.Semaphore(self.concurrency)

        async def one(claim: ShippingClaim) -> bool:
            async with gate:
                return await self.ship(settings, db, api, claim)

        return sum(await asyncio.gather(*(one(c) for c in claimed)))

    async def _claim(self, settings: Settings, db: Database, limit: int) -> list[ShippingClaim]:
        async with db.transaction() as conn:
            return await log_store.claim_unshipped(conn, settings.cluster.name, limit=limit,
                                                        claim_for=self.claim_seconds)

    async def ship(self, settings: Settings, db: Database, api: KubernetesApi, claim: ShippingClaim) -> bool:
        """Read one claimed try's log (no transaction open) and settle it; True once settled.

        The claim is renewed while the read and the store go on; the renewal stops before a
        failure is recorded (that write sets the try's own backoff, which a renewal would undo).
        """
        record = claim.record
        assert record.executor_ref is not None
        keeper = {start_guarded(self._keep_claim(db, claim), f"keep-log-claim:{record.task_try_id}")}
        try:
            try:
                logs = await fetch_pod_logs(api, record.executor_ref, settings.executor.task_log_max_bytes)
            except KubernetesError as err:
                await cancel_and_wait(keeper)
                return await self._failed(settings, db, claim, err)
            archiver = self._log_archiver(settings, db)
            if archiver is not None:
                with tracing.in_try(record.key):  # upload spans: the try's children (leoflow.tracing)
                    await archive_pod_logs(archiver, api, record.task_try_id, record.executor_ref)
            return await self._store(db, claim, logs)
        finally:
            await cancel_and_wait(keeper)

    def _log_archiver(self, settings: Settings, db: Database) -> LogArchiver | None:
        config = settings.log_archive
        if config.active_url is None:
            return None
        if self._archive_store is None:
            try:
                self._archive_store = ObjectStore(config.active_url, timeout=config.timeout)
            except (ValueError, OSError) as exc:
                log.error("the log archive cannot be used; pod logs are kept in the database only",
                          extra={"error": str(exc)[:300]})
                return None
        return LogArchiver(self._archive_store, db, settings.cluster.name, give_up_after=self.archive_give_up)

    async def _keep_claim(self, db: Database, claim: ShippingClaim) -> None:
        """Renew the claim :data:`RENEWALS_PER_CLAIM` times a claim until cancelled (a lease: see the module)."""
        while True:
            await asyncio.sleep(self.claim_seconds / RENEWALS_PER_CLAIM)
            try:
                await _in_transaction(db, lambda conn: log_store.retry_shipping_later(
                    conn, claim.record.task_try_id, delay=self.claim_seconds))
            except DatabaseError as exc:  # the next renewal may get through; if none does, the claim lapses
                log.warning("could not renew a log shipping claim",
                            extra={"pod": claim.record.executor_ref, "error": str(exc)[:300]})

    async def _store(self, db: Database, claim: ShippingClaim, logs: CappedOutput) -> bool:
        """Store logs already read, retrying while the database is away (a restart, a partition).

        The read succeeded; giving up at the first database error would mean reading the log
        again later. So the store is retried with backoff for :data:`STORE_RETRY_SECONDS`; only
        then is the claim left to lapse, and the next attempt reads the log again.
        """
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + STORE_RETRY_SECONDS
        delay = self.store_retry_base
        while True:
            try:
                await store_pod_logs(db, claim.record.task_try_id, logs)
                return True
            except DatabaseError as exc:
                extra = {"pod": claim.record.executor_ref, "error": str(exc)[:300]}
                if loop.time() + delay > give_up_at:
                    log.warning("could not store shipped logs; the claim will expire and they are read again",
                                extra=extra)
                    return False
                log.warning("could not store shipped logs; will retry", extra={**extra, "retry_in": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_cap)

    async def _failed(self, settings: Settings, db: Database, claim: ShippingClaim, err: KubernetesError) -> bool:
        record, budget = claim.record, settings.executor.log_ship_attempts
        extra = {"pod": record.executor_ref, "code": err.code, "error": err.message[:300], "attempt": claim.attempt}
        try:
            if claim.attempt >= budget:
                reason = (f"the pod's log could not be read in {claim.attempt} attempts; last error: "
                          f"{err.code} {err.reason}: {err.message}")
                log.warning("pod logs unavailable; giving up", extra=extra)
                TASK_LOGS_UNAVAILABLE.inc()
                await _in_transaction(db, lambda conn: log_store.mark_logs_unavailable(
                    conn, record.task_try_id, reason))
                return True
            delay = min(self.backoff_cap, self.backoff_base * 2 ** (claim.attempt - 1))
            log.warning("could not read pod logs; will retry", extra={**extra, "retry_in": delay})
            await _in_transaction(db, lambda conn: log_store.retry_shipping_later(
                conn, record.task_try_id, delay=delay))
        except DatabaseError as exc:  # the claim expires; the attempt was counted
            log.warning("could not record a log shipping failure", extra={**extra, "db_error": str(exc)[:300]})
        return False


async def _in_transaction(db: Database, write: Callable[[Connection], Awaitable[None]]) -> None:
    async with db.transaction() as conn:
        await write(conn)
