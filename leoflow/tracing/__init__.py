"""Traces of runs, tries and API requests, exported over OTLP when an endpoint is configured.

What is traced (the span names are fixed words, never ids, so a tracing tool's span-name index
stays small; the ids are attributes):

- ``leoflow.run``: a run, from its start to its end, emitted by whichever leader ends it;
- ``leoflow.try``: one try of a task, its child, emitted by the leader that records its end;
- ``leoflow.pod.create`` / ``leoflow.process.launch``: the executor starting a try (children of
  the try), and ``leoflow.log_archive.upload``: one chunk of its log shipped to object storage;
- ``HTTP <METHOD> <route template>``: an API request; its parent is the caller's ``traceparent``
  when it sends one, else the run's span when the route names a run, else none.

The trace of a run is computed, not remembered (:mod:`.ids`): spans emitted by different
replicas and successive leaders join one trace, and a task receives ``TRACEPARENT`` (W3C) naming
its try's span so its own spans join too. Run and try spans are emitted when they end, with the
start time the database recorded, so a leader that dies mid-run loses no span: the next one
emits them.

Without ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) nothing here does anything
and nothing of OpenTelemetry is imported: each entry point is one ``if`` on a module global.
Leoflow reads only whether an endpoint is set (:func:`configure`, called once by the replica's
start); every other ``OTEL_*`` variable is the SDK's to read, as the OpenTelemetry specification
defines it.

Failure semantics: tracing never fails the caller. A span that cannot be built is dropped with
a debug log line; export runs in the SDK's background thread with a bounded queue (:mod:`.otel`).
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from leoflow.model.tries import TryKey
from leoflow.tracing import ids

if TYPE_CHECKING:
    from leoflow.tracing.otel import OtelBackend

log = logging.getLogger(__name__)

#: The variables that switch tracing on (the OTLP exporter's standard names).
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
#: The variable a task reads its parent span from (W3C trace context, as OpenTelemetry's
#: environment-variable propagation specifies it).
TRACEPARENT_ENV = "TRACEPARENT"

_backend: OtelBackend | None = None
#: The try whose work (pod creation, log shipping) runs in this context: its spans' parent.
_CURRENT_TRY: contextvars.ContextVar[TryKey | None] = contextvars.ContextVar("leoflow_try", default=None)


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks for traces: an OTLP endpoint set, the SDK not disabled."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def configure(environ: Mapping[str, str], *, node_id: str) -> bool:
    """Start exporting if ``environ`` asks for it (see :func:`wanted`); True if it does.

    Raises :class:`~leoflow.errors.SettingsError` for a protocol the installed exporters cannot
    speak; a missing ``leoflow[otel]`` install is one too (the replica must not run silently
    without the traces its operator asked for).
    """
    global _backend
    if _backend is not None or not wanted(environ):
        return _backend is not None
    try:
        from leoflow.tracing.otel import OtelBackend
    except ImportError as exc:
        from leoflow.errors import SettingsError

        raise SettingsError("OTEL_EXPORTER_OTLP_ENDPOINT", f"is set but OpenTelemetry is not installed ({exc.name}): "
                            "pip install 'leoflow[otel]'") from None
    try:
        _backend = OtelBackend(environ, node_id=node_id)
    except ValueError as exc:  # the SDK checks its own variables (batch sizes, delays) and raises this
        from leoflow.errors import SettingsError

        raise SettingsError("OTEL_*", f"the OpenTelemetry SDK refused its settings: {exc}") from None
    log.info("tracing: exporting spans over OTLP", extra={"node_id": node_id})
    return True


def install(backend: OtelBackend | None) -> None:
    """Use ``backend`` (tests and :func:`configure`); None switches tracing off."""
    global _backend
    _backend = backend


def enabled() -> bool:
    return _backend is not None


def shutdown() -> None:
    """Flush what is queued (bounded, see :mod:`.otel`) and switch off."""
    global _backend
    backend, _backend = _backend, None
    if backend is not None:
        backend.shutdown()


def _ns(at: datetime | None, default: int) -> int:
    return default if at is None else int(at.timestamp() * 1_000_000) * 1_000


def _emit(name: str, **kwargs: Any) -> None:
    backend = _backend
    if backend is None:
        return
    try:
        backend.emit(name, **kwargs)
    except Exception as exc:  # containment: a span is never worth a scheduler step or a request
        log.debug("tracing: span dropped", extra={"span": name, "error": str(exc)[:200]})


# --------------------------------------------------------------------------- the leader's spans


def traceparent_for(key: TryKey) -> str:
    """``TRACEPARENT`` for ``key``'s task: its try span, in its run's trace."""
    trace_id = ids.run_trace_id(key.dag_id, key.run_id)
    backend = _backend
    sampled = backend is None or backend.sampled(trace_id)
    return ids.traceparent(trace_id, ids.try_span_id(key), ids.SAMPLED if sampled else 0)


def add_traceparent(env: MutableMapping[str, str], key: TryKey) -> None:
    """Give a try's environment its ``TRACEPARENT`` when tracing is on (else leave it as it is)."""
    if _backend is not None:
        env[TRACEPARENT_ENV] = traceparent_for(key)


def run_ended(dag_id: str, run_id: str, state: str, started_at: datetime | None, ended_at: datetime | None,
              *, reason: str | None = None) -> None:
    """The run's span, emitted once by the leader that ended it (the run's trace root)."""
    if _backend is None:
        return
    end = _ns(ended_at, time.time_ns())
    _emit("leoflow.run", trace_id=ids.run_trace_id(dag_id, run_id), span_id=ids.run_span_id(dag_id, run_id),
          parent_span_id=None, start_ns=_ns(started_at, end), end_ns=end,
          attributes={"leoflow.dag_id": dag_id, "leoflow.run_id": run_id, "leoflow.state": state},
          error=(reason or state) if state == "failed" else None)


def try_ended(key: TryKey, state: str, started_at: datetime | None, ended_at: datetime | None,
              *, exit_code: int | None = None, reason: str | None = None) -> None:
    """A try's span (child of its run's), emitted by the leader that records the try's end."""
    if _backend is None:
        return
    end = _ns(ended_at, time.time_ns())
    attributes: dict[str, Any] = {"leoflow.dag_id": key.dag_id, "leoflow.run_id": key.run_id,
                                  "leoflow.task_id": key.task_id, "leoflow.try_number": key.try_number,
                                  "leoflow.state": state}
    if key.map_index >= 0:
        attributes["leoflow.map_index"] = key.map_index
    if exit_code is not None:
        attributes["process.exit.code"] = exit_code
    _emit("leoflow.try", trace_id=ids.run_trace_id(key.dag_id, key.run_id), span_id=ids.try_span_id(key),
          parent_span_id=ids.run_span_id(key.dag_id, key.run_id), start_ns=_ns(started_at, end), end_ns=end,
          attributes=attributes, error=(reason or state) if state == "failed" else None)


@contextmanager
def in_try(key: TryKey) -> Iterator[None]:
    """Work for ``key`` (and tasks spawned inside) whose spans are the try's children."""
    if _backend is None:
        yield
        return
    token = _CURRENT_TRY.set(key)
    try:
        yield
    finally:
        _CURRENT_TRY.reset(token)


@contextmanager
def span(name: str, **attributes: str | int) -> Iterator[None]:
    """A child span of the current try (:func:`in_try`) around the block; nothing outside a try."""
    key = _CURRENT_TRY.get() if _backend is not None else None
    if key is None:
        yield
        return
    start = time.time_ns()
    error: str | None = None
    try:
        yield
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _emit(name, trace_id=ids.run_trace_id(key.dag_id, key.run_id), span_id=0,
              parent_span_id=ids.try_span_id(key), start_ns=start, end_ns=time.time_ns(),
              attributes={"leoflow.dag_id": key.dag_id, "leoflow.run_id": key.run_id,
                          "leoflow.task_id": key.task_id, "leoflow.try_number": key.try_number, **attributes},
              error=error, kind="client")
