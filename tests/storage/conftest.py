"""Fixtures: a real S3-compatible server (moto, its own process) and a fresh bucket per test; file:// beside it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.s3_server import S3Server, aws_environment

_BUCKETS = itertools.count()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture
def s3_env(s3_server: S3Server) -> Iterator[S3Server]:
    """The AWS provider variables point at the test server for the test."""
    with aws_environment(s3_server.environment()):
        yield s3_server


@pytest.fixture
def bucket(s3_env: S3Server) -> str:
    name = f"logs-{next(_BUCKETS)}"
    s3_env.create_bucket(name)
    return name


@pytest.fixture(params=["s3", "file"])
def archive_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same tests over a bucket of the S3 server and over a local directory."""
    if request.param == "s3":
        name = request.getfixturevalue("bucket")
        return f"s3://{name}/archive"
    return (tmp_path / "archive").as_uri()
