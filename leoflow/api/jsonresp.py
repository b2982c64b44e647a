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
    """A JSON document rendered elsewhere (by PostgreSQL, see :mod:`leoflow.db.api_documents`)."""

    media_type = "application/json"
