"""The spans of leoflow.tracing as a collector receives them over OTLP/HTTP: ids, parents, names."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from leoflow import tracing
from leoflow.model.tries import TryKey
from leoflow.tracing import ids
from leoflow.tracing.asgi import RequestSpans, request_names_run
from tests.tracing.collector import Collector

KEY = TryKey("etl", "manual__1", "load", 2)
TRACE = f"{ids.run_trace_id('etl', 'manual__1'):032x}"
RUN_SPAN = f"{ids.run_span_id('etl', 'manual__1'):016x}"
TRY_SPAN = f"{ids.try_span_id(KEY):016x}"


def test_ids_are_deterministic_distinct_and_valid() -> None:
    assert ids.run_trace_id("etl", "manual__1") == ids.run_trace_id("etl", "manual__1")
    assert ids.run_trace_id("etl", "manual__1") != ids.run_trace_id("etl", "manual__2")
    assert ids.run_trace_id("a", "bc") != ids.run_trace_id("ab", "c")
    assert ids.try_span_id(KEY) != ids.try_span_id(KEY._replace(try_number=3))
    assert ids.try_span_id(KEY) != ids.try_span_id(KEY._replace(map_index=0))
    # The mapped instance's row id is not part of it: the leader's and the executor's keys agree.
    assert ids.try_span_id(KEY) == ids.try_span_id(KEY._replace(instance=7))
    header = ids.traceparent(ids.run_trace_id("etl", "manual__1"), ids.try_span_id(KEY))
    assert header == f"00-{TRACE}-{TRY_SPAN}-01"
    assert ids.parse_traceparent(header) == (int(TRACE, 16), int(TRY_SPAN, 16), 1)


@pytest.mark.parametrize("bad", [
    "", "garbage", "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "00-" + "1" * 32 + "-" + "0" * 16 + "-01",
    "ff-" + "1" * 32 + "-" + "1" * 16 + "-01", "00-" + "z" * 32 + "-" + "1" * 16 + "-01",
    "00-" + "1" * 31 + "-" + "1" * 16 + "-01", "00-" + "1" * 32 + "-" + "1" * 16 + "-01-extra", "x" * 10_000,
])
def test_a_malformed_traceparent_is_ignored(bad: str) -> None:
    assert ids.parse_traceparent(bad) is None


def test_off_nothing_is_emitted_and_no_traceparent(collector: Collector) -> None:
    assert not tracing.enabled()
    env: dict[str, str] = {}
    tracing.add_traceparent(env, KEY)
    tracing.run_ended("etl", "manual__1", "success", None, None)
    with tracing.in_try(KEY), tracing.span("leoflow.pod.create"):
        pass
    assert env == {} and collector.requests == 0


def test_run_try_and_child_spans_join_one_trace(traced: Collector) -> None:
    start = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    env: dict[str, str] = {}
    tracing.add_traceparent(env, KEY)
    assert env == {"TRACEPARENT": f"00-{TRACE}-{TRY_SPAN}-01"}
    with tracing.in_try(KEY):
        with tracing.span("leoflow.pod.create", pod="etl-load-2"):
            pass
        with pytest.raises(OSError), tracing.span("leoflow.log_archive.upload", container="task"):
            raise OSError("bucket refused")
    tracing.try_ended(KEY, "failed", start + timedelta(seconds=1), start + timedelta(seconds=5), exit_code=3,
                      reason="exit code 3")
    tracing.run_ended("etl", "manual__1", "success", start, start + timedelta(seconds=9))

    run = traced.wait_for("leoflow.run")
    attempt = traced.wait_for("leoflow.try")
    pod = traced.wait_for("leoflow.pod.create")
    upload = traced.wait_for("leoflow.log_archive.upload")
    assert {s.trace_id for s in (run, attempt, pod, upload)} == {TRACE}
    assert (run.span_id, run.parent_span_id) == (RUN_SPAN, "")
    assert (attempt.span_id, attempt.parent_span_id) == (TRY_SPAN, RUN_SPAN)
    assert pod.parent_span_id == TRY_SPAN and upload.parent_span_id == TRY_SPAN
    # Times are the database's, not the emitter's: a span emitted late still spans the run.
    assert run.end_ns - run.start_ns == 9_000_000_000 and attempt.end_ns - attempt.start_ns == 4_000_000_000
    assert attempt.attributes["process.exit.code"] == 3 and attempt.status_code == 2  # ERROR
    assert upload.status_code == 2 and "bucket refused" in upload.status_message
    assert pod.attributes["pod"] == "etl-load-2" and pod.status_code != 2
    assert run.resource["service.name"] == "leoflow" and run.resource["service.instance.id"] == "node-a"


def _app() -> Starlette:
    async def run(request: Request) -> PlainTextResponse:
        return PlainTextResponse("run")

    async def trigger(request: Request) -> PlainTextResponse:
        request_names_run(request.path_params["dag_id"], "manual__1")
        return PlainTextResponse("created", status_code=201)

    async def plain(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/api/v2/dags/{dag_id}/runs/{run_id}", run),
                             Route("/api/v2/dags/{dag_id}/runs", trigger, methods=["POST"]),
                             Route("/api/v2/dags", plain), Route("/healthz", plain)],
                     middleware=[Middleware(RequestSpans)])


def test_request_spans_parent_caller_then_run_then_none(traced: Collector) -> None:
    caller_trace, caller_span = "a" * 32, "b" * 16

    async def calls() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://api") as client:
            assert (await client.get("/api/v2/dags/etl/runs/manual__1")).status_code == 200
            assert (await client.post("/api/v2/dags/etl/runs", headers={
                "traceparent": f"00-{caller_trace}-{caller_span}-01"})).status_code == 201
            assert (await client.get("/api/v2/dags", headers={"traceparent": "00-nonsense"})).status_code == 200
            assert (await client.get("/healthz")).status_code == 200  # a probe: not traced
            assert (await client.get("/api/v2/dags/etl/runs/last")).status_code == 200  # exported after it

    asyncio.run(calls())

    about_run = traced.wait_for("HTTP GET /api/v2/dags/{dag_id}/runs/{run_id}", **{"leoflow.run_id": "manual__1"})
    assert (about_run.trace_id, about_run.parent_span_id) == (TRACE, RUN_SPAN)
    assert about_run.attributes["url.path"] == "/api/v2/dags/etl/runs/manual__1"
    assert about_run.attributes["http.response.status_code"] == 200 and about_run.kind == 2  # SERVER
    trigger = traced.wait_for("HTTP POST /api/v2/dags/{dag_id}/runs")
    assert (trigger.trace_id, trigger.parent_span_id) == (caller_trace, caller_span)
    assert trigger.links == ((TRACE, RUN_SPAN),)  # the caller's trace points at the run it created
    listing = traced.wait_for("HTTP GET /api/v2/dags")  # a malformed traceparent: a trace of its own
    assert listing.parent_span_id == "" and listing.trace_id not in (TRACE, caller_trace)
    traced.wait_for("HTTP GET /api/v2/dags/{dag_id}/runs/{run_id}", **{"leoflow.run_id": "last"})
    assert traced.named("HTTP GET /healthz") == []  # spans are exported in the order they ended


def test_a_hanging_collector_never_blocks_the_caller(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    hanging = Collector(hang=True).start()
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "50")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", hanging.endpoint)  # the SDK reads its own variables
    try:
        assert tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": hanging.endpoint}, node_id="n")
        # Far more spans than the queue holds while the exporter thread is stuck on the collector:
        # each call only enqueues (or drops), none waits for the network.
        for i in range(5_000):
            tracing.run_ended("etl", f"r{i}", "success", None, None)
        with caplog.at_level(logging.WARNING, logger="leoflow.tracing.otel"):
            tracing.shutdown()  # bounded (leoflow.tracing.otel.SHUTDOWN_SECONDS), then abandoned
        assert hanging.connections >= 1, "the exporter never reached the hanging collector: the test proves nothing"
        assert hanging.requests == 0
        assert "spans not exported at shutdown" in caplog.text
        assert not tracing.enabled()
    finally:
        tracing.shutdown()
        hanging.stop()


def test_an_unreachable_collector_never_blocks_the_caller(monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    closed = Collector().start()
    endpoint = closed.endpoint
    closed.stop()  # nothing listens there any more: every export is refused, then retried with backoff
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    try:
        with caplog.at_level(logging.WARNING):
            assert tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, node_id="n")
            for i in range(5_000):
                tracing.run_ended("etl", f"r{i}", "success", None, None)
            tracing.shutdown()
        assert "Connection refused" in caplog.text, "the exporter never tried: the test proves nothing"
        assert not tracing.enabled()
    finally:
        tracing.shutdown()


def test_an_unsupported_protocol_is_a_clear_settings_error() -> None:
    from leoflow.errors import SettingsError

    with pytest.raises(SettingsError, match=r"OTEL_EXPORTER_OTLP_PROTOCOL.*http/json"):
        tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, node_id="n")
    assert not tracing.enabled()
    assert not tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"},
                                 node_id="n")
    assert not tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, node_id="n")


def test_sdk_settings_it_refuses_are_a_clear_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from leoflow.errors import SettingsError

    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "10")  # smaller than the export batch (512): the SDK refuses
    with pytest.raises(SettingsError, match="OpenTelemetry SDK refused its settings: max_export_batch_size"):
        tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, node_id="n")
    assert not tracing.enabled()
