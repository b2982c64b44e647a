"""One webhook POST, bounded in every way a receiver could stretch it, to a checked address only.

:class:`Courier` owns an HTTP connection pool (``httpcore``, the engine under ``httpx``) whose
network backend, :class:`GuardedBackend`, resolves the URL's host itself, asks the
:class:`~leoflow.model.webhook_hosts.DestinationPolicy` about *every* address it got, and then
connects to one of those checked addresses — never resolving the name again, so a DNS answer
that changes between a check and a connect (rebinding) cannot reach an internal host. TLS still
verifies the certificate and sends SNI for the URL's name (httpcore's ``start_tls`` is given the
origin's host), and ``Host`` carries the name. No proxy is used (``HTTP(S)_PROXY`` would connect
to the proxy, not the checked address) and redirects are never followed.

What a receiver cannot do: hold a request longer than :data:`REQUEST_DEADLINE` seconds in total
(connect, send, headers and body — not per read, so a byte every few seconds is cut too); make
the leader hold more than :data:`MAX_RESPONSE_BYTES` of its body (read in 64 KiB chunks, then
the connection is closed; headers are capped at 100 KiB by the HTTP parser); show its answer
anywhere (the body is discarded). Failures become :class:`DeliveryFailed` with a fixed reason —
``timed out``, ``could not connect`` (every transport error alike: which one would map which
ports are open) or ``destination not allowed`` (``permanent``: retrying cannot help).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import typing
from dataclasses import dataclass

import httpcore
import httpx

from leoflow.model.webhook_hosts import Address, DestinationPolicy, ip_literal

#: Seconds one POST may take from the first DNS query to the last byte read (a webhook answers
#: in well under a second; a receiver slower than this is treated as down).
REQUEST_DEADLINE = 10.0
#: Bytes of an answer's body read before the connection is closed (the body is never kept).
MAX_RESPONSE_BYTES = 64 * 1024
#: Addresses one name may resolve to that are checked and tried (a DNS answer is not a budget).
MAX_ADDRESSES = 16

NOT_ALLOWED = "destination not allowed"
TIMED_OUT = "timed out"
NO_CONNECTION = "could not connect"


class DeliveryFailed(Exception):
    """An attempt that failed; ``str()`` is a fixed reason, safe to store and show to anyone."""

    def __init__(self, reason: str, *, permanent: bool = False) -> None:
        super().__init__(reason)
        #: Retrying cannot help (the policy refuses the destination).
        self.permanent = permanent


class DestinationRefused(Exception):
    """The policy refused a host or one of its addresses (raised inside the connection pool)."""


@dataclass(frozen=True)
class Answer:
    status: int
    #: Body bytes read (at most :data:`MAX_RESPONSE_BYTES` plus one chunk), then discarded.
    body_bytes: int


def destination_of(url: str) -> str:
    """The ``scheme://host:port`` a URL is delivered to (what per-destination limits count)."""
    u = httpx.URL(url)
    return f"{u.scheme}://{u.host}:{u.port or (443 if u.scheme == 'https' else 80)}"


def host_of(url: str) -> str:
    """A URL's host, as the allow-list and header bindings match it ("" when unparsable)."""
    try:
        return httpx.URL(url).host
    except (httpx.InvalidURL, UnicodeError, ValueError):
        return ""


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolves, checks every address, connects to a checked one (see the module docstring)."""

    def __init__(self, policy: DestinationPolicy, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.policy = policy
        self.inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: typing.Iterable[typing.Any] | None = None) -> httpcore.AsyncNetworkStream:
        if not self.policy.may_resolve(host):
            raise DestinationRefused()
        addresses = await self.resolve(host, port)
        if not addresses or not all(self.policy.permits(host, a) for a in addresses):
            raise DestinationRefused()
        for address in addresses:
            try:
                return await self.inner.connect_tcp(str(address), port, timeout=timeout,
                                                    local_address=local_address, socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError):
                continue
        raise httpcore.ConnectError(NO_CONNECTION)

    async def resolve(self, host: str, port: int) -> list[Address]:
        """The host's addresses, in the resolver's order (an IP literal is itself)."""
        literal = ip_literal(host)
        if literal is not None:
            return [literal]
        # A name the operator did not list is resolved as absolute (a trailing dot): the pod's
        # search domains must not turn "postgres.db" into "postgres.db.svc.cluster.local".
        name = host if self.policy.patterns.matches_name(host) else host.rstrip(".") + "."
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise httpcore.ConnectError(NO_CONNECTION) from None
        found: list[Address] = []
        for *_, sockaddr in infos:
            address = ip_literal(str(sockaddr[0]).split("%", 1)[0])
            if address is not None and address not in found:
                found.append(address)
        return found[:MAX_ADDRESSES]

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: typing.Iterable[typing.Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:
        raise DestinationRefused()

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class Courier:
    """Posts webhooks through one pool (see the module docstring); ``async with`` closes it."""

    def __init__(self, policy: DestinationPolicy, *, deadline: float = REQUEST_DEADLINE,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, max_connections: int = 64) -> None:
        self.deadline = deadline
        self.max_response_bytes = max_response_bytes
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl.create_default_context(), max_connections=max_connections,
            max_keepalive_connections=0, retries=0, network_backend=GuardedBackend(policy))

    async def __aenter__(self) -> Courier:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._pool.aclose()

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> Answer:
        """POST ``body``; the status and how much of the answer was read, or DeliveryFailed."""
        try:
            u = httpx.URL(url)
            target = httpcore.URL(scheme=u.raw_scheme, host=u.raw_host, port=u.port, target=u.raw_path)
            sent = [("Host", u.netloc.decode("ascii")), ("Content-Length", str(len(body))), *headers.items()]
            if u.userinfo:  # https://user:password@host/ means basic auth, as httpx (and curl) read it
                credentials = base64.b64encode(f"{u.username}:{u.password}".encode()).decode("ascii")
                sent.append(("Authorization", f"Basic {credentials}"))
        except (httpx.InvalidURL, UnicodeError, ValueError):
            raise DeliveryFailed(NO_CONNECTION) from None
        limits = {"connect": self.deadline, "read": self.deadline, "write": self.deadline, "pool": self.deadline}
        try:
            async with asyncio.timeout(self.deadline):
                async with self._pool.stream("POST", target, headers=sent, content=body,
                                             extensions={"timeout": limits}) as response:
                    read = 0
                    async for chunk in response.aiter_stream():
                        read += len(chunk)
                        if read >= self.max_response_bytes:
                            break
                    return Answer(response.status, read)
        except DestinationRefused:
            raise DeliveryFailed(NOT_ALLOWED, permanent=True) from None
        except (TimeoutError, httpcore.TimeoutException):
            raise DeliveryFailed(TIMED_OUT) from None
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol, OSError,
                ssl.SSLError):
            raise DeliveryFailed(NO_CONNECTION) from None
