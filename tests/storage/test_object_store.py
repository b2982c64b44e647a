"""The object storage door (leoflow.storage.objects) against a real S3 server and a directory: the
same calls, errors translated by meaning, every call bounded in time."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from leoflow.errors import SettingsError
from leoflow.settings import load_settings
from leoflow.standalone.config import standalone_settings
from leoflow.storage.objects import ObjectMissing, ObjectStore, StorageRefused, StorageUnavailable
from tests.harness.s3_server import HangingEndpoint, S3Server, aws_environment


def test_put_ranged_get_stream_and_delete(archive_url: str) -> None:
    async def main() -> None:
        store = ObjectStore(archive_url)
        data = bytes(range(256)) * 1000
        await store.put("a/b/0.gz", data)
        assert await store.get("a/b/0.gz") == data
        assert await store.get_range("a/b/0.gz", 1000, 1010) == data[1000:1010]
        assert await store.size("a/b/0.gz") == len(data)
        assert b"".join([piece async for piece in store.stream("a/b/0.gz", chunk_size=4096)]) == data
        assert await store.keys("a") == ["a/b/0.gz"]
        await store.delete(["a/b/0.gz", "a/b/never-written"])  # a key already gone counts as deleted
        assert await store.size("a/b/0.gz") is None
        with pytest.raises(ObjectMissing):
            await store.get("a/b/0.gz")

    asyncio.run(main())


def test_a_missing_bucket_is_a_refusal_naming_the_bucket(s3_env: S3Server) -> None:
    async def main() -> None:
        with pytest.raises(StorageRefused, match="s3://no-such-bucket/x: the bucket does not exist"):
            await ObjectStore("s3://no-such-bucket/x").put("k", b"x")

    asyncio.run(main())


def test_wrong_credentials_are_a_refusal() -> None:
    with S3Server(check_credentials=True) as strict, aws_environment(strict.environment()):
        async def main() -> None:
            with pytest.raises(StorageRefused, match=r"InvalidAccessKeyId|access refused"):
                await ObjectStore("s3://logs/x").put("k", b"x")

        asyncio.run(main())


def test_a_hanging_endpoint_costs_a_bounded_wait(s3_server: S3Server) -> None:
    with HangingEndpoint() as hang, aws_environment({**s3_server.environment(), "AWS_ENDPOINT_URL": hang.endpoint}):
        async def main() -> float:
            store = ObjectStore("s3://logs/x", timeout=0.5, connect_timeout=0.5, retries=0)
            started = time.monotonic()
            with pytest.raises(StorageUnavailable):
                await store.put("k", b"x")
            return time.monotonic() - started

        took = asyncio.run(main())
    assert took < 10, f"a hung endpoint held the call {took:.1f}s"


def test_an_archive_url_with_credentials_or_no_bucket_is_refused() -> None:
    for url, problem in (("s3://key:secret@bucket/x", "must not carry credentials"), ("s3:///x", "names no bucket"),
                         ("http://example.com/x", "must be off or start with"),
                         ("file://relative/dir", "absolute path")):
        with pytest.raises(ValueError, match=problem):
            ObjectStore(url)


@pytest.mark.parametrize(("value", "problem"), [
    ("http://bucket/x", "must be off or start with"), ("s3://", "names no bucket"),
    ("file://relative/dir", "absolute path"), ("s3://AKIA:hunter2@bucket/x", "must not carry credentials"),
    ("s3://bucket/x?secret=hunter2", "must not carry credentials"), ("s3://b/" + "x" * 1100, "at most 1024"),
])
def test_a_bad_archive_url_is_a_settings_error_naming_the_variable_without_echoing_it(value: str,
                                                                                      problem: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings({"LEOFLOW_DATABASE_URL": "postgresql://u@h/db", "LEOFLOW_LOG_ARCHIVE_URL": value})
    message = str(caught.value)
    assert message.startswith("LEOFLOW_LOG_ARCHIVE_URL: ") and problem in message
    assert "hunter2" not in message


def test_off_and_unset_mean_no_archive_and_standalone_archives_under_its_home(tmp_path: Path) -> None:
    base = {"LEOFLOW_DATABASE_URL": "postgresql://u@h/db", "LEOFLOW_HOME": str(tmp_path)}
    assert load_settings(base).log_archive.active_url is None
    off = load_settings({**base, "LEOFLOW_LOG_ARCHIVE_URL": "off"})
    assert off.log_archive.active_url is None
    standalone = standalone_settings(load_settings(base), database_url="postgresql://u@h/db", host="127.0.0.1",
                                     port=8080, admin_token=None)
    assert standalone.log_archive.active_url == (tmp_path / "log-archive").as_uri()
    kept_off = standalone_settings(off, database_url="postgresql://u@h/db", host="127.0.0.1", port=8080,
                                   admin_token=None)
    assert kept_off.log_archive.active_url is None
