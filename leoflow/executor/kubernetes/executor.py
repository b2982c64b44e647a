"""The Kubernetes executor: one pod per task try, named deterministically, adopted on conflict.

Runs only on the leader, for one fencing term (``start`` … ``stop``). Promises:

- **Never two pods for one try.** The pod name is a pure function of (cluster, DAG, run, task,
  try) (:mod:`.naming`). A create answered 409 ``AlreadyExists`` GETs the pod and adopts it when
  its labels name the same try of the same cluster (``leoflow_pod_create_conflicts_total``);
  any other owner fails the try with a clear reason.
- **A try fails on evidence, never on absence.** A try an earlier leader claimed whose pod does
  not exist is created by this one (same name: a late create of the old term is a 409, adopted);
  only a try a leader recorded *running* whose pod is gone, or a pod deleted by someone else
  while we watch, is reported failed (see :mod:`.create`).
- **Fenced, also in flight.** Every create and delete is made inside a fenced window
  (:mod:`.windows`): the API server has answered before any newer term can commit, an ex-leader
  sends nothing, and :meth:`stop` lets no new call start and waits for those in flight (each
  bounded by a quarter of the lease) before the replica hands leadership over.
- **Reconcile first.** :meth:`start` lists the cluster's pods by label, fresh from the API
  server, before anything is submitted: pods of live tries are adopted and reported, live pods
  of finished tries (or of tries the database does not know) are deleted, and claimed tries a
  leader saw running whose pods are gone are reported failed. Claimed tries never seen running
  are left to the scheduler, which resubmits them (they are still ``queued``).
- **Namespaces.** A team's pods run in its namespace (:mod:`.placement`); the cluster's own
  namespace holds the rest. Every namespace is listed and watched on its own — *one watch per
  namespace*, not one cluster-wide watch: the chart grants the executor a Role in each team
  namespace and never a ClusterRole, and a namespaced Role allows only namespaced lists and
  watches. Each watch keeps its own resourceVersion (versions of two namespaces' lists are not
  interchangeable), and a 410 Gone relists only its namespace.
- **Status** comes from the watches (label selector, resourceVersion, bookmarks; 410 Gone → relist)
  plus a periodic full resync, both fresh from the server. The ``task`` container's end decides
  (:func:`.pods.pod_outcome`): exit 0 → success, else failed with exit code and reason; if
  sidecars keep the pod running, its logs are shipped and the pod deleted right away.
  Image-pull/config errors or an unschedulable pod longer than ``LEOFLOW_K8S_PENDING_TIMEOUT``
  → pod deleted, failed with the kubelet's or scheduler's message; pod deleted behind our
  back → failed.
- **Create errors**: 403/422/other 4xx → failed with the API's message; 409 (not
  AlreadyExists), 429 (honouring Retry-After), 5xx and no response → retried with capped
  exponential backoff for up to ``create_deadline`` seconds, then failed.
- **Kills** (cancel, timeout, stuck image) end only when the pod is gone: deleted with its grace,
  then, if still there after ``LEOFLOW_KILL_GRACE`` seconds (a process ignoring SIGTERM), with
  ``gracePeriodSeconds: 0``; the try is reported (and a cancel returns) only then, so a cleared
  task's next pod is never created beside its last one. They run at most ``kill_concurrency`` at
  once, beside the event loop: the log tail is read with no transaction open, stored in a short one, then the pod
  is deleted in a fenced window. Cancelling a run of hundreds of pods therefore neither starves
  the leader's few database connections nor the API client's threads. The log read before a
  kill is best effort and bounded by ``kill_log_timeout`` (:data:`KILL_LOG_TIMEOUT`): a kubelet
  that does not answer (a node going away) must not keep a cancelled try ``cancelling`` for the
  ordinary read timeout of two minutes, nor hold one of the few kill slots meanwhile; the pod is
  deleted anyway and the log shipper then notes that the pod is gone.
- Timeouts use ``activeDeadlineSeconds``; a try still unfinished ``deadline_slack`` seconds past its
  timeout (e.g. stuck before the kubelet started it) is deleted by the executor.
- Status updates are reported at least once per transition; duplicates are harmless.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from leoflow import tracing
from leoflow.aiotasks import Registry, cancel_and_wait, start_guarded, wait_at_most
from leoflow.db.stores import tries as try_store
from leoflow.errors import DatabaseError, FencedOut, is_leader_fault
from leoflow.executor.base import Report
from leoflow.executor.failures import try_error
from leoflow.executor.kubernetes import pods
from leoflow.executor.kubernetes.artifact_containers import declared_outputs
from leoflow.executor.kubernetes.create import PodCreation, Tracked
from leoflow.executor.kubernetes.errors import CallNotSent, KubernetesError, WatchExpired
from leoflow.executor.kubernetes.kube_client import KubernetesApi
from leoflow.executor.kubernetes.live_archive import LiveArchive
from leoflow.executor.kubernetes.logs import fetch_pod_logs, store_pod_logs
from leoflow.executor.kubernetes.placement import Placements
from leoflow.executor.kubernetes.pod_events import PodEvents
from leoflow.executor.kubernetes.windows import FencedCalls
from leoflow.executor.log_archive import LogArchiver
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.metrics.executor import PODS_DELETED
from leoflow.model.states import FINISHED_TRY_STATES
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey, TryState
from leoflow.settings import Settings
from leoflow.settings.teams_file import TeamsSource
from leoflow.storage.log_chunks import MAX_RESTARTS, attempt_name
from leoflow.storage.objects import ObjectStore

log = logging.getLogger(__name__)

#: Seconds a kill waits for the pod's log tail before deleting the pod without it. A healthy
#: kubelet answers in milliseconds; one that does not (node unreachable) would otherwise hold the
#: kill, and the try ``cancelling``, for the full read timeout.
KILL_LOG_TIMEOUT = 5.0
#: Seconds between looks at a pod being killed, until it is gone: a GET each, at most for the kill
#: grace (``LEOFLOW_KILL_GRACE``); short, since a cleared task's next try waits for it.
GONE_POLL = 0.25
#: Seconds a pod deleted with ``gracePeriodSeconds: 0`` may still be listed: the API server removes
#: it at once, so anything longer means the delete did not happen (the kill is then retried).
FORCE_CONFIRM = 5.0


class KubernetesExecutor(PodCreation):
    """Implements :class:`leoflow.executor.base.Executor` with pods."""

    name = "kubernetes"

    def __init__(self, settings: Settings, *, api: KubernetesApi | None = None, concurrency: int = 16,
                 resync_interval: float = 30.0, watch_timeout: int = 60, create_deadline: float = 120.0,
                 delete_grace: int = 10, deadline_slack: float = 60.0, kill_concurrency: int = 8,
                 kill_log_timeout: float = KILL_LOG_TIMEOUT, kill_grace: float | None = None,
                 teams: TeamsSource | None = None) -> None:
        self.settings = settings
        self.k8s = settings.executor.kubernetes
        self.api = api or KubernetesApi(settings, concurrency=concurrency)
        self.namespace = self.api.namespace
        self.placements = Placements(self.k8s, self.namespace, teams or TeamsSource(settings.api.teams_file))
        #: Namespaces listed and watched in this term (grows with the teams file, never shrinks).
        self._watched: set[str] = set()
        self._event_watched: set[str] = set()
        #: Running pods' logs streamed into the archive (None: no archive); pods followed this term.
        self._live: LiveArchive | None = None
        self._live_followed: set[str] = set()
        #: Restart counts of the followed pods' containers, as last seen (a rise: a run to keep apart).
        self._restarts_seen: dict[str, dict[str, int]] = {}
        self.resync_interval = resync_interval
        self.watch_timeout = watch_timeout
        self.create_deadline = create_deadline
        self.delete_grace = delete_grace
        self.deadline_slack = deadline_slack
        self.kill_log_timeout = kill_log_timeout
        #: Seconds a killed pod may take to stop after its graceful delete before it is deleted with
        #: ``gracePeriodSeconds: 0`` (``LEOFLOW_KILL_GRACE``).
        self.kill_grace = settings.executor.kill_grace if kill_grace is None else kill_grace
        self.selector = pods.cluster_selector(settings.cluster.name)
        self._max_log_bytes = settings.executor.task_log_max_bytes
        self._concurrency = concurrency
        # Kills read logs through the same worker threads as creates: fewer kills than threads
        # keeps creates (other runs' work) moving while a big run is cancelled.
        self._kill_slots = asyncio.Semaphore(max(1, min(kill_concurrency, concurrency // 2)))
        self._calls: FencedCalls | None = None
        self._tracked: dict[str, Tracked] = {}
        self._tasks: Registry = set()
        self._events: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self._ctx: LeaderContext | None = None
        self._report: Report | None = None
        self._to_record: list[tuple[TaskLaunch, Tracked]] = []
        self._recorder: asyncio.Task[None] | None = None
        #: The Kubernetes events of the tracked pods (kept with their tries; see .pod_events).
        self.pod_events = PodEvents(self.api, lambda: self._require_ctx().db, owner=self._event_owner,
                                    on_blocking=self._on_blocking_event, watch_timeout=watch_timeout)

    # ------------------------------------------------------------------ Executor protocol

    async def start(self, ctx: LeaderContext, report: Report) -> None:
        self._ctx, self._report = ctx, report
        self._live = self._live_archive(ctx)
        # One fenced window at a time, starting calls for a quarter of the lease (see .windows).
        self._calls = FencedCalls(ctx, budget=self.api.call_deadline, concurrency=self._concurrency)
        self._spawn(self._calls.run(), "k8s-fenced-calls")
        deadline = time.monotonic() + self.create_deadline
        attempt = 0
        namespaces = sorted(self.placements.namespaces())
        while True:  # an API server blip at failover should not cost the leadership
            try:
                rvs = await self._reconcile(initial=True, namespaces=namespaces)
                break
            except KubernetesError as err:
                attempt += 1
                if time.monotonic() > deadline:
                    raise
                log.warning("initial pod reconcile failed; retrying", extra={"code": err.code, "error": err.message})
                await asyncio.sleep(min(5.0, 0.2 * 2 ** attempt))
        for namespace in rvs:
            self._watch(namespace, rvs[namespace])
        self._spawn(self.pod_events.flush_loop(), "k8s-pod-events-writer")
        self._spawn(self._event_loop(), "k8s-events")
        self._spawn(self._resync_loop(), "k8s-resync")

    async def submit(self, launch: TaskLaunch) -> None:
        ctx = self._require_ctx()
        name = try_name(ctx.cluster, launch.key)
        known = self._tracked.get(name)
        if known is not None:
            if known.last is not None and self._report is not None:
                await self._report(known.last)  # the scheduler asked again: tell it what we know
            return
        tracked = Tracked(launch.key, name, launch.task_try_id, launch.timeout_seconds)
        if not launch.image:
            await self._finish(tracked, "failed", None, "the kubernetes executor needs an image; the task has none")
            return
        self._tracked[name] = tracked
        self._to_record.append((launch, tracked))
        if self._recorder is None or self._recorder.done():
            self._recorder = self._spawn(self._record_launches(), "k8s-record-launches", may_return=True)

    async def cancel(self, key: TryKey) -> None:
        ctx = self._require_ctx()
        name = try_name(ctx.cluster, key)
        tracked = self._tracked.get(name)
        if tracked is None:  # not in our memory: ask the API server, not a cache
            ref = await self._ref_of(key)
            pod = await self._get_quietly(ref)
            if pod is None or not pods.is_same_try(pod, ctx.cluster, key) or not pods.is_live(pod):
                return
            try_id = (pod["metadata"].get("annotations") or {}).get(pods.A_TRY_ID, "")
            tracked = Tracked(key, name, int(try_id) if try_id.isdigit() else None, created_at=time.monotonic(),
                              ref=ref)
            self._tracked[name] = tracked
        if tracked.final:
            return
        if tracked.created_at is None:
            tracked.cancel_requested = True  # _create kills it once it exists
        elif not tracked.killing:
            tracked.killing = True
            await self._kill(tracked, "cancelled", must_delete=True)
            return
        await self._until_ended(tracked)

    async def _until_ended(self, t: Tracked) -> None:
        """Wait for a kill under way by another path (a create that kills on arrival, a timeout, a
        reconcile) to end: it reports the try only once the pod is gone (:meth:`_wait_gone`).

        Raises if it has not ended within what it may take (or it failed), so that the scheduler
        records nothing and cancels again: a cancel returns only for a try whose pod is gone.
        """
        deadline = time.monotonic() + self.create_deadline + self.kill_log_timeout + self.kill_grace + FORCE_CONFIRM
        while not t.final:
            if self._tracked.get(t.name) is not t and not t.killing:
                return  # forgotten unkilled: its create was never sent (fenced out, stopping)
            if (t.created_at is not None and not t.killing) or time.monotonic() > deadline:
                raise KubernetesError(0, "KillNotDone", f"pod {t.name} is not confirmed gone yet")
            await asyncio.sleep(GONE_POLL)

    async def logs(self, key: TryKey) -> str | None:
        try:
            tail, _ = await self.api.read_log_tail(await self._ref_of(key), self._max_log_bytes)
        except (KubernetesError, DatabaseError):
            return None
        return tail.decode("utf-8", errors="replace")

    async def _ref_of(self, key: TryKey) -> str:
        """The ref of ``key``'s pod: as tracked, else in its DAG's team's namespace (its place now)."""
        ctx = self._require_ctx()
        name = try_name(ctx.cluster, key)
        tracked = self._tracked.get(name)
        if tracked is not None:
            return tracked.ref
        async with ctx.db.connect() as conn:
            place = (await self.placements.for_dags(conn, [key.dag_id]))[key.dag_id]
        return self.api.ref(place.namespace, name)

    async def stop(self) -> None:
        """End the term's work: no new create/delete starts; those in flight are awaited, then closed.

        Returns within about twice :attr:`KubernetesApi.call_deadline`: the replica releases
        leadership only after this, so every call of this term has been answered or given up on
        by then (a call given up on is logged: the API server may still carry it out).
        """
        self.api.begin_closing()
        await cancel_and_wait(list(self._tasks), timeout=2 * self.api.call_deadline + 1)
        still = await self.api.drain(timeout=self.api.call_deadline + 1)
        if still:
            log.error("pod API calls still in flight after their deadline", extra={"calls": still})
        self.api.close()
        self._report = None

    # ------------------------------------------------------------------ creating

    async def _seen(self, t: Tracked, pod: dict[str, Any]) -> None:
        if t.created_at is None:
            t.created_at = time.monotonic()
        if t.cancel_requested and not t.final:
            self._start_kill(t, "cancelled")
            return
        await self._apply(t, pod, "MODIFIED")

    # ------------------------------------------------------------------ status

    async def _apply(self, t: Tracked, pod: dict[str, Any], event: str) -> None:
        if t.created_at is None:
            t.created_at = time.monotonic()
        outcome = pods.pod_outcome(pod)
        if event == "DELETED":
            self._tracked.pop(t.name, None)
            if not t.final and not t.killing:
                if outcome.state in ("success", "failed"):
                    await self._finish(t, outcome.state, outcome.exit_code, outcome.reason, outputs=outcome.outputs)
                else:
                    await self._finish(t, "failed", None, "the pod was deleted before it finished (not by Leoflow)")
            return
        if t.final or t.killing:
            return
        if outcome.state in ("success", "failed") and self._end_with_artifacts(t, outcome):
            return  # reported once the upload sidecar's manifest is indexed (.create)
        if outcome.state in ("success", "failed") and outcome.sidecars_running:
            self._start_end(t, outcome.state, outcome.exit_code, outcome.reason, outputs=outcome.outputs)
        elif outcome.state in ("success", "failed"):
            await self._finish(t, outcome.state, outcome.exit_code, outcome.reason, outputs=outcome.outputs)
        elif pod.get("metadata", {}).get("deletionTimestamp"):
            await self._finish(t, "failed", None, "the pod is being deleted before it finished (not by Leoflow)")
        elif outcome.state == "running":
            t.stuck_since = None
            self._start_live_archive(t, pod)
            self._keep_restarted_logs(t, pod)
            if t.reported != "running":
                await self._emit(t, "running", None, None)
        elif outcome.stuck:
            self._pending_too_long(t, outcome.stuck)
        elif (blocked := self.pod_events.blocked(t.name)) is not None:
            self._pending_too_long(t, blocked)  # e.g. FailedMount: the status only says ContainerCreating
        else:
            t.stuck_since = None

    def _start_live_archive(self, t: Tracked, pod: dict[str, Any]) -> None:
        """Follow the running pod's containers (and native sidecars) into the log archive, once per pod
        per term (see .live_archive); a new leader resumes where the archive's index ends."""
        if self._live is None or t.task_try_id is None or t.name in self._live_followed:
            return
        spec = pod.get("spec") or {}
        names = [c["name"] for c in spec.get("containers") or []] + [
            c["name"] for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        restarts = _restart_counts(pod)
        containers = [(n, attempt_name(n, restarts.get(n, 0))) for n in names if restarts.get(n, 0) <= MAX_RESTARTS]
        if not containers:
            return
        self._live_followed.add(t.name)
        self._restarts_seen[t.name] = restarts
        with tracing.in_try(t.key):  # its chunks' upload spans are the try's children (leoflow.tracing)
            self._spawn(self._live.follow_pod(t.task_try_id, t.ref, containers), f"k8s-live-log:{t.name}",
                        may_return=True)

    def _keep_restarted_logs(self, t: Tracked, pod: dict[str, Any]) -> None:
        """A container restarted since last looked at: keep its previous run's log apart (``name#N``,
        read with ``previous=true`` before the next restart loses it) and follow the new run live.
        Runs skipped between two looks (two restarts within one status change) cannot be read any more."""
        if self._live is None or t.task_try_id is None or t.name not in self._live_followed:
            return
        seen = self._restarts_seen.setdefault(t.name, {})
        for name, count in _restart_counts(pod).items():
            before = seen.get(name, 0)
            if count <= before or count > MAX_RESTARTS:
                continue
            seen[name] = count
            if count - before > 1:
                log.warning("a container restarted more than once between two looks; the runs in between "
                            "are not archived", extra={"pod": t.name, "container": name, "restarts": count})
            with tracing.in_try(t.key):
                self._spawn(self._live.keep_previous(t.task_try_id, t.ref, name, attempt_name(name, count - 1)),
                            f"k8s-previous-log:{t.name}:{name}", may_return=True)
                self._spawn(self._live.follow_pod(t.task_try_id, t.ref, [(name, attempt_name(name, count))]),
                            f"k8s-live-log:{t.name}:{name}#{count}", may_return=True)

    def _pending_too_long(self, t: Tracked, why: str) -> None:
        """Note that ``t``'s pod cannot start (``why``); kill it once that has lasted the pending timeout."""
        now = time.monotonic()
        t.stuck_since = t.stuck_since or now
        if now - t.stuck_since > self.k8s.pending_timeout:
            self._start_kill(t, f"{why} (pending longer than {self.k8s.pending_timeout:g}s)")

    def _live_archive(self, ctx: LeaderContext) -> LiveArchive | None:
        """The live archive of this term, or None without a log archive (or one that cannot be set up)."""
        config = self.settings.log_archive
        if config.active_url is None:
            return None
        try:
            store = ObjectStore(config.active_url, timeout=config.timeout)
        except (ValueError, OSError) as exc:
            log.error("the log archive cannot be used; running pods' logs are not archived live",
                      extra={"error": str(exc)[:300]})
            return None
        return LiveArchive(self.api, LogArchiver(store, ctx.db, ctx.cluster, flush_interval=config.flush_interval))

    def _event_owner(self, namespace: str, pod: str) -> int | None:
        """The try id of a pod this executor tracks in ``namespace`` (None: not ours, or not known yet)."""
        t = self._tracked.get(pod)
        if t is None or t.task_try_id is None or self.api.where(t.ref)[0] != namespace:
            return None
        return t.task_try_id

    async def _on_blocking_event(self, pod: str, why: str) -> None:
        """A tracked pod's event says it cannot start (``FailedMount``): its status will not change."""
        t = self._tracked.get(pod)
        if t is not None and not t.final and not t.killing and t.reported != "running":
            self._pending_too_long(t, why)

    async def _handle_untracked(self, pod: dict[str, Any], record: try_store.TryRecord | None) -> None:
        name = pod["metadata"]["name"]
        key = pods.pod_try_key(pod)
        if key is None:
            return
        t = Tracked(key, name, record.task_try_id if record else None, created_at=time.monotonic(),
                    ref=self.api.ref(pod["metadata"].get("namespace"), name))
        self._tracked[name] = t
        finished = record is None or record.ended_at is not None or record.state in FINISHED_TRY_STATES
        if finished:
            t.final = True
            if pods.is_live(pod):
                why = "its try is already finished" if record else "the database knows no such try"
                log.warning("deleting stray task pod", extra={"pod": name, "why": why})
                await self._delete(t, pod)
            return
        if record is not None and record.state == "cancelling":
            self._start_kill(t, "cancelled")
            return
        t.artifacts = declared_outputs(pod)  # adopted: its end waits for the upload sidecar's manifest too
        await self._apply(t, pod, "MODIFIED")

    async def _reconcile(self, *, initial: bool, namespaces: list[str] | None = None) -> dict[str, str]:
        """Fresh list of the cluster's pods in ``namespaces`` (else every watched one) → adopt, delete,
        report; returns each namespace's list resourceVersion."""
        ctx = self._require_ctx()
        asked = sorted(self._watched) if namespaces is None else namespaces
        listed_at = time.monotonic()
        items: list[dict[str, Any]] = []
        rvs: dict[str, str] = {}
        for namespace in asked:
            try:
                found, rvs[namespace] = await self.api.list_pods(self.selector, namespace=namespace)
            except KubernetesError as err:
                # A team's namespace the executor may not list (no Role there yet, or no such
                # namespace) must not stop the other teams' work: it is skipped, logged, and tried
                # again at the next resync; its pods' creates fail their tries with the API's reason.
                if namespace == self.namespace or err.retryable:
                    raise
                log.error("cannot list task pods in a team namespace; skipping it until the next resync",
                          extra={"namespace": namespace, "code": err.code, "error": err.message[:300]})
                continue
            items.extend(found)
        listed = list(rvs)
        by_name = {p["metadata"]["name"]: p for p in items}
        untracked = [p for n, p in by_name.items() if n not in self._tracked]
        keys = [k for k in (pods.pod_try_key(p) for p in untracked) if k is not None]
        async with ctx.db.connect() as conn:
            records = await try_store.tries_by_key(conn, keys)
            claims = await try_store.unfinished_claims(conn, ctx.cluster) if initial else []
        for pod in untracked:
            key = pods.pod_try_key(pod)
            try:
                await self._handle_untracked(pod, records.get(key) if key else None)
            except Exception as exc:  # containment: one pod we cannot make sense of is skipped, not the term
                if is_leader_fault(exc) or isinstance(exc, KubernetesError):
                    raise
                log.exception("skipping a pod the executor cannot handle", extra={"pod": pod["metadata"]["name"]})
        for name, t in list(self._tracked.items()):
            if self.api.where(t.ref)[0] not in listed:
                continue  # another namespace's pod: its own list decides
            current = by_name.get(name)
            if current is not None:
                try:
                    await self._apply(t, current, "MODIFIED")
                except Exception as exc:  # containment: one try's pod fails that try, not the reconcile
                    if is_leader_fault(exc) or isinstance(exc, KubernetesError):
                        raise
                    await self._finish(t, "failed", None, try_error(t.key, exc, doing="reading its pod"))
                    continue
                age = time.monotonic() - (t.created_at or time.monotonic())
                overdue = t.timeout is not None and age > t.timeout + self.deadline_slack
                if overdue and not t.final and not t.killing:
                    self._start_kill(t, f"timed out after {t.timeout:g}s")
            elif t.created_at is not None and t.created_at < listed_at:
                await self._apply(t, {"metadata": {"name": name}, "status": {}}, "DELETED")
        for claim in claims:
            where, name = self.api.where(claim.executor_ref or "")
            absent = name not in by_name and name not in self._tracked
            # Only evidence fails a try: a leader saw its pod running. A claimed try never seen
            # running may never have got its pod; the scheduler resubmits it and it is created
            # (or, if the old term's create did land, adopted on 409). A pod in a namespace not
            # listed (a team's namespace dropped from the teams file) is no evidence either way.
            if absent and claim.seen_running and where in listed:
                lost = Tracked(claim.key, name, claim.task_try_id, ref=claim.executor_ref or "")
                await self._finish(lost, "failed", None, "the pod of this try ran (a leader saw it running) and is "
                                   "gone: deleted while no leader watched; not launching it twice")
        return rvs

    # ------------------------------------------------------------------ killing

    def _start_kill(self, t: Tracked, reason: str) -> None:
        """Kill beside the event loop (a kill reads logs and waits for a window): never inline."""
        self._start_end(t, "failed", None, reason, wait_gone=True)

    def _start_end(self, t: Tracked, state: TryState, exit_code: int | None, reason: str | None, *,
                   wait_gone: bool = False, outputs: bytes | None = None) -> None:
        """End a try by deleting its pod (a kill, or sidecars left running), beside the event loop."""
        if t.killing or t.final:
            return
        t.killing = True
        self._spawn(self._end(t, state, exit_code, reason, wait_gone=wait_gone, outputs=outputs),
                    f"k8s-kill:{t.name}", may_return=True)

    async def _kill(self, t: Tracked, reason: str, *, must_delete: bool = False) -> None:
        """Save what logs there are, delete the pod (fenced), wait until it is gone (forcing it after
        the kill grace), report the try failed with ``reason``."""
        await self._end(t, "failed", None, reason, must_delete=must_delete, wait_gone=True)

    async def _end(self, t: Tracked, state: TryState, exit_code: int | None, reason: str | None, *,
                   must_delete: bool = False, wait_gone: bool = False, outputs: bytes | None = None) -> None:
        """Save the pod's logs, delete it (fenced), report ``state`` (a kill, or sidecars left running).

        At most ``kill_concurrency`` at once; no transaction is open while the log is read. With
        ``must_delete`` (the scheduler's cancel) a delete the API server refused or did not answer
        raises instead of reporting the try ended: the pod still runs, so the try stays
        ``cancelling`` and the scheduler's next cancel deletes it again (the logs already saved
        are not read twice). With ``wait_gone`` (every kill) the try is reported only once its pod
        is gone (:meth:`_wait_gone`, outside the kill slots): the report records a cancelled try
        ``cancelled``, and only then may a cleared task's next try start.
        """
        t.killing = True
        async with self._kill_slots:
            if t.task_try_id is not None and not t.logs_saved:
                await self._save_logs(t.task_try_id, t.ref)
                t.logs_saved = True
            try:
                await self._delete(t, None, must_delete=must_delete)
            except FencedOut:
                log.warning("not deleting pod: fenced out", extra={"pod": t.name})
                return
            except CallNotSent:  # the executor is stopping; the next leader kills it
                return
            except (KubernetesError, DatabaseError):  # only with must_delete: the next cancel tries again
                t.killing = False
                raise
        if wait_gone:
            try:
                await self._wait_gone(t)
            except (FencedOut, CallNotSent):
                return  # the next leader kills it again, and waits
            except (KubernetesError, DatabaseError):
                if must_delete:
                    t.killing = False
                    raise
                log.warning("reporting a killed try whose pod is not confirmed gone", extra={"pod": t.name})
        await self._finish(t, state, exit_code, reason, outputs=outputs)

    async def _wait_gone(self, t: Tracked) -> None:
        """Return once the pod is gone from the API server (or no longer live: its containers have
        stopped). A pod still there :attr:`kill_grace` seconds after its graceful delete (a
        process ignoring SIGTERM) is deleted with ``gracePeriodSeconds: 0``, which removes it at
        once; if even then it is still listed after :data:`FORCE_CONFIRM` seconds, this raises.

        Polls with GET (fresh from the API server, never the watch's cache): one call every
        :data:`GONE_POLL` seconds per kill, for at most the grace.
        """
        deadline = time.monotonic() + self.kill_grace
        forced = False
        while True:
            pod = await self.api.get_pod(t.ref)
            if pod is None or not pods.is_live(pod):
                return
            if time.monotonic() >= deadline:
                if forced:
                    raise KubernetesError(0, "PodNotGone", f"pod {t.name} is still there after a delete with "
                                                          "gracePeriodSeconds 0")
                log.warning("pod did not stop within the kill grace; deleting it with gracePeriodSeconds 0",
                            extra={"pod": t.name, "seconds": self.kill_grace})
                await self.delete_pod_fenced(t.ref, uid=pod["metadata"].get("uid"), grace_seconds=0)
                forced, deadline = True, time.monotonic() + FORCE_CONFIRM
            await asyncio.sleep(GONE_POLL)

    async def _save_logs(self, task_try_id: int, pod_name: str) -> None:  # pod_name: the pod's ref
        """Best effort: the log tail of a pod about to be deleted (the shipper skips shipped tries).

        The read gets at most :attr:`kill_log_timeout` seconds in all (each wait for data as
        long; the worker thread is freed by that socket timeout); then the kill goes on without it.
        """
        try:
            logs = await wait_at_most(
                fetch_pod_logs(self.api, pod_name, self._max_log_bytes, read_timeout=self.kill_log_timeout),
                self.kill_log_timeout)
            await store_pod_logs(self._require_ctx().db, task_try_id, logs)
        except TimeoutError:
            log.warning("gave up reading the logs of a pod being deleted", extra={
                "pod": pod_name, "seconds": self.kill_log_timeout})
        except (KubernetesError, DatabaseError) as exc:
            log.warning("could not save the logs of a pod being deleted", extra={"pod": pod_name,
                                                                                   "error": str(exc)[:300]})

    async def _delete(self, t: Tracked, pod: dict[str, Any] | None, *, must_delete: bool = False) -> None:
        """Delete the try's pod in a fenced window; API errors are logged (and raised with ``must_delete``)."""
        t.killing = True
        uid = (pod or {}).get("metadata", {}).get("uid")
        try:
            await self.delete_pod_fenced(t.ref, uid=uid, grace_seconds=self.delete_grace)
        except CallNotSent:
            raise
        except (KubernetesError, DatabaseError) as err:
            log.warning("could not delete pod", extra={"pod": t.name, "error": str(err)[:300]})
            if must_delete:
                raise

    async def delete_pod_fenced(self, name: str, *, uid: str | None, grace_seconds: int) -> bool:
        """Delete a pod (``name``: its ref) inside a fenced window of this term; False if it was already gone.

        Raises FencedOut (a newer term exists: nothing was sent) and the API's errors.
        """
        deleted = await self._require_calls().call(
            lambda send_by: self.api.delete_pod(name, grace_seconds=grace_seconds, uid=uid, send_by=send_by))
        if deleted:
            PODS_DELETED.inc()
        return deleted

    # ------------------------------------------------------------------ reporting and loops

    async def _finish(self, t: Tracked, state: TryState, exit_code: int | None, reason: str | None, *,
                      outputs: bytes | None = None) -> None:
        t.final = True
        if state == "failed":  # what only the pod's events tell (FailedMount, BackOff …) joins the reason
            reason = self.pod_events.explain(t.name, reason)
        self.pod_events.forget(t.name)
        self._live_followed.discard(t.name)  # what a term remembers per pod goes with its try
        self._restarts_seen.pop(t.name, None)
        await self._emit(t, state, exit_code, reason, outputs=outputs)

    async def _emit(self, t: Tracked, state: TryState, exit_code: int | None, reason: str | None, *,
                    outputs: bytes | None = None) -> None:
        ctx, report = self._require_ctx(), self._report
        t.reported = state
        t.last = StatusUpdate(key=t.key, state=state, at=ctx.clock.now(), exit_code=exit_code, reason=reason,
                              executor_ref=t.ref, outputs=outputs)
        if report is None:
            return
        await report(t.last)

    def _on_event(self, kind: str, pod: dict[str, Any]) -> None:
        self._events.put_nowait((kind, pod))

    async def _event_loop(self) -> None:
        ctx = self._require_ctx()
        while True:
            kind, pod = await self._events.get()
            try:
                name = pod["metadata"]["name"]
                t = self._tracked.get(name)
                if t is not None:
                    await self._apply(t, pod, kind)
                elif kind != "DELETED" and (key := pods.pod_try_key(pod)) is not None:
                    async with ctx.db.connect() as conn:
                        records = await try_store.tries_by_key(conn, [key])
                    if name not in self._tracked:
                        await self._handle_untracked(pod, records.get(key))
            except (DatabaseError, KubernetesError) as exc:  # the next resync looks at this pod again
                log.warning("failed to handle pod event", extra={"event": kind, "error": str(exc)})
            except Exception:  # containment boundary: one malformed pod must not stop every other try's events
                log.exception("failed to handle pod event", extra={"event": kind})

    def _watch(self, namespace: str, rv: str) -> None:
        self._watched.add(namespace)
        # may_return: a watch ends itself only when its namespace can no longer be listed.
        self._spawn(self._watch_loop(namespace, rv), f"k8s-watch:{namespace}", may_return=True)
        if namespace not in self._event_watched:  # its pods' events: listed and watched beside them
            self._event_watched.add(namespace)
            self._spawn(self.pod_events.follow(namespace), f"k8s-pod-events:{namespace}")

    async def _ensure_watched(self, namespaces: set[str]) -> None:
        """List and watch the namespaces not watched yet (a team the teams file just added), so the
        first pod created there is followed from its first event. A failed list is left to the
        next resync (which lists every namespace the teams name)."""
        new = sorted(namespaces - self._watched)
        if not new:
            return
        try:
            rvs = await self._reconcile(initial=False, namespaces=new)
        except KubernetesError as err:
            log.warning("could not list a new team namespace; the next resync tries again",
                        extra={"namespaces": new, "error": str(err)[:300]})
            return
        for namespace in new:
            if namespace not in self._watched and namespace in rvs:
                self._watch(namespace, rvs[namespace])
                log.info("watching a team namespace", extra={"namespace": namespace})

    async def _watch_loop(self, namespace: str, rv: str) -> None:
        failures = 0
        while True:
            try:
                try:
                    rv = await self.api.watch(self.selector, rv, self.watch_timeout, self._on_event,
                                              namespace=namespace)
                except WatchExpired:  # this namespace's resourceVersion is too old: relist it alone
                    rvs = await self._reconcile(initial=False, namespaces=[namespace])
                    if namespace not in rvs:  # no longer listable (its Role removed): the resync retries
                        self._watched.discard(namespace)
                        return
                    rv = rvs[namespace]
                failures = 0
            except (KubernetesError, DatabaseError) as err:
                failures += 1
                log.warning("pod watch failed; reconnecting", extra={"namespace": namespace, "error": str(err)})
                await asyncio.sleep(min(5.0, 0.2 * 2 ** failures))

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync_interval)
            try:
                await self._ensure_watched(set(self.placements.namespaces()))
                await self._reconcile(initial=False)
            except (KubernetesError, DatabaseError) as err:
                log.warning("pod resync failed", extra={"error": str(err)})

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, may_return: bool = False) -> asyncio.Task[Any]:
        """A guarded task of this term (cancelled by :meth:`stop`).

        A loop that dies (a bug) leaves this term unable to follow its pods: it is logged by
        name and the term is given up (``ctx.fail``), so a new term starts with a fresh executor.
        """
        ctx = self._require_ctx()
        return start_guarded(coro, name, may_return=may_return, registry=self._tasks,
                             on_death=lambda task, error: ctx.fail(f"{task} died"))

    def _require_ctx(self) -> LeaderContext:
        if self._ctx is None:
            raise RuntimeError("KubernetesExecutor used before start()")
        return self._ctx

    def _require_calls(self) -> FencedCalls:
        if self._calls is None:
            raise RuntimeError("KubernetesExecutor used before start()")
        return self._calls


def _restart_counts(pod: dict[str, Any]) -> dict[str, int]:
    """``restartCount`` of each container (init containers too) of ``pod``'s status."""
    status = pod.get("status") or {}
    return {cs["name"]: int(cs.get("restartCount") or 0)
            for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
            if isinstance(cs, dict) and cs.get("name")}
