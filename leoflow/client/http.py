"""A small HTTP/1.1 client for the CLI's client verbs: plain sockets for ``http://``, ``http.client`` for ``https://``.

Why not httpx (which the server side uses): importing it costs 0.2-0.3 s on a busy host —
more than the whole budget of a client verb (``leoflow --help`` and a verb's own overhead
under 0.2 s). Why not ``http.client`` for ``http://`` either: it imports :mod:`email` (to
parse headers) and :mod:`ssl` at module level, 20-28 ms of a verb's ~100 ms start-up on this
host, for an exchange this module does in a few dozen lines — one request at a time on a
kept-alive connection, answers framed by ``Content-Length``, ``chunked`` or the connection's
end. ``https://`` still goes through ``http.client`` (certificate checks are not ours to
write), imported only then. Either way one connection is kept alive per :class:`HttpClient`,
so ``runs trigger --wait`` follows a run over one TCP connection.

Failure semantics: every transport problem (refused, reset, timeout, TLS, a malformed or
oversized answer) raises :class:`TransportError` with a one-line reason; the caller decides
(the CLI retries while following a run, otherwise prints the line and exits 1). HTTP error
statuses are answers, not exceptions. A kept-alive connection the server closed while idle is
reopened once.
"""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlencode, urlsplit

#: Limits on an answer's head, as http.client's (a longer line or more headers is malformed).
MAX_LINE = 65536
MAX_HEADERS = 100


class TransportError(Exception):
    """The request did not get an answer; ``refused`` when nothing listens at the address."""

    def __init__(self, message: str, *, refused: bool = False, timeout: bool = False) -> None:
        super().__init__(message)
        self.refused = refused
        self.timeout = timeout


class Disconnected(ConnectionError):
    """The server closed the connection before answering (an idle kept-alive one, usually)."""


class Malformed(ValueError):
    """The answer is not HTTP/1.x as this client reads it."""


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


class PlainConnection:
    """HTTP/1.1 over one TCP socket, opened on first use."""

    def __init__(self, host: str, port: int | None) -> None:
        # An ASCII host goes to getaddrinfo as bytes: a str would load the idna codec (2-3 ms).
        self._address = (host.encode("ascii") if host.isascii() else host, port or 80)
        self._host_header = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
        self._sock: socket.socket | None = None
        self._reader: Any = None

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    def close(self) -> None:
        if self._sock is not None:
            self._reader.close()
            self._sock.close()
            self._sock = self._reader = None

    def exchange(self, method: str, target: str, headers: dict[str, str], body: bytes | None,
                 timeout: float) -> tuple[HttpAnswer, bool]:
        if self._sock is None:
            self._sock = socket.create_connection(self._address, timeout)  # type: ignore[arg-type]
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._reader = self._sock.makefile("rb")
        self._sock.settimeout(timeout)
        self._sock.sendall(request_head(method, target, self._host_header, headers, body) + (body or b""))
        return read_answer(self._reader, method)


def request_head(method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request line and headers, as http.client would send them (Host, identity encoding, length)."""
    sent = {"Host": host, "Accept-Encoding": "identity", **headers}
    if body is not None or method in ("POST", "PUT", "PATCH"):
        sent["Content-Length"] = str(len(body or b""))
    if any(c in target for c in " \t\r\n") or any("\r" in x or "\n" in x for pair in sent.items() for x in pair):
        raise Malformed("a request header or the URL contains a line break or a space")
    text = "\r\n".join([f"{method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in sent.items())]) + "\r\n\r\n"
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        raise Malformed("a request header contains a character HTTP cannot carry") from None


def _line(reader: Any) -> bytes:
    line: bytes = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise Malformed("answer line too long")
    return line


def read_answer(reader: Any, method: str) -> tuple[HttpAnswer, bool]:
    """Read one whole answer from a buffered reader; (answer, whether the connection must close).

    Informational answers (``100 Continue``) are skipped; the body is framed by
    ``Transfer-Encoding: chunked``, else ``Content-Length``, else the end of the connection.
    """
    while True:
        status_line = _line(reader)
        if not status_line:
            raise Disconnected("the server closed the connection without answering")
        version, _, rest = status_line.decode("latin-1").strip().partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit() or (len(rest) > 3 and rest[3] != " "):
            raise Malformed(f"not an HTTP answer: {status_line[:60]!r}")
        status = int(code)
        pairs: list[tuple[str, str]] = []
        while True:
            line = _line(reader)
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise Disconnected("the connection ended inside the answer's headers")
            name, colon, value = line.decode("latin-1").partition(":")
            if not colon or len(pairs) >= MAX_HEADERS:
                raise Malformed("malformed answer headers")
            pairs.append((name.strip(), value.strip()))
        if not 100 <= status < 200:
            break
    headers = Headers(pairs)
    connection = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    will_close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    if method == "HEAD" or status in (204, 304):
        return HttpAnswer(status, headers, b""), will_close
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return HttpAnswer(status, headers, _chunked(reader)), will_close
    length = headers.get("content-length")
    if length is None:
        return HttpAnswer(status, headers, reader.read()), True
    if not length.strip().isdigit():
        raise Malformed(f"bad Content-Length {length[:20]!r}")
    content: bytes = reader.read(int(length))
    if len(content) < int(length):
        raise Disconnected("the connection ended inside the answer's body")
    return HttpAnswer(status, headers, content), will_close


def _chunked(reader: Any) -> bytes:
    parts: list[bytes] = []
    while True:
        size_text = _line(reader).split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise Malformed(f"bad chunk size {size_text[:20]!r}") from None
        if size == 0:
            while _line(reader) not in (b"\r\n", b"\n", b""):
                pass  # trailers: ignored
            return b"".join(parts)
        chunk: bytes = reader.read(size + 2)
        if len(chunk) < size + 2:
            raise Disconnected("the connection ended inside a chunk")
        parts.append(chunk[:size])


class TlsConnection:
    """``https://`` through http.client (and ssl), imported only by a client that needs them."""

    def __init__(self, host: str, port: int | None) -> None:
        import http.client
        import ssl

        self._conn = http.client.HTTPSConnection(host, port, context=ssl.create_default_context())

    @property
    def is_open(self) -> bool:
        return self._conn.sock is not None

    def close(self) -> None:
        self._conn.close()

    def exchange(self, method: str, target: str, headers: dict[str, str], body: bytes | None,
                 timeout: float) -> tuple[HttpAnswer, bool]:
        import http.client

        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        try:
            self._conn.request(method, target, body=body, headers=headers)
            response = self._conn.getresponse()
            data = response.read()
        except http.client.RemoteDisconnected as exc:
            raise Disconnected(str(exc)) from None
        except http.client.HTTPException as exc:
            raise Malformed(str(exc) or type(exc).__name__) from None
        return HttpAnswer(response.status, Headers(response.getheaders()), data), response.will_close


class HttpClient:
    """Requests against one base URL (``http://host:port/prefix``) on a kept-alive connection."""

    def __init__(self, base_url: str, *, headers: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"{base_url!r} is not an http(s) URL")
        try:
            port = parts.port
        except ValueError:
            raise TransportError(f"{base_url!r} has an invalid port") from None
        self._conn: PlainConnection | TlsConnection = (
            TlsConnection(parts.hostname, port) if parts.scheme == "https" else PlainConnection(parts.hostname, port))
        self._prefix = parts.path.rstrip("/")
        self._headers = dict(headers or {})
        self.timeout = timeout

    def close(self) -> None:
        self._conn.close()

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
            reused = self._conn.is_open
            try:
                answer, will_close = self._conn.exchange(method, target, sent, body, timeout or self.timeout)
                if will_close:
                    self.close()
                return answer
            except (Disconnected, BrokenPipeError, ConnectionResetError) as exc:
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
            except (OSError, Malformed) as exc:  # ssl.SSLError is an OSError
                self.close()
                raise TransportError(str(exc) or type(exc).__name__) from None
        raise AssertionError("unreachable")
