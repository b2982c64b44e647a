"""``leoflow api health|ready|metrics|openapi``: the API server itself — its probes, metrics, OpenAPI document.

(The module is named for what the ``api`` command asks about, the server: the client every verb
talks through is :mod:`leoflow.client.api`.)
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import emitted, print_json
from leoflow.cli.verbs import noun, verb
from leoflow.client.api import Api

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings


def register(sub: Any) -> None:
    api = noun(sub, "api", "the API server itself: probes, metrics, its OpenAPI document")
    verb(api, "health", "liveness of the replica at LEOFLOW_URL (exit 1 if it does not answer)", api_get,
         "GET /healthz", path="/healthz")
    verb(api, "ready", "readiness: database reachable and schema current (exit 1 if not)", api_get,
         "GET /readyz", path="/readyz")
    # Prometheus text is its own format: no table, JSON or YAML of it.
    verb(api, "metrics", "the replica's Prometheus metrics (text)", api_text, "GET /metrics", output=False,
         path="/metrics")
    verb(api, "openapi", "the OpenAPI document of this API (JSON; --output yaml: YAML)", api_openapi,
         "GET /api/v2/openapi.json")


def api_get(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        answer = api.request("GET", args.path, ok=(200, 503))
    body = answer.json()
    if not emitted(args, body):
        status = body.get("status") or body.get("error", {}).get("message", "")
        print(f"{args.path.strip('/')}: {status}")
    return 0 if answer.status_code == 200 else 1


def api_text(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        sys.stdout.write(api.request("GET", args.path).text)
    return 0


def api_openapi(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        document = api.json("GET", "/api/v2/openapi.json")
    if not emitted(args, document):
        print_json(document)  # the document is JSON: its "table" form too
    return 0
