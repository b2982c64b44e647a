"""A small HTTP/1.1 client on the standard library, for the CLI's client verbs.

Why not httpx (which the server side uses): importing it costs 0.2-0.3 s on a busy host —
more than the whole budget of a client verb (``leoflow --help`` and a verb's own overhead
under 0.2 s). ``http.client`` is already loaded by the interpreter's own modules. One
connection is kept alive per :class:`HttpClient`, so ``runs trigger --wait`` follows a run over
one TCP connection.

Failure semantics: every transport problem (refused, reset, timeout, TLS, a malformed answer)
raises :class:`TransportError` with a one-line reason; the caller decides (the CLI retries while
following a run, otherwise prints the line and exits 1). HTTP error statuses are answers, not
exceptions.
"""

from __future__ import annotations

import http.client
import json
import ssl
from typing import Any
from urllib.parse import urlencode, urlsplit


class TransportError(Exception):
    """The request did not get an answer; ``refused`` when nothing listens at the address."""

    def __init__(self, message: str, *, refused: bool = False, timeout: bool = False) -> None:
        super().__init__(message)
        self.refused = refused
        self.timeout = timeout


class Headers(dict[str, str]):
    """Response headers, looked up case-insensitively (``answer.headers.get("ETag")``)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__((k.lower(), v) for k, v in pairs)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.lower() if isinstance(key, str) else key)

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


class HttpAnswer:
    """One HTTP answer, read whole (a plain class: :mod:`dataclasses` would cost a verb ~10 ms to import)."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: Headers, content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class HttpClient:
    """Requests against one base URL (``http://host:port/prefix``) on a kept-alive connection."""

    def __init__(self, base_url: str, *, headers: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"{base_url!r} is not an http(s) URL")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        try:
            self._port = parts.port
        except ValueError:
            raise TransportError(f"{base_url!r} has an invalid port") from None
        self._prefix = parts.path.rstrip("/")
        self._headers = dict(headers or {})
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                                         context=ssl.create_default_context())
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        return self._conn

    def request(self, method: str, path: str, *, params: dict[str, Any] | None = None, json_body: Any = None,
                content: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float | None = None) -> HttpAnswer:
        """One request; a kept-alive connection the server closed meanwhile is reopened once."""
        target = self._prefix + path
        query = {k: v for k, v in (params or {}).items() if v is not None}
        if query:
            target += "?" + urlencode(query)
        sent = {**self._headers, **(headers or {})}
        body = content
        if json_body is not None:
            body = json.dumps(json_body).encode()
            sent.setdefault("Content-Type", "application/json")
        for attempt in (1, 2):
            reused = self._conn is not None and self._conn.sock is not None
            try:
                conn = self._connection(timeout or self.timeout)
                conn.request(method, target, body=body, headers=sent)
                response = conn.getresponse()
                data = response.read()
                answer = HttpAnswer(response.status, Headers(response.getheaders()), data)
                if response.will_close:
                    self.close()
                return answer
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()
                if attempt == 1 and reused:
                    continue  # the server closed an idle kept-alive connection: reconnect once
                raise TransportError(f"the connection was closed ({type(exc).__name__})") from None
            except ConnectionRefusedError:
                self.close()
                raise TransportError("connection refused", refused=True) from None
            except TimeoutError:
                self.close()
                raise TransportError("no answer in time", timeout=True) from None
            except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
                self.close()
                raise TransportError(str(exc) or type(exc).__name__) from None
        raise AssertionError("unreachable")
