"""Fixtures for multi-process election tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.election.cluster import Cluster


@pytest.fixture
def cluster(database_url: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(database_url, tmp_path)
    try:
        yield c
    finally:
        c.stop_all()
