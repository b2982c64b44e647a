"""How a try's pod comes to exist: recorded in fenced batches, created in fenced windows, or adopted on 409.

Part of :class:`leoflow.executor.kubernetes.KubernetesExecutor` (a mixin, split out to keep each
module about one thing); see that module's docstring for the guarantees. In short:

- launches are recorded on their tries in batches of :data:`RECORD_BATCH`, one transaction each,
  which checks the fencing term first (an ex-leader records nothing and creates nothing) and
  decides each pod's namespace (its DAG's team's: :mod:`.placement`), recorded in its
  ``executor_ref``; a namespace not watched yet is listed and watched before the pod is created;
- **every create call is made inside a fenced window** (:mod:`.windows`): a transaction holding
  the ``cluster_leadership`` row ``FOR SHARE`` until the API server has answered, so a pod of an
  old term is always created *before* a newer term commits, never after — also when the term
  ends with creates in flight (the window waits for them, the executor's ``stop`` drains them);
- **a try is failed on evidence, never on absence.** A try an earlier leader claimed but whose
  pod does not exist is created now, under the same deterministic name: if the earlier leader's
  create did happen after all, this one is answered ``409 AlreadyExists`` and the pod is
  adopted — never two pods, never a failed try. Only a try a leader recorded *running* (its pod
  existed) and whose pod is gone is reported failed: it was deleted while no leader watched, and
  running it again would run it twice;
- ``409 AlreadyExists`` → GET and adopt when the labels name this try of this cluster;
  403/422/other 4xx fail the try with the API's message; 409 (other), 429 (Retry-After), 5xx, no
  response and a database failure are retried with capped exponential backoff until
  ``create_deadline``, each attempt in a fenced window.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from leoflow import tracing
from leoflow.db.stores import tries as try_store
from leoflow.errors import DatabaseError, FencedOut, LeoflowError, ValidationFailed, is_leader_fault
from leoflow.executor.artifacts import await_manifest, resolve_inputs
from leoflow.executor.failures import try_error
from leoflow.executor.kubernetes import pods
from leoflow.executor.kubernetes.artifact_containers import IMAGE, UPLOAD_GRACE, with_artifacts
from leoflow.executor.kubernetes.errors import CallNotSent, KubernetesError, ObjectAlreadyExists
from leoflow.executor.kubernetes.kube_client import KubernetesApi
from leoflow.executor.kubernetes.placement import Placements, PodPlace
from leoflow.executor.kubernetes.windows import FencedCalls
from leoflow.leadership import LeaderContext
from leoflow.metrics.executor import POD_CREATE_CONFLICTS, PODS_CREATED
from leoflow.model.artifacts.declared import TaskArtifacts
from leoflow.model.spec.pod_policy import check_task_pod
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey, TryState
from leoflow.settings import KubernetesSettings
from leoflow.storage.objects import ObjectStore

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
    logs_saved: bool = False
    stuck_since: float | None = None
    last: StatusUpdate | None = None
    #: The pod's ref (:meth:`KubernetesApi.ref`): its name, prefixed by ``namespace/`` outside the cluster's.
    ref: str = ""
    place: PodPlace | None = None
    #: The task's artifacts (from its launch); its end waits for the upload sidecar's manifest.
    artifacts: TaskArtifacts | None = None
    indexing: bool = False

    def __post_init__(self) -> None:
        self.ref = self.ref or self.name


class PodCreation:
    """The creating half of the Kubernetes executor."""

    api: KubernetesApi
    namespace: str
    placements: Placements
    k8s: KubernetesSettings
    create_deadline: float
    _tracked: dict[str, Tracked]
    _to_record: list[tuple[TaskLaunch, Tracked]]
    #: Seconds a try's end waits for its upload sidecar's manifest (the sidecar's grace, and a minute).
    artifact_wait: float = UPLOAD_GRACE + 60

    # Provided by KubernetesExecutor.
    def _require_ctx(self) -> LeaderContext:
        raise NotImplementedError

    def _require_calls(self) -> FencedCalls:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, may_return: bool = False) -> asyncio.Task[Any]:
        raise NotImplementedError

    async def _finish(self, t: Tracked, state: TryState, exit_code: int | None, reason: str | None, *,
                      outputs: bytes | None = None) -> None:
        raise NotImplementedError

    async def _seen(self, t: Tracked, pod: dict[str, Any]) -> None:
        raise NotImplementedError

    async def _ensure_watched(self, namespaces: set[str]) -> None:
        raise NotImplementedError

    async def _record_launches(self) -> None:
        """Fenced, batched: note the pod names on the tries, then create each pod."""
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
                    places = await self.placements.for_dags(conn, [launch.key.dag_id for launch, _ in group])
                    for launch, t in group:
                        t.place = places[launch.key.dag_id]
                        t.ref = self.api.ref(t.place.namespace, t.name)
                    claims = await try_store.record_launches(
                        conn, cluster=ctx.cluster, term=term, node_id=ctx.node_id,
                        launches=[(launch.task_try_id, t.ref, launch.key) for launch, t in group])
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
        await self._ensure_watched({t.place.namespace for _, t in group if t.place is not None})
        for launch, t in group:
            claim = claims.get(launch.task_try_id)
            if claim is None:
                await self._finish(t, "failed", None, "the task try does not exist in the database")
            elif t.cancel_requested or claim.state == "cancelling":
                await self._finish(t, "failed", None, "cancelled")
            elif claim.was_claimed and claim.seen_running:
                self._spawn(self._adopt_claimed(t), f"k8s-adopt:{t.name}", may_return=True)
            else:  # new, or claimed before but never seen: create (a 409 means it exists: adopt it)
                with tracing.in_try(launch.key):  # its spans are the try's (leoflow.tracing)
                    self._spawn(self._create(launch, t), f"k8s-create:{t.name}", may_return=True)

    async def _create(self, launch: TaskLaunch, t: Tracked) -> None:
        """Create the pod (or adopt it on 409), retrying transient failures until ``create_deadline``."""
        ctx = self._require_ctx()
        try:
            check_task_pod(launch.pod, self.k8s.pod_policy())  # a DAG stored before the policy: this try fails
            place = t.place or self.placements.for_team(None)
            body = pods.pod_spec(ctx.cluster, place.namespace, launch, service_account=place.service_account,
                                 image_pull_secrets=self.k8s.image_pull_secrets, template=place.template)
            if launch.artifacts:  # the fetch init container and the upload sidecar (.artifact_containers)
                t.artifacts = launch.artifacts
                inputs = await resolve_inputs(ctx.db, launch)
                body = with_artifacts(body, launch, cluster=ctx.cluster, inputs=inputs,
                                      archive_url=ctx.settings.log_archive.active_url,
                                      image=self.k8s.artifacts_image or IMAGE)
        except ValidationFailed as exc:  # never sent: the spec's fields and templates do not add up, or the policy
            await self._finish(t, "failed", None, f"the task's pod is invalid, not created: {exc}"[:1000])
            return
        except Exception as exc:  # containment: a pod this try's data cannot build fails the try, not the term
            await self._finish(t, "failed", None, try_error(t.key, exc, doing="building its pod"))
            return
        deadline = time.monotonic() + self.create_deadline
        attempt = 0
        while not t.final:
            error: LeoflowError
            try:
                with tracing.span("leoflow.pod.create", pod=t.name):
                    created = await self._require_calls().call(
                        lambda send_by: self.api.create_pod(body, send_by=send_by))
                PODS_CREATED.inc()
                await self._seen(t, created)
                return
            except ObjectAlreadyExists as err:
                existing = await self._get_quietly(t.ref)
                if existing is not None:
                    with tracing.span("leoflow.pod.adopt", pod=t.name):
                        await self._adopt_existing(t, existing)
                    return
                error = err  # deleted between our create and our get: create again
            except FencedOut as exc:
                log.warning("not creating pod: fenced out", extra={"pod": t.name, "error": str(exc)})
                self._tracked.pop(t.name, None)
                return
            except CallNotSent:  # the executor is stopping: the next leader resubmits the try
                self._tracked.pop(t.name, None)
                return
            except KubernetesError as err:
                if not err.retryable:
                    await self._finish(t, "failed", None, f"Kubernetes refused the pod ({err.code} {err.reason}): "
                                       f"{err.message}")
                    return
                error = err
            except DatabaseError as err:  # no fenced window could be opened: back off and try again
                error = err
            except Exception as exc:  # containment: whatever else creating this one pod raises fails this try
                if is_leader_fault(exc):
                    raise
                await self._finish(t, "failed", None, try_error(t.key, exc, doing="creating its pod"))
                return
            attempt += 1
            if time.monotonic() > deadline:
                await self._finish(t, "failed", None, f"pod not created after {attempt} attempts: {error}"[:500])
                return
            retry_after = error.retry_after if isinstance(error, KubernetesError) else None
            delay = retry_after if retry_after is not None else min(5.0, 0.1 * 2 ** attempt)
            log.info("retrying pod create", extra={"pod": t.name, "error": str(error)[:200], "delay": delay})
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))

    async def _adopt_claimed(self, t: Tracked) -> None:
        """A try a leader saw running: adopt its pod, or report it gone (the evidence); never re-create."""
        deadline = time.monotonic() + self.create_deadline
        attempt = 0
        while True:
            try:
                existing = await self.api.get_pod(t.ref)
                break
            except KubernetesError as err:
                attempt += 1
                if not err.retryable or time.monotonic() > deadline:  # a later leader's reconcile decides
                    log.warning("could not read a claimed try's pod", extra={"pod": t.name, "error": str(err)[:200]})
                    self._tracked.pop(t.name, None)
                    return
                await asyncio.sleep(min(5.0, 0.1 * 2 ** attempt))
        if existing is None:
            await self._finish(t, "failed", None, "the pod of this try ran (a leader saw it running) and is gone: "
                               "deleted while no leader watched; not launching it twice")
            return
        await self._adopt_existing(t, existing)

    async def _adopt_existing(self, t: Tracked, pod: dict[str, Any]) -> None:
        ctx = self._require_ctx()
        if not pods.is_same_try(pod, ctx.cluster, t.key):
            labels = pod.get("metadata", {}).get("labels") or {}
            await self._finish(t, "failed", None, f"pod name {t.name} is taken by another object (labels {labels})")
            return
        POD_CREATE_CONFLICTS.inc()
        await self._seen(t, pod)

    def _end_with_artifacts(self, t: Tracked, outcome: pods.PodOutcome) -> bool:
        """Whether the try's end waits for its upload sidecar (then it is under way beside the loop).

        The ``task`` container has exited; the try is reported once the sidecar's manifest is indexed
        (leoflow.executor.artifacts.await_manifest), a success failing when a required output is not
        stored. A try adopted by a later leader has no launch: its outputs are read back from its
        pod's upload sidecar (artifact_containers.declared_outputs), so it is judged the same way."""
        if t.artifacts is None or not t.artifacts.outputs or t.task_try_id is None or outcome.state is None:
            return False
        if not t.indexing:
            t.indexing = True
            self._spawn(self._index_then_finish(t, outcome), f"k8s-artifacts:{t.name}", may_return=True)
        return True

    async def _index_then_finish(self, t: Tracked, outcome: pods.PodOutcome) -> None:
        ctx = self._require_ctx()
        assert t.artifacts is not None and t.task_try_id is not None and outcome.state is not None
        url = ctx.settings.log_archive.active_url
        store = ObjectStore(url, timeout=ctx.settings.log_archive.timeout) if url else None
        problem = await await_manifest(ctx.db, store, ctx.cluster, t.task_try_id, t.artifacts,
                                       timeout=self.artifact_wait)
        state, reason, outputs = outcome.state, outcome.reason, outcome.outputs
        if problem is not None and state == "success":
            state, reason, outputs = "failed", problem, None
        if not t.final:
            await self._finish(t, state, outcome.exit_code, reason, outputs=outputs)

    async def _get_quietly(self, ref: str) -> dict[str, Any] | None:
        try:
            return await self.api.get_pod(ref)
        except KubernetesError:
            return None
