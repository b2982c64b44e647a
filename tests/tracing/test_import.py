"""Without an OTLP endpoint nothing of OpenTelemetry is imported: a fresh interpreter's sys.modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys

#: What a replica imports on its way to serving (the CLI, the composition root, the API, the
#: leader's scheduler and both executors), then whether it would trace.
_PROBE = """
import json, os, sys
import leoflow.cli.main, leoflow.replica, leoflow.api.app, leoflow.scheduler.core
import leoflow.executor.local.executor, leoflow.executor.kubernetes.create, leoflow.executor.log_archive
from leoflow import tracing
tracing.configure(os.environ, node_id="probe")
print(json.dumps({"on": tracing.enabled(), "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
"""


def _probe(**env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", _PROBE], env={**clean, **env}, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_nothing_of_opentelemetry_is_imported_without_an_endpoint() -> None:
    assert _probe() == {"on": False, "otel": []}
    # Switched off by the SDK's own switch, an endpoint changes nothing either.
    assert _probe(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_SDK_DISABLED="true") == {
        "on": False, "otel": []}


def test_with_an_endpoint_the_sdk_is_loaded() -> None:
    """The guard of the test above: the probe does see OpenTelemetry when tracing is on."""
    answer = _probe(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert answer["on"] is True
    assert "opentelemetry.sdk.trace" in answer["otel"]  # type: ignore[operator]


def test_otel_values_the_sdk_refuses_stop_serve_with_one_line() -> None:
    """Poison: a protocol the exporters cannot speak, or batch settings the SDK refuses, stop
    ``leoflow serve`` at start with exit code 2 and one line naming the variable, no traceback."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LEOFLOW_"))}
    base = {**clean, "LEOFLOW_DATABASE_URL": "postgresql://u:p@127.0.0.1:9/none", "LEOFLOW_AUTH": "disabled",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    for bad, named in (({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
                       ({"OTEL_BSP_MAX_QUEUE_SIZE": "1"}, "OpenTelemetry SDK refused")):
        done = subprocess.run([sys.executable, "-m", "leoflow", "serve"], env={**base, **bad}, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert named in done.stderr and "Traceback" not in done.stderr, done.stderr
