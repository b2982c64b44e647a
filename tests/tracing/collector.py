"""An OTLP/HTTP trace collector for the tests: the real protocol, decoded with opentelemetry-proto.

It answers ``POST /v1/traces`` (protobuf, gzip or not) as a collector does and keeps every span
it received, flattened. ``hang=True`` makes it a collector that accepts connections and never
answers (the bad-endpoint tests).
"""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int
    status_message: str
    links: tuple[tuple[str, str], ...]


@dataclass
class Collector:
    hang: bool = False
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Collector:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                with collector.lock:
                    collector.connections += 1
                super().setup()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if collector.hang:
                    collector.release.wait(120)  # a collector that never answers (until the test ends)
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                collector.record(request, self.path)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="otlp-collector", daemon=True)
        self.thread.start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def record(self, request: ExportTraceServiceRequest, path: str) -> None:
        assert path == "/v1/traces", path
        received: list[ReceivedSpan] = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    received.append(ReceivedSpan(
                        s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.kind,
                        s.start_time_unix_nano, s.end_time_unix_nano, {a.key: _value(a.value) for a in s.attributes},
                        resource, s.status.code, s.status.message,
                        tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links)))
        with self.lock:
            self.requests += 1
            self.spans.extend(received)

    def named(self, name: str, **attributes: Any) -> list[ReceivedSpan]:
        with self.lock:
            return [s for s in self.spans if s.name == name
                    and all(s.attributes.get(k) == v for k, v in attributes.items())]

    def wait_for(self, name: str, timeout: float = 60, **attributes: Any) -> ReceivedSpan:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.named(name, **attributes)
            if found:
                return found[-1]
            time.sleep(0.05)
        with self.lock:
            seen = sorted({(s.name, str(s.attributes.get("leoflow.task_id"))) for s in self.spans})
        raise AssertionError(f"no span {name} {attributes} within {timeout}s; received: {seen}")

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
