"""Dashboard sign-in through the OpenID Connect provider: authorization code + PKCE, a cookie session.

The browser flow, end to end:

1. ``GET /auth/login?next=/#/dags`` remembers ``state``, ``nonce``, the PKCE verifier and where
   to go back in a short-lived signed cookie (``leoflow_login``, ``Path=/auth``, 10 minutes) and
   redirects to the provider's authorization endpoint;
2. the provider signs the person in and redirects to ``GET /auth/callback?code&state``, which
   checks ``state`` against that cookie, exchanges the code (with the verifier, and the client
   secret when one is configured), verifies the ID token exactly as a bearer JWT
   (:class:`~.verifier.OidcVerifier`) plus its ``nonce``, and sets the session: the ID token in a
   signed ``HttpOnly; Secure; SameSite=Lax`` cookie (``leoflow_session``) that expires with it,
   and a CSRF value in a cookie the page can read (``leoflow_csrf``);
3. :class:`SessionCookieAuth`, in front of the API, turns a valid session cookie into the
   request's ``Authorization: Bearer <ID token>`` — so every route checks a signed-in person with
   the same verifier, scope and audit as a bearer JWT — and refuses (403) a write whose
   ``X-CSRF-Token`` header does not equal the session's CSRF value: a cross-site form can make
   the browser send the cookie, never that header.

When the provider also gave a refresh token, it rides in the same signed cookie, the cookie lives
:data:`SESSION_MAX_SECONDS`, and a request that finds the ID token within :data:`REFRESH_AHEAD` of
its expiry first trades the refresh token for a new one (the answer sets the renewed cookie): a
provider's 5-minute ID tokens do not end a person's session every 5 minutes. A refresh the
provider refuses ends the session when the ID token expires.

Why the ID token in the cookie rather than a server-side session: every replica can check it
alone (no session table, no sticky load balancing), and the session ends when the token does.

``GET /auth/oidc`` (whenever an issuer and client id are configured, dashboard sign-in or not)
tells ``leoflow login`` which provider and client to use, so a person needs only ``LEOFLOW_URL``.

Failure semantics: the provider unreachable at sign-in is a 503 page saying so (never a 500);
a bad or stale ``state``, a refused code, or a token that does not verify is a 400 page with
the reason and a link to try again; ``next`` is honoured only as a path on this site (``/...``,
not ``//host``, not ``/\\host``, no scheme), anything else goes to ``/`` — no open redirect.
A session cookie that does not verify, or has expired, is ignored (the API then answers 401 and
the page offers to sign in again).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import html
import json
import logging
import secrets
import time
from typing import Any
from urllib.parse import urlencode

import httpx
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from leoflow.api.oidc.verifier import OidcVerifier, TokenRefused
from leoflow.settings.oidc import OidcSettings

log = logging.getLogger(__name__)

LOGIN_COOKIE = "leoflow_login"
SESSION_COOKIE = "leoflow_session"
CSRF_COOKIE = "leoflow_csrf"
CSRF_HEADER = "x-csrf-token"
#: Seconds a sign-in may take at the provider before its state is forgotten.
LOGIN_TTL = 600
#: Seconds for one request to the provider (discovery, token exchange) during a sign-in.
PROVIDER_TIMEOUT = 5.0
#: Browsers drop cookies over 4,096 bytes; an ID token larger than this cannot be a session.
MAX_SESSION_COOKIE = 4000
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Seconds before the ID token's expiry at which a request renews it with the refresh token.
REFRESH_AHEAD = 60.0
#: Longest a refreshable dashboard session lasts (a working day); the provider may end it sooner.
SESSION_MAX_SECONDS = 12 * 3600


class CookieSigner:
    """HMAC-SHA256 over a JSON payload, with an expiry; one key per purpose derived from the secret."""

    def __init__(self, secret: str, purpose: str) -> None:
        self._key = hashlib.sha256(f"leoflow:{purpose}:{secret}".encode()).digest()

    def sign(self, payload: dict[str, Any], expires_at: float) -> str:
        body = base64.urlsafe_b64encode(json.dumps({**payload, "exp": int(expires_at)}).encode()).rstrip(b"=")
        mac = base64.urlsafe_b64encode(hmac.new(self._key, body, hashlib.sha256).digest()).rstrip(b"=")
        return f"{body.decode()}.{mac.decode()}"

    def unsign(self, value: str | None, now: float) -> dict[str, Any] | None:
        if not value or len(value) > MAX_SESSION_COOKIE * 2 or value.count(".") != 1:
            return None
        body, mac = value.split(".")
        expected = base64.urlsafe_b64encode(hmac.new(self._key, body.encode(), hashlib.sha256).digest()).rstrip(b"=")
        if not hmac.compare_digest(expected, mac.encode()):
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except ValueError:
            return None
        if not isinstance(payload, dict) or not isinstance(payload.get("exp"), int) or payload["exp"] <= now:
            return None
        return payload


def safe_next(value: str | None) -> str:
    """``value`` when it is a path on this site, else ``/`` (no open redirect through ``next``)."""
    if not value or len(value) > 2000 or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    if any(c in value for c in "\r\n\t\\") or any(ord(c) < 32 for c in value):
        return "/"
    return value


def _page(status: int, title: str, text: str) -> HTMLResponse:
    body = (f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>"
            '<p><a href="/auth/login">Sign in again</a> or <a href="/">go to the dashboard</a>.</p>')
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


class WebLogin:
    """The ``/auth/*`` routes of one app (its settings, verifier and cookie keys)."""

    def __init__(self, settings: OidcSettings, verifier: OidcVerifier, *, session_secret: str,
                 client_secret: str | None, public_url: str | None) -> None:
        self.settings = settings
        self.verifier = verifier
        self.login_cookies = CookieSigner(session_secret, "login")
        self.session_cookies = CookieSigner(session_secret, "session")
        self.client_secret = client_secret
        self.public_url = public_url.rstrip("/") if public_url else None
        self._provider: dict[str, Any] | None = None

    def routes(self) -> list[BaseRoute]:
        return [Route("/auth/login", self.login, methods=["GET"], name="sso-login"),
                Route("/auth/callback", self.callback, methods=["GET"], name="sso-callback"),
                Route("/auth/logout", self.logout, methods=["POST"], name="sso-logout")]

    def _redirect_uri(self, request: Request) -> str:
        base = self.public_url or str(request.base_url).rstrip("/")
        return f"{base}/auth/callback"

    async def _discovery(self) -> dict[str, Any]:
        if self._provider is None:
            url = (self.settings.issuer or "").rstrip("/") + "/.well-known/openid-configuration"
            async with httpx.AsyncClient(timeout=PROVIDER_TIMEOUT) as http:
                answer = await http.get(url)
            doc = answer.json() if answer.status_code == 200 else None
            if not isinstance(doc, dict) or doc.get("issuer") != self.settings.issuer:
                raise ValueError("the provider's discovery document is missing or names another issuer")
            self._provider = doc
        return self._provider

    async def login(self, request: Request) -> Response:
        try:
            provider = await self._discovery()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("dashboard sign-in: the identity provider is unavailable", extra={"error": str(exc)[:300]})
            return _page(503, "Sign-in unavailable", f"The identity provider ({self.settings.issuer}) cannot be "
                         "reached right now. Try again in a moment, or use an API token.")
        verifier = secrets.token_urlsafe(48)
        state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        query = urlencode({"response_type": "code", "client_id": self.settings.client_id,
                           "redirect_uri": self._redirect_uri(request), "scope": "openid email profile",
                           "state": state, "nonce": nonce, "code_challenge": challenge,
                           "code_challenge_method": "S256"})
        endpoint = str(provider.get("authorization_endpoint", ""))
        response = RedirectResponse(f"{endpoint}{'&' if '?' in endpoint else '?'}{query}", status_code=302)
        cookie = self.login_cookies.sign({"s": state, "n": nonce, "v": verifier,
                                          "next": safe_next(request.query_params.get("next"))},
                                         time.time() + LOGIN_TTL)
        response.set_cookie(LOGIN_COOKIE, cookie, max_age=LOGIN_TTL, path="/auth", httponly=True, secure=True,
                            samesite="lax")
        return response

    async def callback(self, request: Request) -> Response:
        pending = self.login_cookies.unsign(request.cookies.get(LOGIN_COOKIE), time.time())
        state = request.query_params.get("state")
        if pending is None or not state or not hmac.compare_digest(str(pending["s"]), state):
            return _page(400, "Sign-in failed", "This sign-in expired or did not start here; start again.")
        if request.query_params.get("error"):
            return _page(400, "Sign-in refused", f"The identity provider said: "
                         f"{request.query_params.get('error_description') or request.query_params['error']}"[:300])
        form = {"grant_type": "authorization_code", "code": request.query_params.get("code", ""),
                "redirect_uri": self._redirect_uri(request), "client_id": self.settings.client_id or "",
                "code_verifier": str(pending["v"])}
        if self.client_secret:
            form["client_secret"] = self.client_secret
        try:
            provider = await self._discovery()
            async with httpx.AsyncClient(timeout=PROVIDER_TIMEOUT) as http:
                answer = await http.post(str(provider["token_endpoint"]), data=form)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            log.warning("dashboard sign-in: the token exchange failed", extra={"error": str(exc)[:300]})
            return _page(503, "Sign-in unavailable", "The identity provider cannot be reached right now.")
        tokens = answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
        id_token = tokens.get("id_token") if isinstance(tokens, dict) else None
        if answer.status_code != 200 or not isinstance(id_token, str):
            return _page(400, "Sign-in failed", "The identity provider did not exchange the code for an ID token.")
        try:
            principal = await asyncio.to_thread(self.verifier.verify, id_token)  # may fetch keys: off the loop
            claims = json.loads(base64.urlsafe_b64decode(id_token.split(".")[1] + "=="))
        except (TokenRefused, ValueError) as exc:
            log.info("dashboard sign-in: ID token refused: %s", exc)
            return _page(400, "Sign-in failed", "The identity provider's ID token was not accepted.")
        if claims.get("nonce") != pending["n"]:
            return _page(400, "Sign-in failed", "The ID token was not issued for this sign-in (nonce).")
        refresh_token = tokens.get("refresh_token") if isinstance(tokens.get("refresh_token"), str) else None
        csrf = secrets.token_urlsafe(24)
        session, max_age = self.session_cookie(id_token, float(claims["exp"]), csrf, refresh_token)
        if len(session) > MAX_SESSION_COOKIE:
            return _page(400, "Sign-in failed", "The ID token is too large for a browser session (too many "
                         "groups?); ask for a smaller token, or use `leoflow login`.")
        response = RedirectResponse(str(pending["next"]), status_code=303)
        response.set_cookie(SESSION_COOKIE, session, max_age=max_age, path="/", httponly=True, secure=True,
                            samesite="lax")
        response.set_cookie(CSRF_COOKIE, csrf, max_age=max_age, path="/", httponly=False, secure=True,
                            samesite="strict")
        response.delete_cookie(LOGIN_COOKIE, path="/auth")
        log.info("dashboard sign-in", extra={"subject": principal.subject, "principal": principal.name})
        return response

    def session_cookie(self, id_token: str, expires_at: float, csrf: str, refresh_token: str | None,
                       ) -> tuple[str, int]:
        """The signed session and its max-age: the ID token's life, or a working day when it can be refreshed."""
        until = time.time() + SESSION_MAX_SECONDS if refresh_token else expires_at
        payload: dict[str, Any] = {"t": id_token, "c": csrf, **({"r": refresh_token} if refresh_token else {})}
        return self.session_cookies.sign(payload, until), max(1, int(until - time.time()))

    async def refresh(self, session: dict[str, Any]) -> tuple[dict[str, Any], str, int] | None:
        """A renewed session (payload, cookie, max-age) for one whose ID token is about to expire, or None."""
        try:  # the cookie is ours (signed): its token's claims were verified when it was set
            old = json.loads(base64.urlsafe_b64decode(session["t"].split(".")[1] + "=="))
            exp = float(old["exp"])
        except (ValueError, KeyError, IndexError, TypeError):
            return None
        if exp - time.time() > REFRESH_AHEAD or not isinstance(session.get("r"), str):
            return None
        form = {"grant_type": "refresh_token", "refresh_token": session["r"],
                "client_id": self.settings.client_id or ""}
        if self.client_secret:
            form["client_secret"] = self.client_secret
        try:
            provider = await self._discovery()
            async with httpx.AsyncClient(timeout=PROVIDER_TIMEOUT) as http:
                answer = await http.post(str(provider["token_endpoint"]), data=form)
            tokens = answer.json()
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            log.info("dashboard session: refresh failed", extra={"error": str(exc)[:300]})
            return None
        id_token = tokens.get("id_token") if isinstance(tokens, dict) and answer.status_code == 200 else None
        if not isinstance(id_token, str):
            log.info("dashboard session: the provider refused the refresh token", extra={"status": answer.status_code})
            return None
        try:
            principal = await asyncio.to_thread(self.verifier.verify, id_token)  # may fetch keys: off the loop
            new_exp = float(json.loads(base64.urlsafe_b64decode(id_token.split(".")[1] + "=="))["exp"])
        except (TokenRefused, ValueError, KeyError) as exc:
            log.info("dashboard session: the refreshed ID token was refused: %s", exc)
            return None
        if principal.subject != old.get("sub"):
            log.warning("dashboard session: the refreshed ID token names another subject; not renewed")
            return None  # never another person's token in this person's session
        rotated = tokens.get("refresh_token") if isinstance(tokens.get("refresh_token"), str) else session["r"]
        cookie, max_age = self.session_cookie(id_token, new_exp, str(session["c"]), rotated)
        return {"t": id_token, "c": session["c"], "r": rotated}, cookie, max_age

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", secure=True, httponly=True, samesite="lax")
        response.delete_cookie(CSRF_COOKIE, path="/", secure=True, samesite="strict")
        return response


def _cookie(scope: Scope, name: str) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"cookie":
            text: str = value.decode("latin-1")
            for part in text.split(";"):
                k, _, v = part.strip().partition("=")
                if k == name:
                    return v
    return None


class SessionCookieAuth:
    """ASGI middleware: a valid dashboard session becomes the request's bearer; a write needs its CSRF header."""

    def __init__(self, app: ASGIApp, signer: CookieSigner, login: WebLogin | None = None) -> None:
        self.app = app
        self.signer = signer
        #: Renews a session whose ID token is about to expire (None: sessions end with their ID token).
        self.login = login

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(("/api/", "/dashboard/")):
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        if any(k == b"authorization" for k, _ in headers) or (raw := _cookie(scope, SESSION_COOKIE)) is None:
            await self.app(scope, receive, send)  # an explicit bearer wins; no cookie, nothing to do
            return
        session = self.signer.unsign(raw, time.time())
        if session is None or not isinstance(session.get("t"), str):
            await self.app(scope, receive, send)
            return
        if scope["method"] not in SAFE_METHODS:
            sent = next((v.decode("latin-1") for k, v in headers if k == CSRF_HEADER.encode()), "")
            if not hmac.compare_digest(sent.encode(), str(session.get("c", "")).encode()):
                refused = JSONResponse({"error": {"code": "csrf", "message": "a write from a signed-in browser "
                                                  "needs the X-CSRF-Token header of its session", "details": None}},
                                       status_code=403)
                await refused(scope, receive, send)
                return
        renewed = await self.login.refresh(session) if self.login is not None else None
        if renewed is not None:
            session, cookie, max_age = renewed
            send = _adding_cookie(send, f"{SESSION_COOKIE}={cookie}; Max-Age={max_age}; Path=/; HttpOnly; Secure; "
                                  "SameSite=Lax")
        scope = {**scope, "headers": [*headers, (b"authorization", f"Bearer {session['t']}".encode())]}
        await self.app(scope, receive, send)


def _adding_cookie(send: Send, cookie: str) -> Send:
    """``send`` with one more ``Set-Cookie`` on the response's start."""
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode("latin-1"))]}
        await send(message)
    return sending


def web_login_for(settings: OidcSettings, verifier: OidcVerifier | None, public_url: str | None) -> WebLogin | None:
    """The dashboard's sign-in when the issuer, client id and session secret are all configured."""
    if verifier is None or not settings.dashboard_sign_in or settings.session_secret is None:
        return None
    return WebLogin(settings, verifier, session_secret=settings.session_secret, client_secret=settings.client_secret,
                    public_url=public_url)


def login_config_routes(settings: OidcSettings) -> list[BaseRoute]:
    """``GET /auth/oidc``: the issuer, client id and scopes, so that ``leoflow login`` needs only ``LEOFLOW_URL``.

    Public on purpose, as the provider's own discovery document is: it names nothing secret.
    """
    if settings.issuer is None or settings.client_id is None:
        return []
    body = {"issuer": settings.issuer, "client_id": settings.client_id, "scopes": list(settings.scopes)}

    async def login_config(request: Request) -> Response:
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    return [Route("/auth/oidc", login_config, methods=["GET"], name="sso-config")]
