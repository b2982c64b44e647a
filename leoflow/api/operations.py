"""One declaration per API operation: its method, path, who may call it, and its OpenAPI text.

A route module declares each handler once, next to it::

    @OPERATIONS("GET", "/api/v2/pools/{pool}", "Get pool", json_answer("200", "Pool"), errors="404",
                params=[POOL])
    async def get_pool(request: Request) -> Response: ...

The app's routing table (:func:`leoflow.api.app.api_routes`) and the OpenAPI document
(:mod:`leoflow.api.openapi.document`) are both read from these declarations, so a route cannot
be served undocumented, documented unserved, or documented with another auth rule.

``auth`` is ``open`` (probes, the document), ``read``, ``admin`` (writes), or ``metrics``:
``/metrics``, open unless ``LEOFLOW_METRICS_AUTH=true``, then ``read``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from leoflow.api.auth import Scope
from leoflow.api.endpoint import Handler
from leoflow.api.openapi.components import op

Auth = Literal["open", "read", "admin", "metrics"]


@dataclass(frozen=True)
class Operation:
    """One route: served by ``handler`` for ``method path``, described by ``document``."""

    method: str
    path: str
    handler: Handler
    auth: Auth
    #: The OpenAPI operation object (summary, operationId, parameters, body, answers).
    document: dict[str, Any] = field(compare=False)

    def scope(self, *, metrics_auth: bool) -> Scope:
        """The token scope the route needs under these settings."""
        if self.auth == "metrics":
            return "read" if metrics_auth else "open"
        return self.auth


class Operations:
    """A resource's operations, in the order they were declared."""

    def __init__(self) -> None:
        self._declared: list[Operation] = []

    def __call__(self, method: str, path: str, summary: str, ok: dict[str, Any], *, auth: Auth = "read",
                 errors: str = "", params: list[dict[str, Any]] | None = None, body: str | None = None,
                 body_required: bool = True, extend: Callable[[dict[str, Any]], None] | None = None,
                 ) -> Callable[[Handler], Handler]:
        """Declares the decorated handler as ``method path``; ``extend`` adds to its OpenAPI text
        what :func:`~leoflow.api.openapi.components.op` does not write (headers, a 304)."""
        document = op(summary, ok, errors=errors, params=params, body=body, body_required=body_required, auth=auth)
        if extend is not None:
            extend(document)

        def declare(handler: Handler) -> Handler:
            self._declared.append(Operation(method, path, handler, auth, document))
            return handler

        return declare

    def __iter__(self) -> Iterator[Operation]:
        return iter(self._declared)
