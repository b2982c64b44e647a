"""A small HTTP/1.1 load generator for tests: N keep-alive connections hammering one URL.

Run it as its own process (``python -m tests.harness.load URL ...``) so the load does not share
the test process's interpreter lock; it prints one JSON line with the request count, the
count per status and the transport errors. Raw sockets and a minimal response parser keep it
cheap enough to saturate a replica on a 2-core machine (``wrk`` is what ``bench/api.py``
uses; this needs nothing outside the repository).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from urllib.parse import urlsplit


async def _connection(host: str, port: int, request: bytes, deadline: float, statuses: Counter[int],
                      errors: Counter[str]) -> None:
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            errors[type(exc).__name__] += 1
            await asyncio.sleep(0.05)
            continue
        try:
            while time.monotonic() < deadline:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                statuses[status] += 1
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            errors[type(exc).__name__] += 1
        finally:
            writer.close()


async def hammer(url: str, *, connections: int, duration: float, token: str | None) -> dict[str, object]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: application/json"]
    if token:
        headers.append(f"Authorization: Bearer {token}")
    request = ("\r\n".join(headers) + "\r\n\r\n").encode()
    statuses: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    started = time.monotonic()
    deadline = started + duration
    await asyncio.gather(*(_connection(host, port, request, deadline, statuses, errors)
                           for _ in range(connections)))
    elapsed = time.monotonic() - started
    total = sum(statuses.values())
    return {"requests": total, "req_per_s": round(total / elapsed, 1), "seconds": round(elapsed, 1),
            "statuses": {str(k): v for k, v in sorted(statuses.items())}, "errors": dict(errors)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--token")
    args = parser.parse_args()
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        result = runner.run(hammer(args.url, connections=args.connections, duration=args.duration,
                                   token=args.token))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
