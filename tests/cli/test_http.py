"""The CLI's HTTP/1.1 client (leoflow.client.http) against a scripted TCP server.

``http://`` is spoken over a plain socket (no http.client, no ssl: see the module), so the
framing rules are tested here byte for byte: ``Content-Length``, ``chunked`` (extensions,
trailers), the end of the connection, bodiless answers, informational answers, a kept-alive
connection reused and, when the server closed it while idle, reopened once. Anything malformed
is one TransportError line, never a traceback. Live servers (uvicorn) are exercised by every
CLI test in tests/api/test_cli_client.py.
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leoflow.client.http import HttpClient, TransportError, read_answer

CLOSE = b""  #: a scripted "answer" that closes the connection instead of answering


class Scripted:
    """Accepts connections and answers each request read with the next scripted bytes."""

    def __init__(self, answers: list[bytes], *, close_after: tuple[int, ...] = ()) -> None:
        self.answers = list(answers)
        #: Answers (by index) after which the server ends the connection.
        self.close_after = close_after
        self.requests: list[bytes] = []
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn, conn.makefile("rb") as reader:
                while self.answers:
                    head = b""
                    while not head.endswith(b"\r\n\r\n"):
                        line = reader.readline()
                        if not line:
                            break
                        head += line
                    if not head:
                        break
                    length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n")
                                   if h.lower().startswith(b"content-length:")), 0)
                    self.requests.append(head + reader.read(length))
                    answer = self.answers.pop(0)
                    if answer == CLOSE:
                        break
                    conn.sendall(answer)
                    if len(self.requests) - 1 in self.close_after:
                        break

    @contextmanager
    def running(self) -> Iterator[Scripted]:
        self.thread.start()
        try:
            yield self
        finally:
            self.listener.close()
            self.thread.join(timeout=10)


def connected(server: Scripted, **options: Any) -> closing[HttpClient]:
    return closing(HttpClient(server.url, timeout=10, **options))


def ok(body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def test_requests_share_one_kept_alive_connection_and_carry_the_headers() -> None:
    with Scripted([ok(b'{"a": 1}'), ok(b"second", "X-Leoflow-Try: 2")]).running() as server, \
            closing(HttpClient(server.url + "/prefix/", headers={"Authorization": "Bearer tok-123456"})) as client:
        first = client.request("GET", "/api/v2/dags", params={"limit": 5, "cursor": None})
        second = client.request("POST", "/api/v2/dags/x/runs", json_body={"conf": {}})
    assert first.status_code == 200 and first.json() == {"a": 1}
    assert second.text == "second" and second.headers["x-leoflow-try"] == "2" and "X-LEOFLOW-TRY" in second.headers
    assert server.connections == 1
    get, post = server.requests
    assert get.startswith(b"GET /prefix/api/v2/dags?limit=5 HTTP/1.1\r\n")
    assert b"\r\nHost: 127.0.0.1:" in get and b"\r\nAccept-Encoding: identity\r\n" in get
    assert b"\r\nAuthorization: Bearer tok-123456\r\n" in get and b"Content-Length" not in get
    assert b"\r\nContent-Type: application/json\r\n" in post and post.endswith(b'\r\n\r\n{"conf": {}}')


def test_chunked_answers_with_extensions_and_trailers() -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n")
    with Scripted([chunked, ok(b"next")]).running() as server, connected(server) as client:
        assert client.request("GET", "/a").content == b"hello world"
        assert client.request("GET", "/b").content == b"next"  # the trailers were consumed
    assert server.connections == 1


def test_an_answer_without_length_ends_with_the_connection_and_the_next_request_reconnects() -> None:
    server = Scripted([b"HTTP/1.0 200 OK\r\n\r\nall of it", ok(b"again")], close_after=(0,))
    with server.running(), connected(server) as client:
        assert client.request("GET", "/a").content == b"all of it"
        assert client.request("GET", "/b").content == b"again"
    assert server.connections == 2


def test_bodiless_answers_and_informational_ones() -> None:
    not_modified = b'HTTP/1.1 304 Not Modified\r\nETag: "e1"\r\nContent-Length: 99\r\n\r\n'
    continued = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after continue")
    server = Scripted([not_modified, ok(b"", "Connection: keep-alive"), continued])
    with server.running(), connected(server) as client:
        answer = client.request("GET", "/r", headers={"If-None-Match": '"e1"'})
        assert (answer.status_code, answer.content, answer.headers.get("etag")) == (304, b"", '"e1"')
        assert client.request("HEAD", "/r").content == b""
        assert client.request("GET", "/c").content == b"after continue"
    assert server.connections == 1


def test_a_kept_alive_connection_the_server_closed_is_reopened_once() -> None:
    server = Scripted([ok(b"one"), CLOSE, ok(b"two")])
    with server.running(), connected(server) as client:
        assert client.request("GET", "/a").content == b"one"
        assert client.request("GET", "/b").content == b"two"
    assert server.connections == 2 and len(server.requests) == 3


def test_a_fresh_connection_closed_without_an_answer_is_an_error() -> None:
    with Scripted([CLOSE]).running() as server, pytest.raises(TransportError, match="connection was closed"):
        HttpClient(server.url, timeout=10).request("GET", "/a")


@pytest.mark.parametrize("answer", [
    b"SSH-2.0-OpenSSH\r\n\r\n",
    b"HTTP/1.1 2x0 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 101 + b"\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort",
    b"HTTP/1.1 200 OK\r\nContent-Le",
], ids=["not-http", "bad-status", "bad-header", "long-line", "many-headers", "bad-length", "short-body",
        "bad-chunk-size", "short-chunk", "cut-head"])
def test_malformed_answers_are_one_transport_error(answer: bytes) -> None:
    with Scripted([answer]).running() as server, pytest.raises(TransportError) as raised:
        HttpClient(server.url, timeout=10).request("GET", "/a")
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 200


@pytest.mark.parametrize("headers", [{"Authorization": "Bearer a\r\nX-Injected: 1"}, {"X-Name": "caf\u00e9\u2603"}])
def test_headers_that_http_cannot_carry_are_refused_before_sending(headers: dict[str, str]) -> None:
    with Scripted([ok(b"never")]).running() as server:
        with pytest.raises(TransportError), connected(server, headers=headers) as client:
            client.request("GET", "/a")
        server.answers.clear()
    assert server.requests == []


def test_nothing_listening_and_no_answer_in_time() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        with pytest.raises(TransportError) as raised:
            HttpClient(f"http://127.0.0.1:{port}", timeout=0.2).request("GET", "/a")
        assert raised.value.timeout
    with pytest.raises(TransportError) as refused:
        HttpClient(f"http://127.0.0.1:{port}", timeout=10).request("GET", "/a")
    assert refused.value.refused


def test_https_goes_through_tls_and_a_plain_server_is_one_error_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as plain:
        def answer_in_clear() -> None:
            conn, _ = plain.accept()
            with conn:
                conn.sendall(ok(b"plain"))

        thread = threading.Thread(target=answer_in_clear, daemon=True)
        thread.start()
        with pytest.raises(TransportError) as raised:
            HttpClient(f"https://127.0.0.1:{plain.getsockname()[1]}", timeout=10).request("GET", "/a")
        thread.join(timeout=10)
    assert "\n" not in str(raised.value) and not raised.value.refused


@pytest.mark.parametrize("url", ["ftp://h/", "http://", "http://h:99999/"])
def test_urls_that_are_not_http(url: str) -> None:
    with pytest.raises(TransportError):
        HttpClient(url)


class _Bytes:
    """A reader over fixed bytes, as socket.makefile("rb") reads."""

    def __init__(self, data: bytes) -> None:
        import io

        self._io = io.BufferedReader(io.BytesIO(data))

    def readline(self, limit: int) -> bytes:
        return self._io.readline(limit)

    def read(self, size: int = -1) -> bytes:
        return self._io.read(size)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=3000), cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=8))
def test_any_body_reads_back_whole_framed_by_length_or_chunks(body: bytes, cuts: list[int]) -> None:
    edges = sorted({0, len(body), *(c for c in cuts if c < len(body))})
    chunks = [body[a:b] for a, b in itertools.pairwise(edges)]
    chunked = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks if c) + b"0\r\n\r\n"
    framed = {"length": ok(body), "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked}
    for raw in framed.values():
        answer, will_close = read_answer(_Bytes(raw + b"HTTP/1.1 200 OK\r\n"), "GET")
        assert answer.content == body and not will_close
