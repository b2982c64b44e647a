"""The only door to the Kubernetes API: the official (synchronous) client, run in worker threads.

Every call goes through a bounded thread pool (``concurrency`` workers, and as many pooled HTTP
connections), so the event loop never blocks and the API server never sees more than that many
requests from one replica. Responses are read as plain JSON dicts (``_preload_content=False``):
the pods are data for :mod:`.pods`, and skipping the client's model deserialisation
roughly halves the CPU cost per call.

This is the only module that imports ``kubernetes`` (docs/adr/0008-layers.md). Errors are
translated at this boundary into the types of :mod:`.errors`, one per meaning (not found,
already exists, gone, throttled, server error, unreachable, refused), each keeping the status
code, ``Status.reason``, message and ``Retry-After``; "no response" (connection refused/reset,
timeouts) is code 0. Each failed call counts in ``leoflow_pod_api_errors_total{code}``.

**Creates and deletes are the calls that change the world**, and a leader must make them only
while its fencing term is the newest (see :mod:`.windows`). They therefore differ from reads:

- each has a *total* deadline (:attr:`KubernetesApi.call_deadline`, a quarter of
  ``LEOFLOW_LEADER_LEASE``, at most 30 s), so no such call outlives its term by more than that;
- each may carry ``send_by`` (a monotonic time): a call whose worker thread only gets to it
  later is not sent at all (:class:`~.errors.CallNotSent`) — a queue in the thread pool can
  never delay a create past its window;
- a caller cancelled while its call is in flight still waits for the call to return (bounded by
  the deadline): the fenced transaction around it must not end before the API server answered;
- after :meth:`KubernetesApi.begin_closing` no new one starts, and :meth:`KubernetesApi.drain`
  waits for those in flight — the executor's ``stop`` does both before the term is handed over.

Configuration: the in-cluster service account when running in a pod, else ``KUBECONFIG`` /
``~/.kube/config``. The cluster's namespace is ``LEOFLOW_K8S_NAMESPACE``, else the pod's own
namespace, else the kubeconfig context's, else ``default``.

**Namespaces.** A team may run its pods in its own namespace (:mod:`.placement`). A pod is
named by its *ref*: the pod name alone in the cluster's namespace (what every try recorded before
teams had namespaces), ``namespace/name`` elsewhere — a pod name never holds a ``/``. Every
call taking a pod takes its ref, so the log shipper, the garbage collector and the live-log
reader find a pod where it was created from the try's ``executor_ref`` alone; lists and watches
name their namespace.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from leoflow.errors import SettingsError
from leoflow.executor.kubernetes.errors import (
    CallNotSent,
    KubernetesError,
    ObjectNotFound,
    WatchExpired,
    error_for,
)
from leoflow.metrics.executor import POD_API_ERRORS
from leoflow.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
#: Per-request timeout (connect, read) in seconds for ordinary calls; watches use their own.
REQUEST_TIMEOUT = (5.0, 30.0)
#: Seconds a log read may wait for data (the kubelet streams a large log through the API server).
LOG_READ_TIMEOUT = 120.0
#: Upper bound of a create/delete call's total deadline, whatever the lease.
MAX_CALL_DEADLINE = 30.0


#: Watches at once: two per watched namespace (a team's, or the cluster's: its pods and its pods'
#: events); a thread each.
MAX_WATCHES = 2_002
#: Container logs followed at once by one replica (the live archive of running pods): a thread and
#: a connection each; pods beyond it are archived when they end, as before.
MAX_LOG_FOLLOWS = 256
#: Seconds a followed log may stay silent before its stream is ended (and followed again).
FOLLOW_IDLE_TIMEOUT = 300.0


def call_deadline_for(leader_lease: float) -> float:
    """Total deadline of one create/delete: a quarter of the lease (see :mod:`.windows`)."""
    return min(MAX_CALL_DEADLINE, leader_lease / 4)


def translate(exc: Exception) -> KubernetesError:
    if isinstance(exc, ApiException):
        reason, message = str(exc.reason or ""), str(exc.reason or "")
        try:
            body = json.loads(exc.body or "{}")
            reason, message = body.get("reason") or reason, body.get("message") or message
        except ValueError:
            pass
        retry_after = None
        if exc.headers and exc.headers.get("Retry-After", "").isdigit():
            retry_after = float(exc.headers["Retry-After"])
        return error_for(int(exc.status or 0), reason, message, retry_after)
    return error_for(0, type(exc).__name__, str(exc))


def _load_client(concurrency: int) -> tuple[client.ApiClient, str | None]:
    cfg = client.Configuration()
    namespace: str | None = None
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        if _SA_NAMESPACE.exists():
            namespace = _SA_NAMESPACE.read_text().strip() or None
    else:
        # Read KUBECONFIG now, not at the client's import time (it may be set after import).
        path = os.environ.get("KUBECONFIG") or None
        try:
            config.load_kube_config(config_file=path, client_configuration=cfg)  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as exc:
            raise SettingsError("LEOFLOW_EXECUTOR", "is kubernetes, but no Kubernetes configuration was found "
                                f"(not running in a pod; KUBECONFIG / ~/.kube/config: {exc})") from None
        try:
            _, active = config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
            namespace = (active or {}).get("context", {}).get("namespace")
        except config.ConfigException:
            namespace = None
    cfg.connection_pool_maxsize = concurrency + 2
    cfg.retries = False  # retries are ours: they must know which errors are safe to retry
    return client.ApiClient(cfg), namespace


class KubernetesApi:
    """Pods of the cluster's namespace and the teams' through the official client, awaitable."""

    def __init__(self, settings: Settings, *, concurrency: int = 16, call_deadline: float | None = None) -> None:
        api_client, context_namespace = _load_client(concurrency)
        self.core = client.CoreV1Api(api_client)
        self.namespace = settings.executor.kubernetes.namespace or context_namespace or "default"
        #: Total seconds a create or delete may take (see the module docstring).
        self.call_deadline = call_deadline or call_deadline_for(settings.election.leader_lease)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="leoflow-k8s")
        # Threads start as watches do: two per watched namespace (MAX_WATCHES bounds it).
        self._watch_pool = ThreadPoolExecutor(max_workers=MAX_WATCHES + MAX_LOG_FOLLOWS,
                                              thread_name_prefix="leoflow-k8s-watch")
        self._follow_lock = threading.Lock()
        self._follows: set[str] = set()
        self._watch_responses: dict[str, Any] = {}
        self._closing = False
        self._in_flight: set[asyncio.Future[Any]] = set()

    def ref(self, namespace: str | None, name: str) -> str:
        """The ref of pod ``name`` in ``namespace`` (the name alone in the cluster's namespace)."""
        return name if not namespace or namespace == self.namespace else f"{namespace}/{name}"

    def where(self, ref: str) -> tuple[str, str]:
        """``(namespace, name)`` of a pod ref."""
        namespace, slash, name = ref.rpartition("/")
        return (namespace if slash else self.namespace), name

    async def _call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, _translated(fn))

    async def _mutate(self, fn: Callable[[float], T], send_by: float | None, *, call: str, pod: str) -> T:
        """Run a create/delete (``fn(total_timeout)``) under the rules of the module docstring."""
        if self._closing:
            raise CallNotSent("the executor is stopping; no new create or delete starts")
        deadline = self.call_deadline

        def send() -> T:
            if send_by is not None and time.monotonic() > send_by:
                raise CallNotSent("its fenced window closed before a worker thread was free")
            try:
                return fn(deadline)
            except urllib3.exceptions.ReadTimeoutError:
                # Sent, unanswered within the deadline: the API server may still carry it out, even
                # after a newer term began (its 409/404 is what makes that harmless). Operators and
                # the rolling-deploy test tell such a late pod from a fencing bug by this line.
                log.warning("gave up waiting for the API server's answer; it may still carry the call out",
                            extra={"call": call, "pod": pod, "deadline": deadline})
                raise

        future = asyncio.get_running_loop().run_in_executor(self._pool, _translated(send))
        self._in_flight.add(future)
        future.add_done_callback(self._in_flight.discard)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The caller's fenced window must outlive the call: wait for it (bounded by its deadline).
            await asyncio.wait({future})
            raise

    def begin_closing(self) -> None:
        """Refuse every create/delete from now on (they fail with :class:`~.errors.CallNotSent`)."""
        self._closing = True

    async def drain(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for the creates/deletes in flight; returns how many are still running."""
        pending = set(self._in_flight)
        if not pending:
            return 0
        _, still = await asyncio.wait(pending, timeout=timeout)
        return len(still)

    @staticmethod
    def _json(response: Any) -> Any:
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()

    # ------------------------------------------------------------------ pods

    async def create_pod(self, body: dict[str, Any], *, send_by: float | None = None) -> dict[str, Any]:
        """Create ``body`` in the namespace its metadata names (else the cluster's)."""
        namespace = str(body.get("metadata", {}).get("namespace") or self.namespace)
        return await self._mutate(lambda timeout: self._json(self.core.create_namespaced_pod(
            namespace, body, _preload_content=False, _request_timeout=timeout)),  # type: ignore[arg-type]
            send_by, call="create", pod=str(body.get("metadata", {}).get("name", "")))

    async def get_pod(self, ref: str) -> dict[str, Any] | None:
        namespace, name = self.where(ref)
        try:
            return await self._call(lambda: self._json(self.core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)))
        except ObjectNotFound:
            return None

    async def delete_pod(self, ref: str, *, grace_seconds: int = 30, uid: str | None = None,
                         send_by: float | None = None) -> bool:
        """Delete (with a uid precondition when given); False if it was already gone."""
        namespace, name = self.where(ref)
        body: dict[str, Any] = {"gracePeriodSeconds": grace_seconds}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self._mutate(lambda timeout: self._json(self.core.delete_namespaced_pod(
                name, namespace, body=body,  # type: ignore[arg-type]
                _preload_content=False, _request_timeout=timeout)), send_by, call="delete", pod=ref)
        except ObjectNotFound:
            return False
        return True

    async def list_pods(self, selector: str, *, page: int = 500,
                        namespace: str | None = None) -> tuple[list[dict[str, Any]], str]:
        """Every matching pod of ``namespace`` (else the cluster's; paginated), fresh from the API server,
        and the list's resourceVersion."""
        where = namespace or self.namespace
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"label_selector": selector, "limit": page, "_preload_content": False,
                                      "_request_timeout": REQUEST_TIMEOUT}
            if token:
                kwargs["_continue"] = token
            def page_call(kw: dict[str, Any] = kwargs) -> Any:
                return self._json(self.core.list_namespaced_pod(where, **kw))

            data = await self._call(page_call)
            items.extend(data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return items, str((data.get("metadata") or {}).get("resourceVersion", ""))

    async def read_log_tail(self, ref: str, max_bytes: int, *, tail_lines: int | None = None,
                            since_seconds: int | None = None, timestamps: bool = False,
                            read_timeout: float = LOG_READ_TIMEOUT) -> tuple[bytes, int]:
        """The last ``max_bytes`` of the task container's log (streamed, never held whole) and the size read.

        ``tail_lines`` / ``since_seconds`` bound what the kubelet sends (a live tail of a running
        pod must not transfer its whole log on every look); ``timestamps`` prefixes each line
        with the kubelet's RFC 3339 time. ``read_timeout`` bounds each wait for data (and the
        connect, at most 5 s): a kill passes a short one, since it must not wait on a slow kubelet.
        """
        timeout = (min(5.0, read_timeout), read_timeout)
        namespace, name = self.where(ref)
        options: dict[str, Any] = {"tail_lines": tail_lines, "since_seconds": since_seconds,
                                   "timestamps": timestamps or None}

        def read() -> tuple[bytes, int]:
            response: Any = self.core.read_namespaced_pod_log(
                name, namespace, container="task", _preload_content=False, _request_timeout=timeout,
                **{k: v for k, v in options.items() if v is not None})
            tail, size = bytearray(), 0
            try:
                for chunk in response.stream(64 * 1024):
                    size += len(chunk)
                    tail.extend(chunk)
                    if len(tail) > max_bytes:
                        del tail[: len(tail) - max_bytes]
            finally:
                response.release_conn()
            return bytes(tail), size

        return await self._call(read)

    async def copy_log(self, ref: str, container: str, sink: BinaryIO, *,
                       read_timeout: float = LOG_READ_TIMEOUT, skip: int = 0, previous: bool = False) -> int:
        """The whole log of one ``container`` of the pod, streamed into ``sink`` (never held whole); its size.

        For the log archive (an init container or a sidecar as well as ``task``): a 2 GB log costs
        one 64 KiB buffer. ``read_timeout`` bounds each wait for data, as in :meth:`read_log_tail`.
        The first ``skip`` bytes are read and not written (what the archive has already); the size
        returned counts them. ``previous``: the log of the container's run before its last restart.
        """
        timeout = (min(5.0, read_timeout), read_timeout)
        namespace, name = self.where(ref)

        options: dict[str, Any] = {"previous": True} if previous else {}

        def read() -> int:
            response: Any = self.core.read_namespaced_pod_log(
                name, namespace, container=container, _preload_content=False, _request_timeout=timeout,
                **options)
            size = 0
            try:
                for chunk in response.stream(64 * 1024):
                    if size + len(chunk) > skip:
                        sink.write(chunk[max(0, skip - size):])
                    size += len(chunk)
            finally:
                response.release_conn()
            return size

        return await self._call(read)

    async def follow_log(self, ref: str, container: str, sink: BinaryIO, *, skip: int = 0) -> int:
        """Follow one container's log (``follow=true``) into ``sink`` until the container ends or the
        stream is cut; the bytes written. The first ``skip`` bytes are read and dropped: the log API
        has no byte offset, so a follower resuming where the archive ends re-reads that much (one
        64 KiB buffer at a time), never holds it.

        Runs on its own threads (:data:`MAX_LOG_FOLLOWS`, never the pool creates and deletes use);
        raises :class:`~.errors.CallNotSent` when all are busy, and what the API answers otherwise.
        A pause in the output longer than :data:`FOLLOW_IDLE_TIMEOUT` ends the stream (the caller
        follows again if the container still runs).
        """
        namespace, name = self.where(ref)
        key = f"log:{ref}:{container}"
        with self._follow_lock:
            if self._closing or len(self._follows) >= MAX_LOG_FOLLOWS:
                raise CallNotSent(f"{MAX_LOG_FOLLOWS} logs are followed already")
            self._follows.add(key)

        def read() -> int:
            response: Any = self.core.read_namespaced_pod_log(
                name, namespace, container=container, follow=True, _preload_content=False,
                _request_timeout=(5.0, FOLLOW_IDLE_TIMEOUT))
            self._watch_responses[key] = response
            written, dropped = 0, 0
            try:
                for chunk in response.stream(64 * 1024):
                    if dropped < skip:
                        cut = min(len(chunk), skip - dropped)
                        dropped += cut
                        chunk = chunk[cut:]
                    if chunk:
                        sink.write(chunk)
                        sink.flush()
                        written += len(chunk)
            finally:
                self._watch_responses.pop(key, None)
                response.release_conn()
            return written

        try:
            return await asyncio.get_running_loop().run_in_executor(self._watch_pool, _translated(read))
        finally:
            with self._follow_lock:
                self._follows.discard(key)

    def stop_following(self, ref: str, container: str) -> None:
        """End a :meth:`follow_log` stream now (its thread returns what it wrote)."""
        response = self._watch_responses.get(f"log:{ref}:{container}")
        if response is not None:
            _shutdown(response)

    # ------------------------------------------------------------------ watch

    async def list_events(self, field_selector: str, *, namespace: str | None = None,
                          page: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Every core/v1 Event of ``namespace`` (else the cluster's) matching ``field_selector`` (paginated),
        fresh from the API server, and the list's resourceVersion. Events carry no labels of the pod
        they are about, so they are selected by field (``involvedObject.kind=Pod``), not by label."""
        where = namespace or self.namespace
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"field_selector": field_selector, "limit": page, "_preload_content": False,
                                      "_request_timeout": REQUEST_TIMEOUT}
            if token:
                kwargs["_continue"] = token

            def page_call(kw: dict[str, Any] = kwargs) -> Any:
                return self._json(self.core.list_namespaced_event(where, **kw))

            data = await self._call(page_call)
            items.extend(data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return items, str((data.get("metadata") or {}).get("resourceVersion", ""))

    async def watch(self, selector: str, resource_version: str, timeout_seconds: int,
                    on_event: Callable[[str, dict[str, Any]], None], *, namespace: str | None = None,
                    events: bool = False) -> str:
        """Stream one watch connection on ``namespace`` (else the cluster's); ``on_event`` is called on the
        event loop for each event. A resourceVersion belongs to its namespace's list: never resume another's.

        With ``events``, the watch is of core/v1 Events and ``selector`` is a *field* selector
        (events carry no labels); otherwise of pods, by label selector.

        Returns the resourceVersion to resume from when the server ends the watch (its timeout);
        raises :class:`~.errors.WatchExpired` on 410 Gone (list again) and another
        :class:`~.errors.KubernetesError` when the connection fails. BOOKMARK events only advance
        the resourceVersion.
        """
        loop = asyncio.get_running_loop()
        where = namespace or self.namespace

        lister: Callable[..., Any] = self.core.list_namespaced_event if events else self.core.list_namespaced_pod
        chooser: dict[str, Any] = {"field_selector" if events else "label_selector": selector}
        slot = f"events:{where}" if events else where

        def stream() -> str:
            rv = resource_version
            response: Any = lister(
                where, watch=True, resource_version=rv,
                allow_watch_bookmarks=True, timeout_seconds=timeout_seconds, _preload_content=False,
                _request_timeout=(5.0, timeout_seconds + 15.0), **chooser)
            self._watch_responses[slot] = response
            try:
                for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                    if not line:
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise ApiException(status=obj.get("code"), reason=obj.get("reason"))
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if event.get("type") != "BOOKMARK":
                        loop.call_soon_threadsafe(on_event, event["type"], obj)
                return rv
            finally:
                self._watch_responses.pop(slot, None)
                response.release_conn()

        def guarded() -> str:
            try:
                return stream()
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                error = translate(exc)
                if not isinstance(error, WatchExpired):  # an expired watch is routine, not a failure
                    POD_API_ERRORS.labels(code=str(error.code)).inc()
                raise error from None

        return await loop.run_in_executor(self._watch_pool, guarded)

    def close(self) -> None:
        for response in list(self._watch_responses.values()):
            _shutdown(response)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._watch_pool.shutdown(wait=False, cancel_futures=True)
        self.core.api_client.close()


def _translated(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` for a worker thread, raising only :mod:`.errors` types (each failure counted)."""
    def guarded() -> T:
        try:
            return fn()
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            error = translate(exc)
            POD_API_ERRORS.labels(code=str(error.code)).inc()
            raise error from None

    return guarded


def _shutdown(response: Any) -> None:
    """Unblock a thread reading a watch stream by shutting its socket down."""
    try:
        sock = response.connection.sock if response.connection else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except (AttributeError, OSError):
        pass
