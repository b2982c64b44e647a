"""How a try's pod comes to exist: fenced in batches, created with retries, or adopted on 409.

Part of :class:`leoflow.executor.kubernetes.KubernetesExecutor` (a mixin, split out to keep each
module about one thing); see that module's docstring for the guarantees. In short:

- launches are recorded on their tries in batches of :data:`RECORD_BATCH`, one transaction each,
  which checks the fencing term first (an ex-leader records nothing and creates nothing);
- **every create call happens inside a fenced window**: a transaction that took the
  ``cluster_leadership`` row ``FOR SHARE`` (:func:`check_term_async`) and stays open until the
  API server has answered. A new leader bumps that row with an ``UPDATE``, which waits for the
  window to close; so a pod of an old term is always created *before* the newer term commits,
  never after (a keepalive noticing the loss a few hundred ms late cannot matter). The first
  attempt of a batch shares one window; each retry opens its own;
- a try an earlier leader already recorded is adopted by name if its pod exists, else reported
  failed (never created twice);
- ``409 AlreadyExists`` → GET and adopt when the labels name this try of this cluster;
  403/422/other 4xx fail the try with the API's message; 409 (other), 429 (Retry-After), 5xx and
  no response are retried with capped exponential backoff until ``create_deadline``, each retry
  after re-checking the fence.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from leoflow.db import executor_store
from leoflow.errors import DatabaseError, FencedOut
from leoflow.executor.kubernetes import pods
from leoflow.executor.kubernetes.client import KubernetesApi
from leoflow.executor.kubernetes.errors import KubernetesError, ObjectAlreadyExists
from leoflow.leadership import LeaderContext
from leoflow.metrics.executor import POD_CREATE_CONFLICTS, PODS_CREATED
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey, TryState
from leoflow.settings import KubernetesSettings

log = logging.getLogger(__name__)

#: Launches recorded (and fenced) per database transaction.
RECORD_BATCH = 256


@dataclass
class Tracked:
    """What this executor knows about one try's pod."""

    key: TryKey
    name: str
    task_try_id: int | None
    timeout: float | None = None
    created_at: float | None = None  # monotonic time the pod was known to exist
    reported: str | None = None
    final: bool = False
    killing: bool = False
    cancel_requested: bool = False
    stuck_since: float | None = None
    last: StatusUpdate | None = None
    last_error: KubernetesError | None = None


class PodCreation:
    """The creating half of the Kubernetes executor."""

    api: KubernetesApi
    namespace: str
    k8s: KubernetesSettings
    create_deadline: float
    _slots: asyncio.Semaphore
    _tracked: dict[str, Tracked]
    _to_record: list[tuple[TaskLaunch, Tracked]]

    # Provided by KubernetesExecutor.
    def _require_ctx(self) -> LeaderContext:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, may_return: bool = False) -> asyncio.Task[Any]:
        raise NotImplementedError

    async def _finish(self, t: Tracked, state: TryState, exit_code: int | None, reason: str | None) -> None:
        raise NotImplementedError

    async def _seen(self, t: Tracked, pod: dict[str, Any]) -> None:
        raise NotImplementedError

    async def _record_launches(self) -> None:
        """Fenced, batched: note the pod names on the tries, then create each pod (bounded)."""
        while self._to_record:
            batch, self._to_record = self._to_record[:RECORD_BATCH], self._to_record[RECORD_BATCH:]
            for term in sorted({launch.term for launch, _ in batch}):
                await self._record_group([(launch, t) for launch, t in batch if launch.term == term], term)

    async def _record_group(self, group: list[tuple[TaskLaunch, Tracked]], term: int) -> None:
        ctx = self._require_ctx()
        deadline = time.monotonic() + self.create_deadline
        attempt = 0
        while True:
            try:
                async with ctx.db.transaction() as conn:
                    claimed = await executor_store.record_launches(
                        conn, cluster=ctx.cluster, term=term, node_id=ctx.node_id,
                        launches=[(launch.task_try_id, t.name) for launch, t in group])
                break
            except FencedOut as exc:
                log.warning("not creating pods: fenced out", extra={"pods": len(group), "error": str(exc)})
                for _, t in group:
                    self._tracked.pop(t.name, None)
                return
            except DatabaseError as exc:  # the database is unreachable or failing: retry, then fail the tries
                attempt += 1
                if time.monotonic() > deadline:
                    for _, t in group:
                        await self._finish(t, "failed", None, f"could not record the launch: {exc}"[:500])
                    return
                log.warning("recording launches failed; retrying", extra={"pods": len(group), "error": str(exc)})
                await asyncio.sleep(min(5.0, 0.2 * 2 ** attempt))
        to_create: list[tuple[TaskLaunch, Tracked, bool]] = []
        for launch, t in group:
            if launch.task_try_id not in claimed:
                await self._finish(t, "failed", None, "the task try does not exist in the database")
            elif t.cancel_requested:
                await self._finish(t, "failed", None, "cancelled")
            else:
                to_create.append((launch, t, claimed[launch.task_try_id]))
        if not to_create:
            return
        retry: list[tuple[TaskLaunch, Tracked, bool]] = []
        try:
            # One fenced window for the batch's first attempts (see the module docstring).
            async with ctx.db.fenced(ctx.cluster, term):
                outcomes = await asyncio.gather(*(self._attempt(launch, t, was_claimed)
                                                  for launch, t, was_claimed in to_create))
            retry = [item for item, done in zip(to_create, outcomes, strict=True) if not done]
        except FencedOut as exc:
            log.warning("not creating pods: fenced out", extra={"pods": len(to_create), "error": str(exc)})
            for _, t, _ in to_create:
                self._tracked.pop(t.name, None)
            return
        except DatabaseError as exc:  # the window's database connection failed: retry each pod
            log.warning("fenced create window failed; retrying pods one by one", extra={"error": str(exc)})
            retry = [item for item in to_create if not item[1].final and item[1].created_at is None]
        for launch, t, was_claimed in retry:
            self._spawn(self._create(launch, t, was_claimed, first_attempt_done=True), f"k8s-create:{t.name}",
                        may_return=True)

    async def _attempt(self, launch: TaskLaunch, t: Tracked, was_claimed: bool) -> bool:
        """One create (or adopt) attempt, to be called inside a fenced window.

        Returns True when the try is settled (created, adopted or failed), False to retry.
        """
        ctx = self._require_ctx()
        async with self._slots:
            try:
                if was_claimed:  # launched by an earlier leader (or an earlier executor)
                    existing = await self.api.get_pod(t.name)
                    if existing is None:
                        await self._finish(t, "failed", None, "the pod of this try was launched before and is "
                                           "gone; not launching it twice")
                        return True
                    await self._adopt_existing(t, existing)
                    return True
                body = pods.pod_spec(ctx.cluster, self.namespace, launch, service_account=self.k8s.service_account,
                                     image_pull_secrets=self.k8s.image_pull_secrets)
                created = await self.api.create_pod(body)
                PODS_CREATED.inc()
                await self._seen(t, created)
                return True
            except ObjectAlreadyExists as err:
                existing = await self._get_quietly(t.name)
                if existing is not None:
                    await self._adopt_existing(t, existing)
                    return True
                t.last_error = err  # deleted between our create and our get: create again
                return False
            except KubernetesError as err:
                if not err.retryable:
                    await self._finish(t, "failed", None, f"Kubernetes refused the pod ({err.code} {err.reason}): "
                                       f"{err.message}")
                    return True
                t.last_error = err
                return False

    async def _create(self, launch: TaskLaunch, t: Tracked, was_claimed: bool, *,
                      first_attempt_done: bool = False) -> None:
        """Retry a create with capped exponential backoff; every attempt in its own fenced window."""
        ctx = self._require_ctx()
        deadline = time.monotonic() + self.create_deadline
        attempt = 1 if first_attempt_done else 0
        while not t.final:
            if attempt > 0:
                err = t.last_error
                if time.monotonic() > deadline:
                    await self._finish(t, "failed", None, f"pod not created after {attempt} attempts: {err}")
                    return
                retry_after = err.retry_after if err is not None else None
                delay = retry_after if retry_after is not None else min(5.0, 0.1 * 2 ** attempt)
                log.info("retrying pod API call", extra={"pod": t.name, "code": getattr(err, "code", None),
                                                         "delay": delay})
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            try:
                async with ctx.db.fenced(ctx.cluster, launch.term):
                    if await self._attempt(launch, t, was_claimed):
                        return
            except FencedOut as exc:
                log.warning("not creating pod: fenced out", extra={"pod": t.name, "error": str(exc)})
                self._tracked.pop(t.name, None)
                return
            except DatabaseError as exc:  # the database failed: back off and try again
                log.warning("fenced create failed; retrying", extra={"pod": t.name, "error": str(exc)})
            attempt += 1

    async def _adopt_existing(self, t: Tracked, pod: dict[str, Any]) -> None:
        ctx = self._require_ctx()
        if not pods.is_same_try(pod, ctx.cluster, t.key):
            labels = pod.get("metadata", {}).get("labels") or {}
            await self._finish(t, "failed", None, f"pod name {t.name} is taken by another object (labels {labels})")
            return
        POD_CREATE_CONFLICTS.inc()
        await self._seen(t, pod)

    async def _get_quietly(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.api.get_pod(name)
        except KubernetesError:
            return None

