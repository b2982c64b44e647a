"""A bucket, through ``obstore``: put, ranged get, stream, delete — bounded in time, errors by meaning.

Why ``obstore`` (the Python face of the Rust ``object_store`` crate, which DataFusion, Delta Lake
and InfluxDB use): one client for ``s3://``, ``gs://``, ``az://`` and ``file://`` with each
provider's standard credential chain built in (environment, shared files, IRSA / web identity,
ECS and instance metadata on AWS; workload identity and application-default credentials on GCP;
managed and workload identity on Azure), native async, ranged reads, and no Python dependency
of its own. fsspec with s3fs/gcsfs/adlfs would be three libraries with three credential stories
and aiobotocore's pinned botocore behind one of them.

S3-compatible servers (MinIO, Ceph, moto) are reached with the provider's own variables:
``AWS_ENDPOINT_URL`` (and ``AWS_ALLOW_HTTP=true`` for plain HTTP), read by the client like every
other ``AWS_*`` credential variable.

Failure semantics: every call is bounded — :data:`CONNECT_TIMEOUT` to connect, ``timeout`` per
request, and an overall :func:`asyncio.timeout` of ``timeout * (retries + 1)`` plus slack, so an
endpoint that accepts a connection and then hangs costs a bounded wait, never a stuck shipper.
Errors come out as :class:`StorageError` subclasses (:class:`ObjectMissing`,
:class:`StorageRefused` for credentials, permissions and missing buckets, :class:`StorageUnavailable`
for everything that may pass); the storage library's own exceptions never leave this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import obstore
from obstore import exceptions as obstore_errors
from obstore.store import LocalStore, from_url

from leoflow.errors import LeoflowError
from leoflow.settings.declared import archive_url

#: Seconds to open a connection: a storage endpoint answers a SYN in milliseconds when it is up.
CONNECT_TIMEOUT = 5.0
#: Seconds one request may take (a chunk of at most a few MiB uploads in well under a second on
#: any network that can carry logs at all; a hung endpoint is given up on after this).
REQUEST_TIMEOUT = 30.0
#: Retries inside the client for errors that may pass (5xx, resets), with its own backoff.
CLIENT_RETRIES = 2


class StorageError(LeoflowError):
    """The object storage refused or failed a request."""

    retryable = True


class ObjectMissing(StorageError):
    """The object does not exist (never written, or deleted)."""

    retryable = False


class StorageRefused(StorageError):
    """The object storage refused the request: credentials, permissions or a missing bucket.

    Retryable all the same: an operator fixes a policy or creates the bucket, and shipping resumes.
    """


class StorageUnavailable(StorageError):
    """The object storage did not answer, or answered with an error that may pass."""


def check_url(url: str) -> str:
    """``url`` if it names a bucket (or directory) Leoflow can use; ValueError naming the problem."""
    if archive_url(url) == "off":
        raise ValueError("is off: there is no object storage to use")
    return url


def redacted(url: str) -> str:
    """The URL as logs may show it (no user info, query or fragment)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{host}{parts.path}"


class ObjectStore:
    """One bucket (and prefix) named by a URL; keys are ``/``-separated paths below the prefix."""

    def __init__(self, url: str, *, timeout: float = REQUEST_TIMEOUT, connect_timeout: float = CONNECT_TIMEOUT,
                 retries: int = CLIENT_RETRIES) -> None:
        check_url(url)
        self.url = redacted(url)
        self.timeout = timeout
        #: The whole of one call, the client's retries included, and slack for its backoff.
        self.deadline = timeout * (retries + 1) + connect_timeout + 5.0
        parts = urlsplit(url)
        if parts.scheme == "file":
            Path(parts.path).mkdir(parents=True, exist_ok=True, mode=0o700)
            self._store: Any = LocalStore(parts.path, mkdir=True)
        else:
            options: dict[str, Any] = {"timeout": timedelta(seconds=timeout),
                                       "connect_timeout": timedelta(seconds=connect_timeout)}
            # Explicit client options replace the client's own reading of this provider variable.
            if os.environ.get("AWS_ALLOW_HTTP", "").lower() == "true":
                options["allow_http"] = True
            self._store = from_url(  # type: ignore[call-overload]
                url,
                client_options=options,
                retry_config={"max_retries": retries, "retry_timeout": timedelta(seconds=timeout * (retries + 1)),
                              "backoff": {"init_backoff": timedelta(milliseconds=100),
                                          "max_backoff": timedelta(seconds=2), "base": 2}})

    async def put(self, key: str, data: bytes) -> None:
        """Write the whole object at once: readers see all of it or nothing (never a half object)."""
        await self._call(obstore.put_async(self._store, key, data))

    async def put_file(self, key: str, path: Path) -> None:
        """Write the object from a local file, in parts for a large one (multipart on S3, GCS and
        Azure): readers see it only once the upload is complete."""
        await self._call(obstore.put_async(self._store, key, path))

    async def get(self, key: str) -> bytes:
        result = await self._call(obstore.get_async(self._store, key))
        return bytes(await self._call(result.bytes_async()))

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object."""
        if end <= start:
            return b""
        return bytes(await self._call(obstore.get_range_async(self._store, key, start=start, end=end)))

    async def stream(self, key: str, *, chunk_size: int = 1024 * 1024) -> AsyncIterator[bytes]:
        """The object in pieces of about ``chunk_size`` bytes, each piece read within the timeout."""
        result = await self._call(obstore.get_async(self._store, key))
        pieces = result.stream(min_chunk_size=chunk_size)
        while True:
            try:
                piece = await self._call(pieces.__anext__())
            except StopAsyncIteration:
                return
            yield bytes(piece)

    async def size(self, key: str) -> int | None:
        """The object's size, None when it does not exist."""
        try:
            meta = await self._call(obstore.head_async(self._store, key))
        except ObjectMissing:
            return None
        return int(meta["size"])

    async def delete(self, keys: Sequence[str]) -> None:
        """Delete ``keys``; a key that is already gone counts as deleted."""
        if not keys:
            return
        try:
            await self._call(obstore.delete_async(self._store, list(keys)))
        except ObjectMissing:  # file:// and some servers say so for a batch with a missing key
            for key in keys:
                with contextlib.suppress(ObjectMissing):
                    await self._call(obstore.delete_async(self._store, key))

    async def keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (for tests and audits; a log's index is in PostgreSQL)."""
        found: list[str] = []
        listing = obstore.list(self._store, prefix or None)
        while True:
            try:
                batch = await self._call(listing.__anext__())
            except StopAsyncIteration:
                return sorted(found)
            found.extend(str(meta["path"]) for meta in batch)

    async def _call(self, awaitable: Any) -> Any:
        try:
            async with asyncio.timeout(self.deadline):
                return await awaitable
        except TimeoutError as exc:
            raise StorageUnavailable(f"{self.url}: no answer within {self.deadline:g}s") from exc
        except (obstore_errors.NotFoundError, FileNotFoundError) as exc:
            message = _first_line(exc)
            if "NoSuchBucket" in message or "ContainerNotFound" in message:
                raise StorageRefused(f"{self.url}: the bucket does not exist: {message}") from exc
            raise ObjectMissing(f"{self.url}: {message}") from exc
        except (obstore_errors.PermissionDeniedError, obstore_errors.UnauthenticatedError) as exc:
            raise StorageRefused(f"{self.url}: access refused: {_first_line(exc)}") from exc
        except obstore_errors.BaseError as exc:
            message = _first_line(exc)
            if any(word in message for word in _REFUSALS):
                raise StorageRefused(f"{self.url}: {message}") from exc
            raise StorageUnavailable(f"{self.url}: {message}") from exc
        except OSError as exc:
            raise StorageUnavailable(f"{self.url}: {exc}") from exc


#: Words in a server's answer that mean "fix the configuration" rather than "wait" (S3 codes).
_REFUSALS = ("NoSuchBucket", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403 Forbidden",
             "401 Unauthorized")


def _first_line(exc: BaseException) -> str:
    """The storage library's message, one line, bounded (its messages can hold whole responses)."""
    text = " ".join(str(exc).split())
    return text[:500]
