"""The OpenTelemetry SDK behind :mod:`leoflow.tracing`: the only module that imports ``opentelemetry``.

Imported only when an OTLP endpoint is configured (:func:`leoflow.tracing.configure`), so a
replica without one loads nothing of OpenTelemetry. The SDK reads its own ``OTEL_*`` variables
(endpoint, headers, protocol, timeout, sampler, resource attributes, batch sizes) as its
specification defines them; Leoflow adds the node id as ``service.instance.id`` and names the
service ``leoflow`` unless ``OTEL_SERVICE_NAME`` says otherwise.

Failure semantics: spans go through the SDK's :class:`BatchSpanProcessor`: ending a span puts it
on a bounded queue (``OTEL_BSP_MAX_QUEUE_SIZE``, 2,048 by default; full → the span is dropped and
counted by the SDK) and a background thread exports batches, each request bounded by
``OTEL_EXPORTER_OTLP_TIMEOUT`` (10 s). An unreachable or hanging collector costs that thread's
time and the dropped spans, never the event loop's: no span call here does I/O. At exit the
provider gets :data:`SHUTDOWN_SECONDS` to flush, then is abandoned.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from leoflow.errors import SettingsError

log = logging.getLogger(__name__)

#: Seconds the exporter may take to flush at shutdown (a replica's stop must not wait on a
#: hanging collector longer than a SIGTERM grace period can spare).
SHUTDOWN_SECONDS = 3.0

#: Ids the next span must take (the deterministic ones of :mod:`leoflow.tracing.ids`); 0: random.
_FORCED_TRACE: contextvars.ContextVar[int] = contextvars.ContextVar("leoflow_forced_trace", default=0)
_FORCED_SPAN: contextvars.ContextVar[int] = contextvars.ContextVar("leoflow_forced_span", default=0)

_KINDS = {"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER, "client": SpanKind.CLIENT,
          "producer": SpanKind.PRODUCER, "consumer": SpanKind.CONSUMER}


class _DeterministicIds(RandomIdGenerator):
    """Random ids, except where :mod:`leoflow.tracing` asks for a given one (see ids.py: why)."""

    def generate_span_id(self) -> int:
        return _FORCED_SPAN.get() or super().generate_span_id()

    def generate_trace_id(self) -> int:
        return _FORCED_TRACE.get() or super().generate_trace_id()


def _exporter(environ: Mapping[str, str]) -> SpanExporter:
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError:
            raise SettingsError("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc needs the opentelemetry-exporter-otlp-proto-grpc "
                                "package; install it or use http/protobuf (installed with leoflow[otel])") from None
        exporter: SpanExporter = GrpcExporter()
        return exporter
    raise SettingsError("OTEL_EXPORTER_OTLP_PROTOCOL", f"{protocol[:40]!r} is not supported: use http/protobuf or grpc")


class OtelBackend:
    """A tracer provider with the OTLP exporter, and the few span shapes Leoflow emits."""

    def __init__(self, environ: Mapping[str, str], *, node_id: str, exporter: SpanExporter | None = None) -> None:
        resource = Resource.create({"service.instance.id": node_id})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "leoflow"}))
        self.provider = TracerProvider(resource=resource, id_generator=_DeterministicIds())
        self.provider.add_span_processor(BatchSpanProcessor(exporter or _exporter(environ)))
        self.tracer = self.provider.get_tracer("leoflow")

    def sampled(self, trace_id: int) -> bool:
        """Whether the configured sampler keeps the trace whose root is a run span of ``trace_id``.

        Asked for a run's trace id, the answer is the same on every replica for ratio samplers
        (they decide by the trace id), so a run's spans are kept or dropped together.
        """
        result = self.provider.sampler.should_sample(None, trace_id, "leoflow.run")
        return result.decision in (Decision.RECORD_AND_SAMPLE,)

    def emit(self, name: str, *, trace_id: int, span_id: int, parent_span_id: int | None, start_ns: int,
             end_ns: int, attributes: Mapping[str, Any], error: str | None = None, kind: str = "internal",
             links: Sequence[tuple[int, int]] = ()) -> None:
        """A span that already ended (a run, a try, a request), with the given ids."""
        context = None
        if parent_span_id is not None:
            flags = TraceFlags(TraceFlags.SAMPLED if self.sampled(trace_id) else TraceFlags.DEFAULT)
            parent = SpanContext(trace_id, parent_span_id, is_remote=True, trace_flags=flags)
            context = trace.set_span_in_context(NonRecordingSpan(parent))
        forced_trace = _FORCED_TRACE.set(trace_id)
        forced_span = _FORCED_SPAN.set(span_id)
        try:
            span = self.tracer.start_span(
                name, context=context, kind=_KINDS[kind], attributes=dict(attributes), start_time=start_ns,
                links=[Link(SpanContext(t, s, is_remote=True)) for t, s in links])
        finally:
            _FORCED_SPAN.reset(forced_span)
            _FORCED_TRACE.reset(forced_trace)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error[:500]))
        span.end(end_time=max(end_ns, start_ns))

    def shutdown(self) -> None:
        """Flush for at most :data:`SHUTDOWN_SECONDS`, in a thread (the SDK's own bound is longer)."""
        worker = threading.Thread(target=self.provider.shutdown, name="otel-shutdown", daemon=True)
        worker.start()
        worker.join(SHUTDOWN_SECONDS)
        if worker.is_alive():
            log.warning("tracing: spans not exported at shutdown (the collector did not answer in time)",
                        extra={"seconds": SHUTDOWN_SECONDS})
