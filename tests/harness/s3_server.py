"""A real S3-compatible server for the suite: moto's server, as its own process on loopback.

Leoflow's storage client reaches it exactly as it reaches AWS (``AWS_ENDPOINT_URL``,
``AWS_ALLOW_HTTP``, static keys in ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``): no patched
client. Buckets are made and deleted through the server's own S3 API (boto3), so a test can take
a bucket away mid-stream and give it back. Also here: :class:`HangingEndpoint`, a TCP server that
accepts connections and never answers (a storage endpoint that hangs).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

ACCESS_KEY = "leoflow-test-access"
SECRET_KEY = "leoflow-test-secret"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """``moto.server`` on a free loopback port, stopped (and its process reaped) on exit."""

    def __init__(self, *, check_credentials: bool = False) -> None:
        #: Make the server check keys like AWS does (moto's IAM: no user exists, so every key is unknown).
        self.check_credentials = check_credentials
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> S3Server:
        # -I: the working directory is not on sys.path (a test's tmp dir must not shadow a module).
        self._proc = subprocess.Popen([sys.executable, "-I", "-m", "moto.server", "-H", "127.0.0.1",
                                       "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      cwd=tempfile.gettempdir(), env=self._server_env())
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the S3 server did not start") from None
                time.sleep(0.05)
        return self

    def _server_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.check_credentials:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        return env

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def environment(self) -> dict[str, str]:
        """The provider variables Leoflow's client reads, pointing at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION}

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def delete_bucket(self, name: str) -> None:
        """Delete the bucket with everything in it (writes to it fail with NoSuchBucket after)."""
        s3 = self.client()
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for item in page.get("Contents", []):
                s3.delete_object(Bucket=name, Key=item["Key"])
        s3.delete_bucket(Bucket=name)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        s3 = self.client()
        found: list[str] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(found)


@contextlib.contextmanager
def aws_environment(env: dict[str, str]) -> Iterator[None]:
    """Set the provider variables for the block (the client reads them when a store is built)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class HangingEndpoint:
    """Accepts TCP connections and never answers: a storage endpoint that hangs."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.endpoint = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> HangingEndpoint:
        self._thread.start()
        return self

    def _accept(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self._held.append(conn)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._sock.close()
