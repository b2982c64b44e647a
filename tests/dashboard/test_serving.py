"""How the dashboard is served (no browser): the page, its assets, headers, the session probe."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator

import httpx
import pytest

from leoflow.api.dashboard import STATIC_DIR
from tests.dashboard.conftest import ADMIN_TOKEN, READ_TOKEN, api_settings, serve_api
from tests.harness.postgres import PostgresServer

IMPORT = re.compile(r"""(?:from|import)\s+["'](\.{1,2}/[^"']+)["']""")
#: The page loader's import of the app (an absolute path: the loader is an inline classic script).
DYNAMIC_IMPORT = re.compile(r"""import\(\s*["'](/static/[^"']+)["']\s*\)""")


def _client(pg_server: PostgresServer, **extra: str) -> Iterator[httpx.Client]:
    database_url = pg_server.create_database()
    try:
        with serve_api(api_settings(database_url, **extra)) as url, \
                httpx.Client(base_url=url, timeout=30) as client:
            yield client
    finally:
        pg_server.drop_database(database_url)


@pytest.fixture(scope="module")
def client(pg_server: PostgresServer) -> Iterator[httpx.Client]:
    """One server for the module: these tests only read."""
    yield from _client(pg_server)


def test_index_is_the_page_with_a_strict_content_security_policy(client: httpx.Client) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    # The one inline script, the page's loader, is allowed by its hash and nothing else is.
    scripts = re.findall(r"<script>(.*?)</script>", response.text, flags=re.DOTALL)
    assert len(scripts) == 1 and 'import("/static/js/app.js")' in scripts[0]
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    script_src = next(d for d in csp.split("; ") if d.startswith("script-src "))
    assert script_src == f"script-src 'self' 'sha256-{digest}'"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cache-control"] == "no-cache"


def test_every_module_the_page_imports_is_served(client: httpx.Client) -> None:
    """Walk index.html and the ES module graph: a missing or misnamed file fails here."""
    index = client.get("/").text
    pending = [m for m in re.findall(r'(?:src|href)="(/static/[^"]+)"', index)] + DYNAMIC_IMPORT.findall(index)
    assert "/static/js/app.js" in pending and "/static/css/app.css" in pending
    seen: set[str] = set()
    while pending:
        url = pending.pop()
        if url in seen:
            continue
        seen.add(url)
        response = client.get(url)
        assert response.status_code == 200, url
        assert "content-security-policy" in response.headers, url
        if url.endswith(".js"):
            assert response.headers["content-type"].startswith(("text/javascript", "application/javascript")), url
            base = url.rsplit("/", 1)[0]
            for relative in IMPORT.findall(response.text):
                parts = (base + "/" + relative).split("/")
                resolved: list[str] = []
                for part in parts:
                    if part == "..":
                        resolved.pop()
                    elif part != ".":
                        resolved.append(part)
                pending.append("/".join(resolved))
    on_disk = {"/static/" + p.relative_to(STATIC_DIR).as_posix() for p in STATIC_DIR.rglob("*.js")}
    assert on_disk <= seen, f"modules nothing imports: {sorted(on_disk - seen)}"


def test_assets_revalidate_with_etags(client: httpx.Client) -> None:
    first = client.get("/static/css/app.css")
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/css")
    again = client.get("/static/css/app.css", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304


@pytest.mark.parametrize("path", ["/static/../dashboard.py", "/static/%2e%2e/dashboard.py", "/static/nope.js"])
def test_nothing_outside_the_static_directory_is_served(client: httpx.Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert "dashboard_routes" not in response.text


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, {"authenticated": False, "auth": "enabled", "scope": None, "name": None, "sso": False}),
    ({"Authorization": "Bearer not-a-token-at-all"}, {"authenticated": False, "auth": "enabled", "scope": None,
                                                      "name": None, "sso": False}),
    ({"Authorization": f"Bearer {READ_TOKEN}"}, {"authenticated": True, "auth": "enabled", "scope": "read",
                                                 "name": "dash-reader", "sso": False, "role": "viewer",
                                                 "admin": False}),
    ({"Authorization": f"Bearer {ADMIN_TOKEN}"}, {"authenticated": True, "auth": "enabled", "scope": "admin",
                                                  "name": "dash-admin", "sso": False, "role": "admin", "admin": True}),
], ids=["no-token", "wrong-token", "read", "admin"])
def test_session_reports_the_scope_of_the_presented_token(client: httpx.Client, headers: dict[str, str],
                                                          expected: dict[str, object]) -> None:
    response = client.get("/dashboard/session", headers=headers)
    assert response.status_code == 200
    assert response.json() == expected
    assert response.headers["cache-control"] == "no-store"
    assert ADMIN_TOKEN not in response.text and READ_TOKEN not in response.text


def test_session_with_auth_disabled_is_admin(pg_server: PostgresServer) -> None:
    for client in _client(pg_server, LEOFLOW_AUTH="disabled", LEOFLOW_API_TOKENS=""):
        assert client.get("/dashboard/session").json() == {
            "authenticated": True, "auth": "disabled", "scope": "admin", "name": None, "sso": False, "role": "admin",
            "admin": True}


def test_api_routes_still_require_a_token(client: httpx.Client) -> None:
    """Serving the page publicly must not open the API."""
    assert client.get("/api/v2/dags").status_code == 401
