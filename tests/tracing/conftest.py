"""Fixtures of the tracing tests: an OTLP collector over the real protocol, and a backend sending to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leoflow import tracing
from tests.tracing.collector import Collector


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector().start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def traced(collector: Collector, monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    """Tracing on in this process, exporting to ``collector`` every 50 ms (as a replica would)."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    assert tracing.configure(env, node_id="node-a")
    try:
        yield collector
    finally:
        tracing.shutdown()


# The Kubernetes executor's fixture: the fake API server the official client is pointed at.
from tests.executor.conftest import fake_k8s  # noqa: E402, F401
