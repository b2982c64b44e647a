"""The OpenAPI document matches the routes exactly, and /metrics passes ``promtool check metrics``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from leoflow.api.app import api_routes, create_app
from leoflow.api.openapi.document import openapi_document
from tests.api.conftest import ADMIN, READ, api_settings, spec

#: Where .ci/run (and developers) unpack Debian's prometheus package: `apt-get download
#: prometheus && dpkg-deb -x prometheus_*.deb /opt/prometheus-deb`.
PROMTOOL_CANDIDATES = (Path("/opt/prometheus-deb/usr/bin/promtool"), Path("/usr/bin/promtool"))


def find_promtool() -> str | None:
    found = shutil.which("promtool")
    if found:
        return found
    return next((str(p) for p in PROMTOOL_CANDIDATES if p.is_file()), None)


def test_every_route_is_documented_and_vice_versa(api_client: httpx.Client) -> None:
    served = {(r.method.lower(), r.path) for r in api_routes(api_settings("postgresql://h/db"))}
    document = api_client.get("/api/v2/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    documented = {(method, path) for path, ops in document["paths"].items() for method in ops}
    assert served == documented
    # Every path parameter of a template is declared, and only those.
    for path, ops in document["paths"].items():
        names = {part[1:-1] for part in path.split("/") if part.startswith("{")}
        for method, op in ops.items():
            declared = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert declared == names, (method, path)
    assert document == openapi_document()


def test_documented_routes_answer_with_documented_status_codes(api_client: httpx.Client) -> None:
    api_client.post("/api/v2/dags", json=spec(), headers=ADMIN)
    document = api_client.get("/api/v2/openapi.json").json()
    for path, ops in document["paths"].items():
        if "get" not in ops or "{" in path:
            continue
        answer = api_client.get(path, headers=READ)
        assert str(answer.status_code) in ops["get"]["responses"], (path, answer.status_code)


def _scrape(database_url: str) -> str:
    from tests.api.live import client_for

    with client_for(create_app(api_settings(database_url))) as client:
        client.post("/api/v2/dags", json=spec(), headers=ADMIN)
        client.get("/api/v2/dags/etl", headers=READ)
        client.get("/api/v2/dags", headers={})
        text = client.get("/metrics").text
    return text


def test_metrics_pass_promtool(database_url: str) -> None:
    promtool = find_promtool()
    if promtool is None:
        pytest.skip("promtool not found (apt-get download prometheus && dpkg-deb -x prometheus_*.deb "
                    "/opt/prometheus-deb)")
    text = _scrape(database_url)
    assert "leoflow_http_requests_total" in text
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # promtool must be able to fail: a counter without the _total suffix is a lint error.
    broken = subprocess.run([promtool, "check", "metrics"], input="# HELP x_bad a\n# TYPE x_bad counter\nx_bad 1\n",
                            capture_output=True, text=True, timeout=60)
    assert broken.returncode != 0
