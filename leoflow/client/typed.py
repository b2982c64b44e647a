"""The typed clients of the Leoflow API: :class:`Client` (synchronous) and :class:`AsyncClient`.

One method per API operation (generated from the OpenAPI document, :mod:`.operations`), each
answering a typed result (:mod:`.models`); ``iter_…`` methods follow a paged list's
``next_cursor``; :meth:`Client.wait_for_run` (and ``run.wait()``) follows a run on the API's
long poll. Configured as the CLI is: ``LEOFLOW_URL`` (default ``http://127.0.0.1:8080``),
``LEOFLOW_TOKEN``, else the sign-in ``leoflow login`` stored for that URL.

Retries: an idempotent call (GET, PUT, DELETE) that meets ``503`` or an unreachable API is
tried again up to ``retries`` times, pausing ``backoff`` seconds, doubled each time and capped
at :data:`MAX_BACKOFF`, with up to a quarter of jitter (so a fleet of scripts does not come
back in step after a failover). A POST or PATCH is never repeated by the client: the first
might have been applied. A refused connection is not retried on the first request (nothing
listens there: a wrong URL, said at once).

:class:`Client` speaks HTTP/1.1 through :mod:`.http` (the CLI's transport: no httpx import,
which costs more than a CLI verb's whole start-up); :class:`AsyncClient` uses
``httpx.AsyncClient``, imported when one is made.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Self

from leoflow.client.api import Api, ApiUnavailable, ClientError, refused
from leoflow.client.calls import Operation, request_of, result_of
from leoflow.client.operations import OPERATIONS, AsyncOperations, Operations
from leoflow.client.waiting import RunFollower, progress_for

if TYPE_CHECKING:
    from leoflow.client.models import RunDetail

#: ``LEOFLOW_URL`` when unset (the settings' declared default; a test keeps them equal).
DEFAULT_URL = "http://127.0.0.1:8080"
#: Longest pause between two tries of one call.
MAX_BACKOFF = 8.0
#: The operation a wait long-polls.
_GET_RUN = OPERATIONS["get_run"]


class Endpoint(NamedTuple):
    """Where the API is and the bearer token to send (``None``: none)."""

    url: str
    token: str | None = None


def endpoint_from_environment(url: str | None = None, token: str | None = None,
                              env: Mapping[str, str] | None = None) -> Endpoint:
    """``url``/``token`` as given, else ``LEOFLOW_URL``/``LEOFLOW_TOKEN``, else the stored ``leoflow login``."""
    env = os.environ if env is None else env
    url = (url or env.get("LEOFLOW_URL") or DEFAULT_URL).strip()
    token = token or env.get("LEOFLOW_TOKEN") or None
    if token is None:
        from leoflow.client.credentials import stored_bearer

        token = stored_bearer(url)
    return Endpoint(url, token)


def _pause(backoff: float, attempt: int) -> float:
    import random  # only when a call is retried

    base = min(MAX_BACKOFF, backoff * 2.0 ** attempt)
    return base * (1 + random.uniform(-0.25, 0.25))


class Client(Api, Operations):
    """A synchronous client of the Leoflow API: ``Client()`` reads the environment as the CLI does.

    Use it as a context manager (or call :meth:`close`) to close its kept-alive connection::

        with Client() as leoflow:
            run = leoflow.trigger_run("etl", conf={"day": "2026-01-01"})
            run.wait(timeout=600)
    """

    is_async = False

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, backoff: float = 0.5, endpoint: Any = None) -> None:
        """``endpoint``: anything with ``url`` and ``token`` (the CLI passes its settings); else
        ``url``/``token``, else the environment (see the module docstring)."""
        super().__init__(endpoint or endpoint_from_environment(url, token), timeout=timeout)
        self.retries = retries
        self.backoff = backoff
        self._reached = False

    def _call(self, op: Operation, path: Mapping[str, Any], query: Mapping[str, Any], body: Any,
              headers: Mapping[str, Any]) -> Any:
        sent = request_of(op, path, query, body, headers)
        attempt = 0
        while True:
            try:
                answer = self.request(sent.method, sent.path, ok=sent.ok, params=sent.params, json=sent.json,
                                      content=sent.content, headers=sent.headers)
                self._reached = True
                return result_of(op, answer.status_code, answer.content, self)
            except ApiUnavailable as exc:
                if not self._may_retry(op, exc, attempt):
                    raise
            time.sleep(_pause(self.backoff, attempt))
            attempt += 1

    def _may_retry(self, op: Operation, exc: ApiUnavailable, attempt: int) -> bool:
        if not op.idempotent or attempt >= self.retries:
            return False
        return self._reached or "refused" not in str(exc)

    def wait_for_run(self, dag_id: str, run_id: str, *, timeout: float | None = None,
                     progress: bool | None = None) -> RunDetail:
        """Follow a run until it ends and return it as it ended (see :mod:`.waiting`).

        ``timeout``: seconds, ``None`` for no limit (raises
        :class:`~leoflow.client.waiting.RunWaitTimeout`). ``progress``: a bar of tasks done / total
        on stderr; by default only when stderr is a terminal or in Jupyter.
        """
        bar = progress_for(progress)
        follower = RunFollower(dag_id, run_id, timeout=timeout, on_change=bar)
        try:
            return self.follow(follower)
        finally:
            if bar is not None:
                bar.close()

    def follow(self, follower: RunFollower) -> RunDetail:
        """Run ``follower``'s loop to the run's end (the CLI's ``runs wait`` passes its own)."""
        op = _GET_RUN
        path = op.path.replace("{dag_id}", _q(follower.dag_id)).replace("{run_id}", _q(follower.run_id))
        while not follower.done:
            query, headers, request_timeout = follower.next_request()
            try:
                answer = self.request("GET", path, ok=(200, 304), params=query, headers=headers,
                                      timeout=request_timeout)
            except ApiUnavailable as exc:
                time.sleep(follower.unavailable(exc))
                continue
            run = answer.json() if answer.status_code == 200 else None
            pause = follower.answered(answer.status_code, answer.headers.get("etag"), run)
            if pause:
                time.sleep(pause)
        return result_of(op, 200, _json_bytes(follower.run), self)  # type: ignore[no-any-return]


class AsyncClient(AsyncOperations):
    """The same operations, awaitable, over ``httpx.AsyncClient`` (one connection pool per client).

    ::

        async with AsyncClient() as leoflow:
            async for run in leoflow.iter_runs("etl", state="failed"):
                print(run.run_id, run.reason)
    """

    is_async = True

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, backoff: float = 0.5, endpoint: Any = None) -> None:
        import httpx  # here, not at import: it costs a CLI verb more than its whole start-up

        where = endpoint or endpoint_from_environment(url, token)
        self.base = where.url.rstrip("/")
        headers = {"User-Agent": "leoflow-python", "Accept": "application/json"}
        if where.token:
            headers["Authorization"] = f"Bearer {where.token}"
        if not self.base.startswith(("http://", "https://")):
            raise ClientError(f"LEOFLOW_URL: {self.base!r} is not an http(s) URL")
        self._httpx = httpx
        self._http = httpx.AsyncClient(base_url=self.base, headers=headers, timeout=timeout)
        self.retries = retries
        self.backoff = backoff
        self._reached = False

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, method: str, path: str, *, ok: tuple[int, ...], params: dict[str, Any] | None = None,
                    json: Any = None, content: bytes | None = None, headers: dict[str, str] | None = None,
                    timeout: float | None = None) -> Any:
        """One request; an answer outside ``ok`` or a transport problem raises as :class:`Client` does."""
        from leoflow.client.http import Headers, HttpAnswer

        httpx = self._httpx
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        try:
            response = await self._http.request(method, path, params=params, json=json, content=content,
                                                headers=headers, **extra)
        except httpx.ConnectError as exc:
            raise ApiUnavailable(f"cannot reach the Leoflow API at {self.base} (connection refused); "
                                 f"check LEOFLOW_URL ({exc})") from None
        except httpx.TimeoutException:
            raise ApiUnavailable(f"the Leoflow API at {self.base} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise ApiUnavailable(f"request to {self.base} failed: {exc}") from None
        answer = HttpAnswer(response.status_code, Headers(list(response.headers.items())), response.content)
        if answer.status_code not in ok:
            raise refused(answer)
        return answer

    async def _acall(self, op: Operation, path: Mapping[str, Any], query: Mapping[str, Any], body: Any,
                     headers: Mapping[str, Any]) -> Any:
        sent = request_of(op, path, query, body, headers)
        attempt = 0
        while True:
            try:
                answer = await self._send(sent.method, sent.path, ok=sent.ok, params=sent.params, json=sent.json,
                                          content=sent.content, headers=sent.headers)
                self._reached = True
                return result_of(op, answer.status_code, answer.content, self)
            except ApiUnavailable as exc:
                if not op.idempotent or attempt >= self.retries or (not self._reached and "refused" in str(exc)):
                    raise
            await _asleep(_pause(self.backoff, attempt))
            attempt += 1

    async def wait_for_run(self, dag_id: str, run_id: str, *, timeout: float | None = None,
                           progress: bool | None = None) -> RunDetail:
        """Follow a run until it ends (as :meth:`Client.wait_for_run`, awaitable)."""
        bar = progress_for(progress)
        follower = RunFollower(dag_id, run_id, timeout=timeout, on_change=bar)
        path = _GET_RUN.path.replace("{dag_id}", _q(dag_id)).replace("{run_id}", _q(run_id))
        try:
            while not follower.done:
                query, headers, request_timeout = follower.next_request()
                try:
                    answer = await self._send("GET", path, ok=(200, 304), params=query, headers=headers,
                                              timeout=request_timeout)
                except ApiUnavailable as exc:
                    await _asleep(follower.unavailable(exc))
                    continue
                run = answer.json() if answer.status_code == 200 else None
                pause = follower.answered(answer.status_code, answer.headers.get("etag"), run)
                if pause:
                    await _asleep(pause)
        finally:
            if bar is not None:
                bar.close()
        return result_of(_GET_RUN, 200, _json_bytes(follower.run), self)  # type: ignore[no-any-return]


async def _asleep(seconds: float) -> None:
    import asyncio  # loaded by whoever runs the event loop already; not at the client's import

    await asyncio.sleep(seconds)


def _q(segment: str) -> str:
    from urllib.parse import quote

    return quote(str(segment), safe="")


def _json_bytes(value: Any) -> bytes:
    import json

    return json.dumps(value).encode()
