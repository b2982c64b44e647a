"""Fixtures for standalone tests: a fresh LEOFLOW_HOME, and nothing left running after a test."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from leoflow.standalone.embedded import EmbeddedPostgres
from leoflow.standalone.home import StandaloneHome
from tests.standalone.procs import postgres_pids


@pytest.fixture
def home() -> Iterator[StandaloneHome]:
    """A fresh home in /tmp (short paths: the server's unix socket lives inside it)."""
    root = Path(tempfile.mkdtemp(prefix="lf-home-"))
    home = StandaloneHome.at(root)
    server_dir = home.server_dir  # outside the home when we are root
    yield home
    # Whatever the test did, never leak a server into the rest of the suite.
    if postgres_pids(server_dir / "data"):
        EmbeddedPostgres(server_dir / "data", port=1, socket_dir=home.socket_dir, widen_parents=False).kill()
    shutil.rmtree(root, ignore_errors=True)
    if server_dir != home.postgres_dir:
        shutil.rmtree(server_dir, ignore_errors=True)
