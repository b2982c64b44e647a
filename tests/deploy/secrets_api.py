"""Just enough of a Kubernetes API server for Helm's ``lookup`` of Secrets.

The chart keeps generated values (the bundled PostgreSQL's password, the admin token) by
reading them back with ``lookup`` on every ``helm upgrade``. Offline rendering cannot exercise
that branch, so the tests render cluster-aware (``helm_python.Config.render``, the code path of
``helm install/upgrade``) against this server: it answers the discovery request Helm's dynamic
client makes (``/api/v1``) and GETs of Secrets, 404 with a Kubernetes Status for anything else.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RESOURCES = {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
    {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret", "verbs": ["get", "list"]}]}
_DISCOVERY: dict[str, Any] = {
    "/version": {"major": "1", "minor": "30", "gitVersion": "v1.30.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": _RESOURCES,
}


class SecretsApi:
    """Secrets by (namespace, name) -> {key: bytes}; ``requests`` lists every path asked for."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, bytes]] = {}
        self.requests: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                api.requests.append(path)
                if path in _DISCOVERY:
                    return self._json(200, _DISCOVERY[path])
                parts = path.strip("/").split("/")
                if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "secrets":
                    data = api.secrets.get((parts[3], parts[5]))
                    if data is not None:
                        return self._json(200, {
                            "kind": "Secret", "apiVersion": "v1",
                            "metadata": {"name": parts[5], "namespace": parts[3]},
                            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})
                self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404, "message": f"{path} not found"})

            def _json(self, code: int, obj: Any) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def store(self, secret: dict[str, Any]) -> None:
        """Keep a rendered Secret manifest as if ``kubectl apply`` had created it."""
        meta = secret["metadata"]
        self.secrets[(meta["namespace"], meta["name"])] = {
            k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    @contextmanager
    def running(self) -> Iterator[SecretsApi]:
        thread = threading.Thread(target=self._server.serve_forever, name="secrets-api", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join()
