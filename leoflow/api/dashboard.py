"""The web dashboard: a single page served at ``/`` with its assets under ``/static/``.

Every replica serves the same files from the installed package (``leoflow/api/static``), so a
load balancer may send the browser to any replica; the page itself holds no server state and
talks only to the public JSON API under ``/api/v2`` with the bearer token the operator typed
in (kept in the browser's ``sessionStorage``). Navigation is hash-based (``/#/dags/etl``), so
the server needs no catch-all route and can never shadow an API path.

The page and its assets are public on purpose: they contain no data, and the browser cannot
send the bearer token with a plain navigation. Every data request is authorised by the API.

``GET /dashboard/session`` tells the page what the token it holds may do without provoking a
401/403: it always answers 200 with ``{"authenticated", "auth", "scope", "name", "role",
"admin"}`` — ``role`` is the highest role the caller holds anywhere (``viewer`` … ``admin``),
``admin`` whether it may change the cluster (pools, tokens). With ``?dag_id=…`` (repeated, at
most :data:`MAX_DAG_IDS`) it adds ``dags``: for each of those DAGs the caller may read, its role
there and whether it may ``operate`` (trigger, clear, cancel, mark, pause) and ``edit`` it; a DAG
the caller may not read is left out exactly like one that does not exist. The page shows a write
button only where that answer allows it: a team's operator sees trigger and clear on the team's
DAGs and none on others', a viewer sees none. The API decides every write anyway. It uses the app's own
:class:`~leoflow.api.auth.Authenticator` (constant-time comparison, token never logged or
echoed), so it says nothing a 401 from any API route would not.

Failure semantics: if the static directory is missing from an installation (a broken wheel),
``/`` answers 503 with a one-line JSON error instead of raising at import or startup time —
the JSON API keeps working without the dashboard.

Responses carry a strict Content-Security-Policy (scripts, styles and connections from this
origin only, no framing, and no inline script but the page's own loader, allowed by its
SHA-256 computed from ``index.html`` at import): the dashboard renders names and log lines that
come from DAG authors, and the page builds every element with ``textContent``, never HTML
strings, so the policy is a second line of defence rather than the only one. The loader is
inline because it must run even when a request fails: it imports the app's modules and reloads
the page if one of them did not load (a page whose module graph failed is otherwise dead).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from leoflow.api.access import AccessControl, grant_for
from leoflow.api.auth import ANONYMOUS_ADMIN, Principal
from leoflow.model.access.roles import ROLES
from leoflow.model.access.teams import NO_TEAMS
from leoflow.model.limits import DAG_ID

logger = logging.getLogger(__name__)

#: Where the HTML/CSS/JS ship inside the package (declared as package data in pyproject).
STATIC_DIR = Path(__file__).resolve().parent / "static"

#: URL prefix of the assets; index.html refers to them with absolute paths.
STATIC_PREFIX = "/static"


def inline_script_sources(page: Path) -> tuple[str, ...]:
    """CSP sources that allow exactly the inline scripts of ``page``: their SHA-256, base64.

    Computed from the file the server sends, so the policy and the page cannot drift apart; a
    page that cannot be read has none (``/`` then answers 503 anyway).
    """
    try:
        html = page.read_text(encoding="utf-8")
    except OSError:
        return ()
    return tuple(f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
                 for body in re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL))


CONTENT_SECURITY_POLICY = "; ".join((
    "default-src 'self'",
    " ".join(("script-src 'self'", *inline_script_sources(STATIC_DIR / "index.html"))),
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
))

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}

# Revalidate on every load (cheap: ETag/Last-Modified answer 304) so that after an upgrade a
# browser never mixes old and new modules.
_CACHE_CONTROL = "no-cache"


class DashboardStaticFiles(StaticFiles):
    """StaticFiles that adds the security and cache headers to every asset."""

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        _add_headers(response.headers)
        return response


def _add_headers(headers: MutableHeaders) -> None:
    for name, value in SECURITY_HEADERS.items():
        headers[name] = value
    headers["Cache-Control"] = _CACHE_CONTROL


#: DAG ids one ``/dashboard/session`` request may ask about (a page of the DAG list is 50).
MAX_DAG_IDS = 100


async def _roles(request: Request, principal: Principal) -> dict[str, Any]:
    """The caller's highest role, admin flag and (for ``?dag_id=``) role per readable DAG."""
    access: AccessControl | None = getattr(request.app.state.api, "access", None)
    teams = access.teams() if access is not None else NO_TEAMS
    grant = grant_for(principal, teams)
    held = [grant.everywhere, *grant.teams.values()]
    best = "admin" if grant.admin else max((r for r in held if r), key=ROLES.index, default=None)
    out: dict[str, Any] = {"role": best, "admin": grant.admin}
    wanted = [d for d in request.query_params.getlist("dag_id")[:MAX_DAG_IDS] if DAG_ID.matches(d)]
    if wanted:
        owners = await access.owners_of(teams, wanted) if access is not None else dict.fromkeys(wanted)
        out["dags"] = {d: {"role": grant.role_for(owners[d]), "operate": grant.may("operate", owners[d]),
                           "edit": grant.may("edit", owners[d])}
                       for d in wanted if grant.may("read", owners[d])}
    return out


async def session(request: Request) -> Response:
    """What the presented bearer token may do; always 200 so the browser logs no error."""
    state = getattr(request.app.state, "api", None)
    auth = getattr(state, "auth", None)
    if auth is None:  # the app was built without the API (never in leoflow serve/standalone)
        return JSONResponse({"error": {"code": "unavailable", "message": "the API is not configured",
                                       "details": None}}, status_code=503)
    body: dict[str, Any]
    if not auth.enabled:
        body = {"authenticated": True, "auth": "disabled", "scope": "admin", "name": None, "sso": False,
                **await _roles(request, ANONYMOUS_ADMIN)}
    else:
        principal = await auth.identify_async(request.headers.get("authorization"))
        body = {"authenticated": principal is not None, "auth": "enabled",
                "scope": principal.scope if principal else None, "name": principal.name if principal else None,
                # Whether the page may offer "sign in with single sign-on" (leoflow.api.oidc.web_login).
                "sso": bool(getattr(request.app.state, "sso_login", False))}
        if principal is not None:
            body.update(await _roles(request, principal))
    return JSONResponse(body, headers={"Cache-Control": "no-store", **SECURITY_HEADERS})


async def index(request: Request) -> Response:
    """The single page; the hash part of the URL selects the view in the browser."""
    page = STATIC_DIR / "index.html"
    if not page.is_file():
        logger.error("dashboard assets missing from the installation", extra={"path": str(STATIC_DIR)})
        return JSONResponse(
            {"error": {"code": "dashboard_unavailable",
                       "message": "dashboard assets are missing from this installation", "details": None}},
            status_code=503,
        )
    response = FileResponse(page, media_type="text/html; charset=utf-8")
    _add_headers(response.headers)
    return response


def dashboard_routes() -> list[BaseRoute]:
    """Routes to append to the API app: ``GET /``, ``GET /dashboard/session`` and ``/static/*``."""
    return [
        Route("/", index, methods=["GET", "HEAD"], name="dashboard"),
        Route("/dashboard/session", session, methods=["GET"], name="dashboard-session"),
        Mount(STATIC_PREFIX, app=DashboardStaticFiles(directory=STATIC_DIR, check_dir=False),
              name="dashboard-static"),
    ]
