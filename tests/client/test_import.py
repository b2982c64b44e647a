"""Importing the typed client loads nothing of the server, nor httpx: a script or notebook starts at once.

As the CLI's guard (``tests/cli/test_import_graph.py``), this reads ``sys.modules`` in a fresh
interpreter rather than timing it (a timing assertion would only measure the machine; the
docs page and the report give the measured number). The async client's httpx is loaded when an
:class:`~leoflow.client.AsyncClient` is made, not before.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.cli.test_import_graph import SERVER_SIDE_LIBRARIES, SERVER_SIDE_PACKAGES

PROBE = """
import json, sys
from leoflow.client import AsyncClient, Client
from leoflow.client.models import RunDetail
Client, AsyncClient, RunDetail
print(json.dumps(sorted(sys.modules)))
"""

#: Heavier standard modules the client does without at import (each costs milliseconds).
NOT_AT_IMPORT = ("dataclasses", "inspect", "logging", "http.client", "email", "ssl", "asyncio.base_events")


def modules_after(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_client_loads_no_server_side_code() -> None:
    modules = modules_after(PROBE)
    assert "leoflow.client.operations" in modules  # the probe did load the client
    leoflow = sorted(m for m in modules if m.startswith("leoflow"))
    assert [m for m in leoflow if not m.startswith(("leoflow.client", "leoflow.errors"))] == ["leoflow"]
    assert [m for m in modules if m.startswith(SERVER_SIDE_PACKAGES) or m.split(".")[0] in SERVER_SIDE_LIBRARIES] == []
    assert [m for m in NOT_AT_IMPORT if m in modules] == []


def test_the_probe_would_see_httpx() -> None:
    """Guards the test above: making an AsyncClient does load httpx, and the probe sees it."""
    modules = modules_after(PROBE.replace("Client, AsyncClient, RunDetail", "AsyncClient('http://127.0.0.1:9', 't')"))
    assert "httpx" in modules
