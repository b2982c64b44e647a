"""The client of the Leoflow HTTP API that every client verb talks through, and its errors.

:class:`Api` speaks to ``/api/v2`` on whichever replica ``LEOFLOW_URL`` names, over the small
HTTP/1.1 transport of :mod:`leoflow.client.http`, and turns every failure into a
:class:`ClientError` with a one-line message: the server's own message (it names the offending
field), or an explanation of the transport problem (connection refused, timeout, 401 → set
LEOFLOW_TOKEN). :class:`ApiUnavailable` marks the retryable ones (followers ride them out).

It imports only :mod:`leoflow.errors` of the package (an import-linter contract says so): the
caller hands it an :class:`Endpoint` (the CLI's :class:`~leoflow.settings.ClientSettings` is one,
with the token of a local standalone already filled in). A client verb loads neither the server
nor the database, the migrations, the server's settings groups or the logging setup, so it
starts in a few tens of milliseconds (``tests/cli/test_import_graph.py`` guards it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Self
from urllib.parse import quote

from leoflow.errors import LeoflowError

if TYPE_CHECKING:  # the transport costs milliseconds: loaded by a request
    from leoflow.client.http import HttpAnswer


class Endpoint(Protocol):
    """Where the API is and how to sign in: ``LEOFLOW_URL`` and ``LEOFLOW_TOKEN`` for the CLI."""

    @property
    def url(self) -> str: ...

    @property
    def token(self) -> str | None: ...


class ClientError(LeoflowError):
    """The API refused the request or could not be reached."""

    def __init__(self, message: str | None = None, *, status: int | None = None, details: Any = None) -> None:
        super().__init__(message)
        #: The HTTP status and the error envelope's ``details`` when the API answered.
        self.status = status
        self.details = details


class ApiUnavailable(ClientError):
    """The API could not be reached or answered 503 (retryable)."""


class Api:
    """A small synchronous client of the Leoflow HTTP API."""

    def __init__(self, client: Endpoint, *, timeout: float = 30.0) -> None:
        from leoflow.client.http import HttpClient, TransportError

        self.base = client.url.rstrip("/")
        headers = {"User-Agent": "leoflow-cli", "Accept": "application/json"}
        if client.token:
            headers["Authorization"] = f"Bearer {client.token}"
        try:
            self._http = HttpClient(self.base, headers=headers, timeout=timeout)
        except TransportError as exc:
            raise ClientError(f"LEOFLOW_URL: {exc}") from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, *, ok: tuple[int, ...] = (200,), params: dict[str, Any] | None = None,
                json: Any = None, content: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float | None = None) -> HttpAnswer:
        from leoflow.client.http import TransportError

        try:
            answer = self._http.request(method, path, params=params, json_body=json, content=content,
                                        headers=headers, timeout=timeout)
        except TransportError as exc:
            if exc.refused:
                raise ApiUnavailable(f"cannot reach the Leoflow API at {self.base} (connection refused); "
                                     "check LEOFLOW_URL") from None
            if exc.timeout:
                raise ApiUnavailable(f"the Leoflow API at {self.base} did not answer in time") from None
            raise ApiUnavailable(f"request to {self.base} failed: {exc}") from None
        if answer.status_code in ok:
            return answer
        raise refused(answer)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        answer = self.request(method, path, **kwargs)
        try:
            return answer.json()
        except ValueError:
            raise ClientError(f"{self.base}{path} did not answer with JSON; is LEOFLOW_URL a Leoflow API?") from None

    def pages(self, path: str, params: dict[str, Any] | None = None, *, limit: int | None = None) -> list[Any]:
        """Items of a paginated list, following cursors (up to ``limit`` items)."""
        items: list[Any] = []
        query = dict(params or {})
        while True:
            query["limit"] = min(500, limit - len(items)) if limit else 500
            body = self.json("GET", path, params=query)
            items += body["items"]
            if not body.get("next_cursor") or (limit and len(items) >= limit):
                return items
            query["cursor"] = body["next_cursor"]


def refused(answer: HttpAnswer) -> ClientError:
    """The error for an answer with a status the caller did not expect (the typed and async clients' too)."""
    message, details = error_message(answer)
    status = answer.status_code
    if status == 401:
        return ClientError(f"unauthorized: {message} (set LEOFLOW_TOKEN to a valid API token, or run "
                           "`leoflow login` if the server has single sign-on)", status=status)
    if status == 403:
        return ClientError(f"forbidden: {message}", status=status)
    if status == 503:
        return ApiUnavailable(f"service unavailable: {message}", status=status)
    return ClientError(message, status=status, details=details)


def error_message(answer: HttpAnswer) -> tuple[str, Any]:
    """The error envelope's message and details (None when the answer is not one)."""
    try:
        error = answer.json()["error"]
        return str(error["message"]), error.get("details")
    except (ValueError, KeyError, TypeError, AttributeError):
        text = answer.text.strip().splitlines()
        return f"HTTP {answer.status_code}" + (f": {text[0][:200]}" if text else ""), None


def q(segment: str | int) -> str:
    """A path segment, quoted."""
    return quote(str(segment), safe="")


def dag_path(dag_id: str) -> str:
    return f"/api/v2/dags/{q(dag_id)}"


def run_path(dag_id: str, run_id: str) -> str:
    return f"{dag_path(dag_id)}/runs/{q(run_id)}"
