"""A faithful fake Kubernetes API server (pods and their events) for the official ``kubernetes`` client.

Serves HTTP/1.1 on loopback, so tests exercise the real client, its serialisation, its error
mapping and its connection pool. Implemented: ``/version``, ``/api``, and for pods
create / get / list / watch / delete / log, namespaced and (list/watch) across namespaces:

- server-filled ``uid``, ``resourceVersion``, ``creationTimestamp``, ``status``; 201 on create,
  404 ``NotFound``, 409 ``AlreadyExists``, 422 ``Invalid``, 400 ``BadRequest`` — all with a real
  ``Status`` body (see :mod:`.fake_k8s_store`, :mod:`.fake_k8s_selectors`);
- list with label/field selectors, ``limit`` and ``continue``;
- watch (chunked JSON lines) from a ``resourceVersion`` with ``timeoutSeconds``, ``BOOKMARK``
  events when ``allowWatchBookmarks``, and a 410 ``Expired`` ERROR event for a compacted version;
- a kubelet (:mod:`.fake_k8s_kubelet`) that runs pods through their phases and records core/v1
  Events about them (``Scheduled``, ``FailedScheduling``, ``FailedMount``, ``Pulling``, ``Failed``,
  ``BackOff``, ``Created``, ``Started``, ``Killing``; a repeat bumps ``count``), listed and watched
  under ``/api/v1/[namespaces/NS/]events`` with the Event field selectors (``involvedObject.kind``,
  ``involvedObject.name``, ``reason``, ``type``, …), sharing the pods' resourceVersions and 410;
- fault injection (:class:`Fault`): answer the next N matching requests with a given status
  (409 quota conflict, 429 with Retry-After, 500, 403, 422, ...), delay them, or drop the
  connection before or *after* doing the work (a create whose response is lost); drop all open
  watches; compact the history;
- a request log (:attr:`FakeKubernetes.requests`): every request, logged on arrival, with its
  verb, pod name, outcome (``code`` None while in flight), arrival ``time`` and ``done`` time
  (absent while in flight), and for creates the body sent, the pod's ``leoflow.io/term`` and
  ``leoflow.io/cluster`` labels and the moment the pod was stored (``created``).

In-process use: ``with FakeKubernetes() as k8s: k8s.write_kubeconfig(path)``. As a separate
process (for chaos/election tests): ``python -m tests.harness.fake_k8s --port N --kubeconfig F``;
it prints ``READY <port>`` and is controlled over ``/_fake/*`` (see :mod:`.fake_k8s_remote`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import BaseRequestHandler
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from tests.harness.fake_k8s_errors import ApiError, bad_request
from tests.harness.fake_k8s_kubelet import Kubelet
from tests.harness.fake_k8s_selectors import EVENT_FIELDS, FieldSelector, LabelSelector
from tests.harness.fake_k8s_store import Pod, PodStore

_DEFAULT_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
                    410: "Expired", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
                    503: "ServiceUnavailable", 504: "Timeout"}
_DEFAULT_MESSAGES = {
    409: 'Operation cannot be fulfilled on resourcequotas "compute-quota": the object has been modified; '
         "please apply your changes to the latest version and try again",
    403: 'pods is forbidden: User "system:serviceaccount:leoflow:leoflow" cannot create resource "pods" in '
         'API group "" in the namespace',
    422: 'Pod "x" is invalid: spec.containers[0].image: Required value',
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: etcdserver: request timed out",
}


@dataclass
class Fault:
    """Answer the next ``times`` requests of ``verb`` (create/get/list/watch/delete/log/*) specially.

    ``code`` > 0: respond with that status (and ``reason``/``message``/``retry_after``);
    ``drop="before"``: close the connection without doing anything; ``drop="after"``: do the
    work, then close without a response; ``delay``: wait that long first.
    """

    verb: str
    code: int = 0
    reason: str | None = None
    message: str | None = None
    times: int = 1
    delay: float = 0.0
    drop: str | None = None
    retry_after: int | None = None
    name_prefix: str | None = None
    #: Only requests in this namespace (None: any), e.g. a team namespace the executor may not list.
    namespace: str | None = None

    def error(self) -> ApiError:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        return ApiError(self.code, self.reason or _DEFAULT_REASONS.get(self.code, "Unknown"),
                        self.message or _DEFAULT_MESSAGES.get(self.code, f"injected failure {self.code}"),
                        headers=headers)


class _DroppedConnection(Exception):
    pass


class _Watch:
    def __init__(self) -> None:
        self.dropped = False


class FakeApiServer(ThreadingHTTPServer):
    """Keeps a handler's unexpected exception in :attr:`errors` instead of printing it.

    ``socketserver`` prints a handler's traceback to ``sys.stderr``; a handler thread can outlive
    its test (a log follow whose client is gone), and its traceback then lands in whichever test
    holds stderr (CI saw one break a CLI test's exact-stderr assertion). Kept here, an error
    during the fake's life fails the test that owns it (:meth:`FakeKubernetes.__exit__`). A
    client hanging up (reset, broken pipe) is not an error of the fake: clients get killed.
    """

    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not delay stop()
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], handler: Callable[[Any, Any, Self], BaseRequestHandler]) -> None:
        super().__init__(address, handler)
        self.errors: list[BaseException] = []
        self.print_errors = False  # as a process of its own (``main``), its stderr is its own

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if error is not None and not isinstance(error, ConnectionError):
            self.errors.append(error)
        if self.print_errors:
            super().handle_error(request, client_address)


class FakeKubernetes:
    """Store + kubelet + HTTP server; a context manager that starts and stops all three."""

    def __init__(self, *, port: int = 0, token: str | None = None, startup_delay: float = 0.02,
                 time_scale: float = 1.0, bookmark_interval: float = 1.0, history_limit: int = 100_000) -> None:
        self.store = PodStore(history_limit=history_limit)
        self.kubelet = Kubelet(self.store, startup_delay=startup_delay, time_scale=time_scale)
        self.token = token
        self.bookmark_interval = bookmark_interval
        self.faults: list[Fault] = []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._watches: set[_Watch] = set()
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = FakeApiServer(("127.0.0.1", port), handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-k8s-http", daemon=True)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeKubernetes:
        self.kubelet.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self.drop_watches()
        if self._thread.is_alive():  # shutdown() waits forever for a serve_forever() never started
            self.server.shutdown()
        self.server.server_close()
        self.kubelet.stop()

    def __enter__(self) -> FakeKubernetes:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self.stop()
        if exc_type is None and self.server.errors:
            raise AssertionError(f"the fake Kubernetes API server's handlers failed: {self.server.errors!r}")

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
        }
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        return path

    # ------------------------------------------------------------------ test controls

    def inject(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def open_watches(self) -> int:
        """Watch streams open right now (and not dropped): what :meth:`drop_watches` would cut."""
        with self._lock:
            return sum(1 for w in self._watches if not w.dropped)

    def drop_watches(self) -> None:
        """Cut every open watch stream abruptly (as a load balancer or API server restart would)."""
        with self._lock:
            for w in self._watches:
                w.dropped = True
        with self.store.cond:
            self.store.cond.notify_all()

    def creates(self, *, code: int | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["verb"] == "create" and (code is None or r["code"] == code)]

    def pods(self, namespace: str | None = None) -> list[Pod]:
        return [p for p in self.store.snapshot() if namespace is None or p["metadata"]["namespace"] == namespace]

    # ------------------------------------------------------------------ internals used by the handler

    def take_fault(self, verb: str, name: str | None, namespace: str | None = None) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                prefix_ok = fault.name_prefix is None or (name or "").startswith(fault.name_prefix)
                namespace_ok = fault.namespace is None or fault.namespace == namespace
                if fault.verb in (verb, "*") and prefix_ok and namespace_ok:
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def log_request(self, entry: dict[str, Any]) -> None:
        with self._lock:
            entry["seq"] = len(self.requests)
            self.requests.append(entry)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeKubernetes

    def setup(self) -> None:
        super().setup()
        # Headers and body are separate writes: without NODELAY, Nagle + delayed ACK add 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # ------------------------------------------------------------------ dispatch

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        body = self._body()
        segments = [s for s in parts.path.split("/") if s]
        if segments[:1] == ["_fake"]:
            self._control(method, segments[1:], body)
            return
        entry: dict[str, Any] = {"time": time.time(), "method": method, "path": parts.path}
        self._entry, self._entry_logged = entry, False
        try:
            try:
                self._authorize()
                self._route(method, segments, query, body, entry)
            except _DroppedConnection:
                if entry.get("code") is None:
                    entry["code"] = 0
                entry["outcome"] = "dropped"
                self._drop()
            except ApiError as err:
                entry.setdefault("code", err.code)
                entry["code"], entry["reason"] = err.code, err.reason
                self._json(err.code, err.status(), err.headers)
        except (BrokenPipeError, ConnectionResetError):  # the client hung up: on an answer or an error alike
            self.close_connection = True
        finally:
            self._log_entry()
            entry["done"] = time.time()  # answered (or dropped); an entry without it is in flight

    def _route(self, method: str, seg: list[str], query: dict[str, str], body: bytes,
               entry: dict[str, Any]) -> None:
        if seg == ["version"] and method == "GET":
            self._json(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-leoflow-fake"})
            return
        if seg == ["api"] and method == "GET":
            self._json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
            return
        if seg == ["api", "v1", "pods"] and method == "GET":
            self._list_or_watch(None, query, entry)
            return
        if method == "GET" and (seg == ["api", "v1", "events"]
                                or (len(seg) == 5 and seg[:3] == ["api", "v1", "namespaces"] and seg[4] == "events")):
            self._events(seg[3] if len(seg) == 5 else None, query, entry)
            return
        if len(seg) >= 5 and seg[:3] == ["api", "v1", "namespaces"] and seg[4] == "pods":
            ns = seg[3]
            if len(seg) == 5 and method == "GET":
                self._list_or_watch(ns, query, entry)
                return
            if len(seg) == 5 and method == "POST":
                self._create(ns, body, entry)
                return
            if len(seg) == 6 and method == "GET":
                self._simple("get", ns, seg[5], entry, lambda: self.fake.store.get(ns, seg[5]))
                return
            if len(seg) == 6 and method == "DELETE":
                grace = entry["grace"] = _grace(query, body)
                self._simple("delete", ns, seg[5], entry, lambda: self.fake.store.delete(ns, seg[5], grace))
                return
            if len(seg) == 7 and seg[6] == "log" and method == "GET":
                self._log(ns, seg[5], query, entry)
                return
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # ------------------------------------------------------------------ verbs

    def _apply_fault(self, verb: str, name: str | None, entry: dict[str, Any]) -> Fault | None:
        entry["verb"], entry["name"] = verb, name
        entry.setdefault("code", None)
        self._log_entry()  # logged on arrival: a request being delayed is visible as in flight
        fault = self.fake.take_fault(verb, name, entry.get("namespace"))
        if fault is None:
            return None
        entry["fault"] = True
        if fault.delay:
            time.sleep(fault.delay)
        if fault.drop == "before":
            raise _DroppedConnection()
        if fault.code:
            raise fault.error()
        return fault

    def _create(self, ns: str, body: bytes, entry: dict[str, Any]) -> None:
        try:
            pod = json.loads(body or b"{}")
        except ValueError:
            raise bad_request("the body of the request was in an unknown format") from None
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        entry.update({"namespace": ns, "term": labels.get("leoflow.io/term"),
                      "cluster": labels.get("leoflow.io/cluster"), "body": pod})
        fault = self._apply_fault("create", meta.get("name"), entry)
        created = self.fake.store.create(ns, pod)
        entry["code"], entry["created"] = 201, time.time()
        if fault is not None and fault.drop == "after":
            raise _DroppedConnection()
        self._json(201, created)

    def _simple(self, verb: str, ns: str, name: str, entry: dict[str, Any], action: Any) -> None:
        entry["namespace"] = ns
        fault = self._apply_fault(verb, name, entry)
        result = action()
        entry["code"] = 200
        if fault is not None and fault.drop == "after":
            raise _DroppedConnection()
        self._json(200, result)

    def _list_or_watch(self, ns: str | None, query: dict[str, str], entry: dict[str, Any]) -> None:
        labels = LabelSelector(query.get("labelSelector"))
        fields = FieldSelector(query.get("fieldSelector"))
        entry["namespace"], entry["selector"] = ns, query.get("labelSelector")
        if query.get("watch") in ("true", "1"):
            self._apply_fault("watch", None, entry)
            entry["code"] = 200
            self._watch(ns, labels, fields, query)
            return
        fault = self._apply_fault("list", None, entry)
        limit = int(query["limit"]) if query.get("limit") else None
        items, rv, cont = self.fake.store.list(ns, labels, fields, limit=limit,
                                               continue_after=query.get("continue") or None)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if cont:
            meta["continue"] = cont
        entry["code"], entry["count"] = 200, len(items)
        if fault is not None and fault.drop == "after":
            raise _DroppedConnection()
        self._json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items})

    def _events(self, ns: str | None, query: dict[str, str], entry: dict[str, Any]) -> None:
        """core/v1 Events: list or watch with a field selector (events carry no labels of their pod)."""
        fields = FieldSelector(query.get("fieldSelector"), EVENT_FIELDS)
        entry["namespace"], entry["selector"] = ns, query.get("fieldSelector")
        if query.get("watch") in ("true", "1"):
            self._apply_fault("watch-events", None, entry)
            entry["code"] = 200
            self._watch(ns, LabelSelector(None), fields, query, events=True)
            return
        fault = self._apply_fault("list-events", None, entry)
        items, rv = self.fake.store.list_events(ns, fields)
        entry["code"], entry["count"] = 200, len(items)
        if fault is not None and fault.drop == "after":
            raise _DroppedConnection()
        self._json(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)},
                         "items": items})

    def _log(self, ns: str, name: str, query: dict[str, str], entry: dict[str, Any]) -> None:
        """``GET .../pods/NAME/log``: ``container``, ``timestamps``, ``sinceTime``, ``sinceSeconds``,
        ``tailLines``, ``limitBytes`` and ``follow`` (chunked: the lines so far, then each new one as it
        is written, until the container ends or the pod is gone) as the kubelet serves them."""
        entry["namespace"] = ns
        self._apply_fault("log", name, entry)
        pod = self.fake.store.get(ns, name)
        spec = pod["spec"]
        names = [c["name"] for c in spec["containers"]]
        every = [c["name"] for c in spec.get("initContainers") or []] + names
        container = query.get("container")
        if not container:
            if len(names) > 1:
                raise bad_request(f"a container name must be specified for pod {name}, choose one of: "
                                  f"[{' '.join(names)}]")
            container = names[0]
        entry["container"], entry["query"] = container, dict(query)
        if container not in every:
            raise bad_request(f"container {container} is not valid for pod {name}")
        statuses = [*(pod["status"].get("initContainerStatuses") or []),
                    *(pod["status"].get("containerStatuses") or [])]
        state: dict[str, Any] = next((cs["state"] for cs in statuses if cs["name"] == container), {"waiting": {}})
        lines = self.fake.kubelet.log_lines(pod["metadata"]["uid"], container)
        if query.get("previous") in ("true", "1"):
            lines = self.fake.kubelet.previous_log_lines(pod["metadata"]["uid"], container)
            if lines is None:
                raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
            state = {"terminated": {}}
        if "waiting" in state or lines is None:
            reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
            raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        if query.get("sinceTime"):
            since = datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00")).timestamp()
            lines = [(t, x) for t, x in lines if t >= since]
        if query.get("sinceSeconds"):
            lines = [(t, x) for t, x in lines if t >= time.time() - int(query["sinceSeconds"])]
        if query.get("tailLines"):
            tail = int(query["tailLines"])
            lines = lines[-tail:] if tail > 0 else []
        stamp = query.get("timestamps") in ("true", "1")
        data = "".join(f"{_rfc3339_nano(t)} {x}\n" if stamp else f"{x}\n" for t, x in lines).encode()
        if query.get("limitBytes"):
            data = data[: int(query["limitBytes"])]
        entry["code"] = 200
        if query.get("follow") in ("true", "1") and query.get("previous") not in ("true", "1"):
            self._follow(pod["metadata"]["uid"], container, data, len(self.fake.kubelet.log_lines(
                pod["metadata"]["uid"], container) or []), stamp)
            return
        self._send(200, data, "text/plain")

    def _follow(self, uid: str, container: str, first: bytes, seen: int, stamp: bool) -> None:
        """Stream a container's log as it is written (``follow=true``); droppable like a watch."""
        self._log_entry()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        watch = _Watch()
        with self.fake._lock:
            self.fake._watches.add(watch)
        try:
            self._chunk(first)
            kubelet = self.fake.kubelet
            run = kubelet.run_of(uid, container)
            while not watch.dropped:
                ended = kubelet.ended(uid, container, run)  # read before the lines: none written after is missed
                if kubelet.run_of(uid, container) is not run:  # restarted: this run's stream is over
                    self._end_chunks()
                    return
                lines = kubelet.log_lines(uid, container) or []
                fresh = lines[seen:]
                seen = len(lines)
                self._chunk("".join(f"{_rfc3339_nano(t)} {x}\n" if stamp else f"{x}\n" for t, x in fresh).encode())
                if ended:
                    self._end_chunks()
                    return
                time.sleep(0.02)
            self._drop()
        finally:
            with self.fake._lock:
                self.fake._watches.discard(watch)

    def _watch(self, ns: str | None, labels: LabelSelector, fields: FieldSelector, query: dict[str, str], *,
               events: bool = False) -> None:
        """A watch of pods (or, with ``events``, of core/v1 Events: same resourceVersions, own history)."""
        store, fake = self.fake.store, self.fake
        current = store.events if events else store.pods
        after = store.events_events_after if events else store.events_after
        kind = "Event" if events else "Pod"
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        rv_param = query.get("resourceVersion") or ""
        self._log_entry()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        watch = _Watch()
        with fake._lock:
            fake._watches.add(watch)
        try:
            with store.cond:
                if rv_param in ("", "0"):
                    initial = [p for p in current.values() if (ns is None or p["metadata"]["namespace"] == ns)
                               and labels.matches(p["metadata"].get("labels") or {}) and fields.matches(p)]
                    chunk = b"".join(json.dumps({"type": "ADDED", "object": p}).encode() + b"\n" for p in initial)
                    cursor = store.rv
                elif int(rv_param) < store.compacted_rv:
                    gone = ApiError(410, "Expired", f"too old resource version: {rv_param} ({store.compacted_rv})")
                    chunk, cursor = json.dumps({"type": "ERROR", "object": gone.status()}).encode() + b"\n", -1
                else:
                    chunk, cursor = b"", int(rv_param)
            self._chunk(chunk)
            if cursor < 0:
                self._end_chunks()
                return
            deadline = time.monotonic() + timeout
            last_bookmark = time.monotonic()
            while True:
                with store.cond:
                    changes = after(cursor)
                    if not changes and not watch.dropped:
                        wait = min(deadline, last_bookmark + self.fake.bookmark_interval) - time.monotonic()
                        store.cond.wait(max(0.0, wait))
                        changes = after(cursor)
                    if not changes:
                        cursor = max(cursor, store.rv)  # everything up to rv was seen under this lock
                if watch.dropped:
                    self._drop()
                    return
                if changes:
                    cursor = changes[-1].rv
                    payload = b"".join(e.payload() for e in changes
                                       if (ns is None or e.namespace == ns)
                                       and labels.matches(e.pod["metadata"].get("labels") or {})
                                       and fields.matches(e.pod))
                    self._chunk(payload)
                now = time.monotonic()
                if bookmarks and now - last_bookmark >= self.fake.bookmark_interval:
                    last_bookmark = now
                    self._chunk(json.dumps({"type": "BOOKMARK", "object": {
                        "kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(cursor)}}}).encode()
                        + b"\n")
                if now >= deadline:
                    self._end_chunks()
                    return
        finally:
            with fake._lock:
                fake._watches.discard(watch)

    # ------------------------------------------------------------------ control plane (/_fake)

    def _control(self, method: str, seg: list[str], body: bytes) -> None:
        fake = self.fake
        data = json.loads(body) if body else {}
        if seg == ["faults"] and method == "POST":
            fake.inject(Fault(**data))
        elif seg == ["faults"] and method == "DELETE":
            fake.clear_faults()
        elif seg == ["requests"] and method == "GET":
            with fake._lock:
                self._json(200, {"requests": list(fake.requests)})
            return
        elif seg == ["pods"] and method == "GET":
            self._json(200, {"items": fake.pods()})
            return
        elif seg == ["drop-watches"] and method == "POST":
            fake.drop_watches()
        elif seg == ["compact"] and method == "POST":
            fake.store.compact()
        elif seg == ["objects"] and method == "POST":
            kubelet = fake.kubelet
            kubelet.secrets.update(data.get("secrets") or {})
            kubelet.config_maps.update(data.get("config_maps") or {})
            kubelet.pvcs.update(data.get("pvcs") or [])
            kubelet.node.labels.update(data.get("node_labels") or {})
        elif seg == ["kubelet"] and method == "POST":
            if data.get("paused"):
                fake.kubelet.paused.set()
            else:
                fake.kubelet.paused.clear()
        else:
            self._json(404, {"error": "unknown control endpoint"})
            return
        self._json(200, {"ok": True})

    # ------------------------------------------------------------------ HTTP plumbing

    def _authorize(self) -> None:
        if self.fake.token and self.headers.get("Authorization") != f"Bearer {self.fake.token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json", headers)

    def _log_entry(self) -> None:
        """Log the request once, *before* its response leaves: a client never sees an unlogged answer."""
        entry = getattr(self, "_entry", None)
        if entry is not None and "verb" in entry and not self._entry_logged:
            self._entry_logged = True
            self.fake.log_request(entry)

    def _send(self, code: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self._log_entry()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def _end_chunks(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _rfc3339_nano(moment: float) -> str:
    """The kubelet's log timestamp: RFC 3339 with nine fraction digits, in UTC."""
    whole = datetime.fromtimestamp(moment, UTC)
    return whole.strftime("%Y-%m-%dT%H:%M:%S.") + f"{whole.microsecond * 1000:09d}Z"


def _grace(query: dict[str, str], body: bytes) -> int | None:
    if query.get("gracePeriodSeconds"):
        return int(query["gracePeriodSeconds"])
    if body:
        try:
            options = json.loads(body)
        except ValueError:
            return None
        value = options.get("gracePeriodSeconds") if isinstance(options, dict) else None
        return int(value) if value is not None else None
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the fake Kubernetes API server.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig", type=Path)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--token")
    parser.add_argument("--startup-delay", type=float, default=0.02)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--bookmark-interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    fake = FakeKubernetes(port=args.port, token=args.token, startup_delay=args.startup_delay,
                          time_scale=args.time_scale, bookmark_interval=args.bookmark_interval)
    fake.server.print_errors = True
    if args.kubeconfig:
        fake.write_kubeconfig(args.kubeconfig, args.namespace)
    fake.start()
    print(f"READY {fake.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
