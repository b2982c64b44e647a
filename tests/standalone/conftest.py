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
    yield StandaloneHome.at(root)
    # Whatever the test did, never leak a server into the rest of the suite.
    if postgres_pids(root / "postgres" / "data"):
        EmbeddedPostgres(root / "postgres" / "data", port=1, socket_dir=root / "postgres" / "socket").kill()
    shutil.rmtree(root, ignore_errors=True)
