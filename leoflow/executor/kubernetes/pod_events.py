"""The Kubernetes events of the executor's pods, kept with their tries and told in their failure reasons.

Why events: a pod that never starts says why only there — ``FailedMount: MountVolume.SetUp
failed for volume "creds" : secret "creds" not found`` leaves the pod ``ContainerCreating`` with
no reason in its status, and the kubelet's ``BackOff``/``Failed`` pull messages and the
scheduler's ``FailedScheduling`` are gone an hour later (the API server's event TTL), long before
an on-call engineer looks. Airflow's users file issues for exactly this (a task "stuck in
queued", the pod's events only visible to whoever ran ``kubectl describe`` in time).

How they are collected, efficiently:

- **One list + watch per watched namespace**, beside the pod watch of that namespace (the same
  Role, one more ``list``/``watch`` on ``events``), with ``fieldSelector=involvedObject.kind=Pod``:
  events carry no labels of the pod they are about, so they cannot be selected by Leoflow's
  labels; instead each event is matched by pod name against the pods this executor tracks (a
  dict lookup), and others' events are dropped as they stream by. The resourceVersion is kept
  per namespace; a 410 relists that namespace only, and the list's events (already kept ones
  included) are written again — by event uid, so without duplicates.
- **Bounded memory**: events wait in a dict by (try, event uid) — a repeat replaces its entry —
  of at most :data:`MAX_PENDING` entries, written every :data:`FLUSH_INTERVAL` seconds in one
  short transaction; past the bound new events are dropped and counted
  (``leoflow_pod_events_dropped_total``). A try keeps at most
  :data:`~leoflow.model.limits.POD_EVENTS` events, messages cut to
  :data:`~leoflow.model.limits.POD_EVENT_MESSAGE` characters (:mod:`leoflow.db.stores.pods.events`).
  The last few warnings of each tracked pod are remembered for its failure reason.
- **Never in the way**: a write that fails is retried at the next flush (the pending entries
  stay, still bounded); a list that fails is retried with backoff. A try's outcome never waits
  on its events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from leoflow.db.connection.database import Database
from leoflow.db.stores.pods import events as event_store
from leoflow.db.stores.pods.events import PodEventRow
from leoflow.errors import DatabaseError
from leoflow.executor.kubernetes.errors import KubernetesError, WatchExpired
from leoflow.executor.kubernetes.kube_client import KubernetesApi
from leoflow.metrics.executor import POD_EVENTS_DROPPED
from leoflow.model.limits import POD_EVENT_MESSAGE

log = logging.getLogger(__name__)

#: Events of pods only: the executor matches them by name against its own pods.
FIELD_SELECTOR = "involvedObject.kind=Pod"
#: Events waiting to be written, at most (distinct (try, event) pairs; a repeat replaces its entry).
MAX_PENDING = 10_000
#: Seconds between writes of the waiting events (one transaction each).
FLUSH_INTERVAL = 1.0
#: Distinct warnings remembered per tracked pod for its failure reason.
WARNINGS_PER_POD = 3
#: Event reasons that mean the pod cannot start while they last, with nothing in its status saying so.
BLOCKING_REASONS = frozenset({"FailedMount", "FailedAttachVolume"})
#: Longest part of a failure reason the events may add.
MAX_EXPLANATION = 300


@dataclass(frozen=True)
class PodWarning:
    """A warning event of a pod, as its failure reason tells it."""

    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}" if self.message else self.reason


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def _container(field_path: str) -> str | None:
    """``task`` of ``spec.containers{task}`` (or ``spec.initContainers{…}``); None for the whole pod."""
    start, end = field_path.find("{"), field_path.rfind("}")
    if start < 0 or end <= start:
        return None
    return field_path[start + 1:end][:63] or None


def _cut(text: str, maximum: int) -> str:
    return text if len(text) <= maximum else text[: maximum - 1] + "…"


def parse_event(task_try_id: int, event: dict[str, Any]) -> PodEventRow | None:
    """The row of one core/v1 Event (None if it has no uid), cut to the limits; never raises on odd data."""
    meta = event.get("metadata") or {}
    uid = str(meta.get("uid") or "")[:64]
    if not uid:
        return None
    now = datetime.now(UTC)
    first = (_time(event.get("firstTimestamp")) or _time(event.get("eventTime"))
             or _time(meta.get("creationTimestamp")) or now)
    series = event.get("series") or {}
    last = _time(event.get("lastTimestamp")) or _time(series.get("lastObservedTime")) or first
    count = event.get("count") or series.get("count") or 1
    involved = event.get("involvedObject") or {}
    return PodEventRow(
        task_try_id=task_try_id, uid=uid, type=str(event.get("type") or "Normal")[:16],
        reason=str(event.get("reason") or "")[:128],
        message=_cut(" ".join(str(event.get("message") or "").split()), POD_EVENT_MESSAGE.maximum),
        container=_container(str(involved.get("fieldPath") or "")),
        count=int(count) if isinstance(count, int) and count > 0 else 1, first_seen=first, last_seen=max(first, last))


class PodEvents:
    """Follows the events of the pods one executor tracks (see the module docstring).

    ``owner(namespace, pod)`` says which try a pod belongs to (None: not ours); ``on_blocking``
    is called (on the event loop) when a tracked pod reports a :data:`BLOCKING_REASONS` event.
    """

    def __init__(self, api: KubernetesApi, db: Callable[[], Database], *,
                 owner: Callable[[str, str], int | None],
                 on_blocking: Callable[[str, str], Coroutine[Any, Any, None]],
                 watch_timeout: int = 60, flush_interval: float = FLUSH_INTERVAL,
                 max_pending: int = MAX_PENDING) -> None:
        self.api = api
        self._db = db
        self._owner = owner
        self._on_blocking = on_blocking
        self.watch_timeout = watch_timeout
        self.flush_interval = flush_interval
        self.max_pending = max_pending
        self._pending: dict[tuple[int, str], PodEventRow] = {}
        self._warnings: dict[str, list[PodWarning]] = {}
        self._blocked: dict[str, PodWarning] = {}
        self._wake = asyncio.Event()
        self._reacting: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ reading

    def blocked(self, pod: str) -> str | None:
        """Why the tracked ``pod`` cannot start according to its events (``FailedMount: …``), if so."""
        warning = self._blocked.get(pod)
        return None if warning is None else str(warning)

    def explain(self, pod: str, reason: str | None) -> str | None:
        """``reason`` with the pod's last warnings its text does not already tell (``OOMKilled`` is told by
        the container status; a ``FailedMount`` or ``BackOff`` only by the events)."""
        core = (reason or "").split(": ", 1)[-1].split(" (pending longer than", 1)[0]
        told = [str(w) for w in self._warnings.get(pod, [])
                if w.message not in (reason or "") and not (core and core in w.message)]
        if not told:
            return reason
        extra = _cut("; ".join(dict.fromkeys(told)), MAX_EXPLANATION)
        return f"{reason} (events: {extra})" if reason else f"events: {extra}"

    def forget(self, pod: str) -> None:
        """Drop what is remembered of a pod whose try ended (its waiting events are still written)."""
        self._warnings.pop(pod, None)
        self._blocked.pop(pod, None)

    # ------------------------------------------------------------------ collecting

    def on_event(self, kind: str, event: dict[str, Any]) -> None:
        """One event from a list or a watch (on the event loop): matched, kept for the next write."""
        if kind == "DELETED":  # the API server's TTL removed it: what was kept stays kept
            return
        involved = event.get("involvedObject") or {}
        if involved.get("kind") != "Pod":
            return
        pod = str(involved.get("name") or "")
        namespace = str(involved.get("namespace") or (event.get("metadata") or {}).get("namespace") or "")
        task_try_id = self._owner(namespace, pod)
        if task_try_id is None:
            return
        row = parse_event(task_try_id, event)
        if row is None:
            return
        key = (task_try_id, row.uid)
        if key not in self._pending and len(self._pending) >= self.max_pending:
            POD_EVENTS_DROPPED.inc()
        else:
            known = self._pending.get(key)
            self._pending[key] = row if known is None or row.last_seen >= known.last_seen else known
            self._wake.set()
        if row.type == "Warning":
            warning = PodWarning(row.reason, row.message)
            kept = [w for w in self._warnings.get(pod, []) if w != warning]
            self._warnings[pod] = [*kept, warning][-WARNINGS_PER_POD:]
            if row.reason in BLOCKING_REASONS:
                self._blocked[pod] = warning
                task = asyncio.get_running_loop().create_task(self._on_blocking(pod, str(warning)))
                self._reacting.add(task)  # held until done (the loop keeps only weak references)
                task.add_done_callback(self._reacting.discard)

    async def follow(self, namespace: str) -> None:
        """List, then watch, the pod events of ``namespace`` until cancelled (410 → list again)."""
        failures = 0
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    items, rv = await self.api.list_events(FIELD_SELECTOR, namespace=namespace)
                    for item in items:
                        self.on_event("ADDED", item)
                try:
                    rv = await self.api.watch(FIELD_SELECTOR, rv, self.watch_timeout, self.on_event,
                                              namespace=namespace, events=True)
                except WatchExpired:
                    rv = None
                failures = 0
            except KubernetesError as err:
                failures += 1
                log.warning("pod event watch failed; retrying", extra={"namespace": namespace, "error": str(err)})
                await asyncio.sleep(min(30.0, 0.2 * 2 ** failures))

    async def flush_loop(self) -> None:
        """Write the waiting events every :attr:`flush_interval` seconds, until cancelled."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.flush_interval)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write the waiting events in one transaction; on a database error they wait for the next one."""
        batch, self._pending = self._pending, {}
        if not batch:
            return
        try:
            async with self._db().transaction() as conn:
                await event_store.record_events(conn, list(batch.values()))
        except DatabaseError as exc:
            log.warning("could not store pod events; retrying", extra={"events": len(batch), "error": str(exc)[:300]})
            for key, row in batch.items():  # newer copies that arrived meanwhile win; still bounded
                if key in self._pending or len(self._pending) < self.max_pending:
                    known = self._pending.get(key)
                    self._pending[key] = row if known is None or row.last_seen > known.last_seen else known
            self._wake.set()

