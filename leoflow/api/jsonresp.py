"""JSON rendering for API answers: datetimes as ISO 8601, compact separators."""

from __future__ import annotations

import json
from datetime import date, datetime
from typing import Any

from starlette.responses import JSONResponse, Response


def _default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps(content: Any) -> str:
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"), default=_default)


class JsonResponse(JSONResponse):
    """``JSONResponse`` that also renders datetimes (database rows carry many)."""

    def render(self, content: Any) -> bytes:
        return dumps(content).encode("utf-8")


class RenderedJsonResponse(Response):
    """A JSON document rendered elsewhere, with its ETag.

    (By PostgreSQL: :func:`~leoflow.db.stores.runs.lifecycle.run_document`.)

    Headers built directly, the same three in the same order as Starlette's ``init_headers``
    would (which lowercases and scans a mapping on every response): this answers the hottest
    read (issue 21).
    """

    media_type = "application/json"

    def __init__(self, document: str, etag: str) -> None:
        self.status_code = 200
        self.background = None
        self.body = document.encode("utf-8")
        self.raw_headers = [(b"etag", etag.encode("latin-1")),
                            (b"content-length", str(len(self.body)).encode("latin-1")),
                            (b"content-type", b"application/json")]
