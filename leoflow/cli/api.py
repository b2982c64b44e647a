"""What every client verb shares: the API client, its errors, output (table or JSON), registration.

Client verbs import only this module, :mod:`leoflow.cli.http` and the light parts of the
package (the client's settings, errors, model names): never the server, the database, the
migrations, the server's settings groups or the logging setup, so a verb starts in a few tens
of milliseconds (``tests/cli/test_import_graph.py`` guards it). Their handlers receive
:class:`~leoflow.settings.ClientSettings` (``handler(args, client)``).

Each verb declares the API operations it calls (``operations=("GET /api/v2/dags", ...)`` in its
``set_defaults``); ``tests/cli/test_completeness.py`` walks the OpenAPI document and fails when
an operation has no verb, and runs every verb against a live server to check the declarations
are true.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

from leoflow.errors import LeoflowError

if TYPE_CHECKING:  # the transport and the standalone lookup cost milliseconds: loaded by a request
    from leoflow.cli.http import HttpAnswer
    from leoflow.settings.client import ClientSettings


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

    def __init__(self, client: ClientSettings, *, timeout: float = 30.0) -> None:
        from leoflow.cli.http import HttpClient, TransportError

        if not client.token:
            # A live local standalone serving exactly LEOFLOW_URL lends its stored admin token
            # (never sent to any other server). Imported only here: it reads files, hashes.
            from leoflow.standalone.discovery import with_local_token

            client = with_local_token(client)
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

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, *, ok: tuple[int, ...] = (200,), params: dict[str, Any] | None = None,
                json: Any = None, content: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float | None = None) -> HttpAnswer:
        from leoflow.cli.http import TransportError

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
        message, details = error_message(answer)
        status = answer.status_code
        if status == 401:
            raise ClientError(f"unauthorized: {message} (set LEOFLOW_TOKEN to a valid API token)", status=status)
        if status == 403:
            raise ClientError(f"forbidden: {message}", status=status)
        if status == 503:
            raise ApiUnavailable(f"service unavailable: {message}", status=status)
        raise ClientError(message, status=status, details=details)

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


# --------------------------------------------------------------------------- output

def table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def short(ts: str | None) -> str:
    return "-" if not ts else ts.replace("T", " ")[:19]


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def wants_json(args: argparse.Namespace) -> bool:
    return getattr(args, "output", "table") == "json"


def emitted_json(args: argparse.Namespace, value: Any) -> bool:
    """Print ``value`` as JSON when the verb was asked ``--output json``; whether it did."""
    if wants_json(args):
        print_json(value)
        return True
    return False


def usage(message: str) -> NoReturn:
    print(f"leoflow: error: {message}", file=sys.stderr)
    raise SystemExit(2)


# --------------------------------------------------------------------------- registration

def verb(verbs: Any, name: str, help: str, handler: Any, *operations: str, read: bool = False,
         **defaults: Any) -> argparse.ArgumentParser:
    """Add a client verb that calls ``operations`` (``"GET /api/v2/..."``); read verbs get ``--output``.

    ``handler(args, client)`` receives only :class:`~leoflow.settings.ClientSettings` (see
    :mod:`leoflow.cli.main`).
    """
    parser: argparse.ArgumentParser = verbs.add_parser(name, help=help, description=help)
    parser.set_defaults(handler=handler, client=True, configure_logging=False, operations=operations, **defaults)
    if read:
        parser.add_argument("-o", "--output", choices=("table", "json"), default="table",
                            help="table (default) or json: the API's answer, for scripts")
    return parser


def group(sub: Any, name: str, help: str) -> Any:
    """The sub-verbs of group ``name`` (``dags``, ``runs``, ...), created on first use."""
    existing = sub.choices.get(name)
    if existing is None:
        existing = sub.add_parser(name, help=help)
        verbs = existing.add_subparsers(dest=f"{name}_command", metavar="VERB", parser_class=type(existing))
        verbs.required = True
        return verbs
    for action in existing._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise AssertionError(f"{name} has no verbs")
