"""The Starlette application every replica serves: routes, auth, metrics, lifespan.

``create_app(settings)`` builds the app; its lifespan owns one bounded psycopg pool (the API's
share of ``LEOFLOW_DB_POOL_SIZE``, :mod:`leoflow.db.connection.budget`), used by every request — hot reads
directly, everything else through a SQLAlchemy engine on the same pool — and closed on
shutdown. Nothing else is kept between requests, so any replica can answer any request.

Route table: :func:`api_routes`, read from the operations declared beside their handlers
(:mod:`leoflow.api.routes`), the same declarations the OpenAPI document
(:mod:`leoflow.api.openapi.document`) is built from. Scopes: ``open`` (probes, the document),
``read``, ``admin`` (writes); ``/metrics`` needs ``read`` only when ``LEOFLOW_METRICS_AUTH=true``.

Failure semantics: the app builds without touching the database (a replica starts, and is
live, while PostgreSQL is down; it is simply not ready). Database trouble during a request
becomes 503 + ``Retry-After``; a request never hangs past the statement timeout plus a few
seconds of connection slack.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route

from leoflow import tracing
from leoflow.api.access import AccessControl, TeamsSource, action_for
from leoflow.api.auth import Authenticator, Scope, ensure_auth_configured
from leoflow.api.dashboard import dashboard_routes
from leoflow.api.endpoint import ApiState, Handler, endpoint
from leoflow.api.errors import http_exception_handler
from leoflow.api.middleware import HotRoutes, RequestMetrics
from leoflow.api.oidc.verifier import oidc_verifier
from leoflow.api.oidc.web_login import SessionCookieAuth, login_config_routes, web_login_for
from leoflow.api.openapi.document import openapi_document
from leoflow.api.routes import system
from leoflow.api.routes.table import OPERATIONS
from leoflow.api.run_waits import Waiters
from leoflow.db.connection.api_pool import PooledDatabase
from leoflow.db.connection.budget import ConnectionBudget
from leoflow.election.health import ElectionHealth
from leoflow.logging_setup import redact_url
from leoflow.model.access.roles import Action
from leoflow.model.live_logs import LiveLogs
from leoflow.settings import Settings
from leoflow.tracing.asgi import RequestSpans

logger = logging.getLogger(__name__)

#: Seconds a request may wait for a connection and its first bytes beyond the statement
#: timeout (connect timeout 5 s, plus scheduling slack on a loaded host).
REQUEST_TIMEOUT_SLACK = 10.0


@dataclass(frozen=True)
class ApiRoute:
    method: str
    path: str
    handler: Handler
    scope: Scope
    #: What the caller must be allowed (leoflow.api.access); None for open routes.
    action: Action | None = None


def api_routes(settings: Settings) -> tuple[ApiRoute, ...]:
    """The routing table: every declared operation (:mod:`leoflow.api.routes.table`), its scope
    resolved under ``settings``."""
    metrics_auth = settings.api.metrics_auth
    return tuple(ApiRoute(operation.method, operation.path, operation.handler, scope,
                          action_for(operation.method, operation.path, scope))
                 for operation in OPERATIONS for scope in (operation.scope(metrics_auth=metrics_auth),))


#: Served past Starlette's exception middleware and router (:class:`~leoflow.api.middleware.HotRoutes`):
#: the run document that run pages, dashboards and ``runs wait`` poll (issue 21).
HOT_ROUTES = (("GET", "/api/v2/dags/{dag_id}/runs/{run_id}"),)


def _starlette_routes(settings: Settings) -> list[BaseRoute]:
    by_path: dict[str, list[ApiRoute]] = {}
    for route in api_routes(settings):
        by_path.setdefault(route.path, []).append(route)
    routes: list[BaseRoute] = []
    for path, entries in by_path.items():
        # One Route per (path, method): each carries its own scope; Starlette answers 405 with
        # an Allow header when a path matches but no method does.
        for entry in entries:
            routes.append(Route(path, endpoint(entry.handler, entry.scope, entry.action), methods=[entry.method],
                                name=f"{entry.method} {path}"))
    return routes


def create_app(settings: Settings, *, election_health: ElectionHealth | None = None,
               live_logs: LiveLogs | None = None) -> Starlette:
    """The API app for ``settings``; raises SettingsError when auth is enabled without tokens.

    ``election_health`` is the replica's elector's: ``/readyz`` reports its refusals.
    ``live_logs`` reads running tries' output from where it lives (the Kubernetes API); the
    composition root passes the executor's reader, and the app closes it on shutdown.
    """
    ensure_auth_configured(settings)
    url = settings.require_database_url()
    # Read now: a bad teams file stops the server with one line rather than serving without roles.
    access = AccessControl(TeamsSource(settings.api.teams_file))
    # Bearer JWTs of an OpenID Connect provider (leoflow.api.oidc), when one is configured.
    verifier = oidc_verifier(settings.oidc) if settings.oidc.enabled else None
    auth = Authenticator(settings.api, jwt_verifier=verifier)
    # Dashboard sign-in through the provider (a session cookie becomes the bearer), when configured.
    web_login = web_login_for(settings.oidc, verifier, settings.notify.dashboard_url)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        size = ConnectionBudget.split(settings.database.pool_size).api
        db = PooledDatabase.create(settings.database, size=size,
                                   application_name=f"leoflow-api:{settings.cluster.node_id}"[:63])
        # Not waiting for the first connection: the API starts (and is live) while the
        # database is down; requests answer 503 until it is back.
        await db.open()
        auth.tokens.attach(db)
        access.owners.attach(db)
        app.state.api = ApiState(settings=settings, db=db, auth=auth,
                                 request_timeout=settings.database.statement_timeout + REQUEST_TIMEOUT_SLACK,
                                 election_health=election_health, live_logs=live_logs, access=access)
        app.state.work_gauges = system.WorkGauges()
        app.state.run_waiters = Waiters()
        logger.info("API serving", extra={"database": redact_url(url), "auth": settings.api.auth_enabled,
                                          "api_connections": size})
        try:
            yield
        finally:
            await db.close()
            if live_logs is not None:
                live_logs.close()
            if verifier is not None:
                verifier.keys.close()

    routes = _starlette_routes(settings)
    hot = [r for r in routes if isinstance(r, Route) and any(
        r.path == path and method in (r.methods or ()) for method, path in HOT_ROUTES)]
    app = Starlette(
        # The web dashboard (``/``, ``/static``) is public static files; see leoflow.api.dashboard.
        routes=routes + dashboard_routes() + (web_login.routes() if web_login else [])
        + login_config_routes(settings.oidc),
        middleware=[Middleware(RequestMetrics),
                    # A span per request when tracing is on (leoflow.tracing.asgi; off: not in the stack).
                    *([Middleware(RequestSpans)] if tracing.enabled() else []),
                    *([Middleware(SessionCookieAuth, signer=web_login.session_cookies, login=web_login)]
                      if web_login else []),
                    Middleware(HotRoutes, routes=hot)],
        exception_handlers={HTTPException: http_exception_handler},
        lifespan=lifespan,
    )
    app.state.openapi_document = openapi_document()
    app.state.sso_login = web_login is not None
    return app
