"""How one API operation becomes one request and its answer one result: shared by the sync and async clients.

The generated :mod:`leoflow.client.operations` knows *what* each operation takes and answers
(its :class:`Operation` row); this module turns a method's arguments into the request
(:func:`request_of`) and the answer into the typed result (:func:`result_of`), so that
:class:`~leoflow.client.Client` and :class:`~leoflow.client.AsyncClient` differ only in how
they send bytes. Arguments left ``None`` are left out of the query, the headers and a request
body (the API's default applies).

Failure semantics: a status the operation does not answer with becomes a
:class:`~leoflow.client.api.ClientError` (by :func:`~leoflow.client.api.refuse`, before this
module sees it); ``304 Not Modified`` (a long poll that saw no change) raises
:class:`NotModified`, so ``get_run`` is typed as returning the run, never ``None``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, NamedTuple
from urllib.parse import quote

from leoflow.client.api import ClientError
from leoflow.client.results import Model, model_class

#: Methods that change nothing when repeated (RFC 9110 §9.2.2): the ones retried on a 503.
IDEMPOTENT = ("GET", "HEAD", "PUT", "DELETE", "OPTIONS")


class Operation(NamedTuple):
    """One API operation, as :mod:`leoflow.client.codegen` read it from the OpenAPI document."""

    name: str
    method: str
    path: str
    #: ``{status: (kind, schema)}``: kind ``json`` (a model when schema is named), ``text`` or ``empty``.
    answers: dict[int, tuple[str, str | None]]
    query: tuple[str, ...]
    headers: tuple[str, ...]
    body: str | None
    body_fields: tuple[str, ...]

    @property
    def idempotent(self) -> bool:
        return self.method in IDEMPOTENT


class NotModified(ClientError):
    """The long poll ended without a change (``304``): the caller's copy is current."""


class Request(NamedTuple):
    method: str
    path: str
    params: dict[str, Any]
    headers: dict[str, str]
    json: Any
    content: bytes | None
    ok: tuple[int, ...]


def _query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def request_of(op: Operation, path: Mapping[str, Any], query: Mapping[str, Any], body: Any,
               headers: Mapping[str, Any]) -> Request:
    """The request an operation's method sends: path filled and quoted, ``None``s left out."""
    target = op.path
    for name, value in path.items():
        target = target.replace("{" + name + "}", quote(str(value), safe=""))
    sent_headers = {k: str(v) for k, v in headers.items() if v is not None}
    json_body: Any = None
    content: bytes | None = None
    if isinstance(body, str):  # a whole document as YAML text, validated by the server as a file is
        content = body.encode()
        sent_headers["Content-Type"] = "application/yaml"
    elif isinstance(body, Model):
        json_body = body.to_dict()
    elif isinstance(body, Mapping):
        json_body = {k: v for k, v in body.items() if v is not None} if op.body_fields else dict(body)
    if json_body is not None:
        content = _json_of(op, json_body)
        json_body = None
        sent_headers["Content-Type"] = "application/json"
    return Request(op.method, target, {k: _query_value(v) for k, v in query.items() if v is not None},
                   sent_headers, json_body, content, tuple(op.answers))


def _json_of(op: Operation, body: Any) -> bytes:
    """The body as JSON, or a :class:`ClientError` naming what cannot be sent (a set, a date, NaN)."""
    try:
        return json.dumps(body, allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise ClientError(f"{op.name}: the request body cannot be sent as JSON ({exc})") from None


def result_of(op: Operation, status: int, content: bytes, client: Any) -> Any:
    """The typed result of an answer the operation declares (``status`` is one of ``op.answers``)."""
    kind, schema = op.answers[status]
    if status == 304:
        raise NotModified("not modified", status=status)
    if kind == "empty":
        return None
    if kind == "bytes":
        return content
    if kind == "text":
        return content.decode("utf-8", "replace")
    try:
        data = json.loads(content)
    except ValueError:
        raise ClientError(f"{op.method} {op.path} did not answer with JSON; is LEOFLOW_URL a Leoflow API?") from None
    return model_class(schema)(data, client) if schema else data


class Calls:
    """What the generated synchronous methods call; :class:`~leoflow.client.Client` implements it."""

    def _call(self, op: Operation, path: Mapping[str, Any], query: Mapping[str, Any], body: Any,
              headers: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def _pages(self, op: Operation, path: Mapping[str, Any], query: Mapping[str, Any]) -> Iterator[Any]:
        """Every item of a paged list: one page at a time, each asked for with the last one's cursor."""
        cursor: str | None = None
        while True:
            page = self._call(op, path, {**query, "cursor": cursor}, None, {})
            yield from page.items
            cursor = page.next_cursor
            if not cursor:
                return


class AsyncCalls:
    """What the generated awaitable methods call; :class:`~leoflow.client.AsyncClient` implements it."""

    async def _acall(self, op: Operation, path: Mapping[str, Any], query: Mapping[str, Any], body: Any,
                     headers: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    async def _apages(self, op: Operation, path: Mapping[str, Any], query: Mapping[str, Any]) -> AsyncIterator[Any]:
        cursor: str | None = None
        while True:
            page = await self._acall(op, path, {**query, "cursor": cursor}, None, {})
            for item in page.items:
                yield item
            cursor = page.next_cursor
            if not cursor:
                return
