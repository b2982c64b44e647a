"""Signing a person in to an OpenID Connect provider from a terminal: the client side of ``leoflow login``.

Two standard flows, in the order ``leoflow login`` tries them:

- the **device authorization grant** (RFC 8628): the provider hands out a short code, the person
  opens the printed URL on any device with a browser, and this process polls the token endpoint
  until they approved (or the code expired) — it works over SSH and in containers;
- the **authorization code grant with PKCE** (RFC 7636) through a **loopback redirect** (RFC
  8252): when the provider offers no device endpoint, this process listens on ``127.0.0.1`` on a
  free port, opens (or prints) the authorization URL, and takes the code the browser brings
  back, checking ``state`` (no cross-site login) and exchanging it with the PKCE verifier (a
  stolen code is useless without it).

Both end in a :class:`Tokens` (ID token, access token, refresh token, expiry) the CLI stores;
:func:`refresh` renews it with the refresh token. Nothing here verifies a token: the API does,
against the provider's keys; the CLI only reads a stored token's ``exp`` to know when to refresh.

Failure semantics: every failure (provider unreachable, an error answer, a denied or expired
device code, a browser that never came back) raises :class:`LoginFailed` with one line saying
what happened; no token or code is ever put in that line. Requests go through the CLI's own
small HTTP client (:mod:`.http`), as every client verb's do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from leoflow.client.http import HttpClient, TransportError
from leoflow.errors import LeoflowError

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
#: Seconds the loopback flow waits for the browser to come back.
BROWSER_TIMEOUT = 300.0
#: Seconds of HTTP to the provider, per request.
REQUEST_TIMEOUT = 15.0


class LoginFailed(LeoflowError):
    """Signing in to the OpenID Connect provider failed."""


class DeviceFlowUnavailable(LoginFailed):
    """The provider offers no device authorization to this client (the browser flow may work)."""


@dataclass(frozen=True)
class Tokens:
    """What a sign-in or a refresh yields (secrets: never printed)."""

    id_token: str | None
    access_token: str
    refresh_token: str | None
    #: Unix time the bearer (the ID token, else the access token) expires, from its ``exp``.
    expires_at: float

    @property
    def bearer(self) -> str:
        """What the CLI sends: the ID token (its audience is Leoflow's client id), else the access token."""
        return self.id_token or self.access_token

    def __repr__(self) -> str:
        return f"Tokens(expires_at={self.expires_at})"


def unverified_expiry(token: str) -> float | None:
    """A JWT's ``exp`` as written (not verified: the API verifies), or None."""
    try:
        payload = token.split(".")[1]
        exp = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))).get("exp")
    except (IndexError, ValueError, AttributeError):
        return None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def _call(method: str, url: str, form: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    parts = urlsplit(url)
    client = HttpClient(f"{parts.scheme}://{parts.netloc}", timeout=REQUEST_TIMEOUT)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        headers = {"Accept": "application/json"}
        body = None
        if form is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            body = urlencode(form).encode()
        answer = client.request(method, target, content=body, headers=headers)
    except TransportError as exc:
        raise LoginFailed(f"cannot reach the identity provider at {parts.netloc}: {exc}") from None
    finally:
        client.close()
    try:
        doc = answer.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise LoginFailed(f"{parts.netloc}{parts.path} answered {answer.status_code} without a JSON object")
    return answer.status_code, doc


def server_config(server_url: str) -> dict[str, Any] | None:
    """What a Leoflow server says about its provider (``GET /auth/oidc``), or None when it has none."""
    try:
        status, doc = _call("GET", server_url.rstrip("/") + "/auth/oidc")
    except LoginFailed:  # unreachable, or an older server's 404: the caller asks for the settings
        return None
    if status != 200 or not isinstance(doc.get("issuer"), str) or not isinstance(doc.get("client_id"), str):
        return None
    return doc


def discover(issuer: str) -> dict[str, Any]:
    """The provider's discovery document (its issuer checked: OpenID Connect Discovery section 4.3)."""
    status, doc = _call("GET", issuer.rstrip("/") + "/.well-known/openid-configuration")
    if status != 200:
        raise LoginFailed(f"the provider's discovery document answered {status}")
    if doc.get("issuer") != issuer:
        raise LoginFailed(f"the provider calls itself {str(doc.get('issuer'))[:200]!r}, not {issuer!r}")
    if not isinstance(doc.get("token_endpoint"), str):
        raise LoginFailed("the provider's discovery document names no token endpoint")
    return doc


def _tokens(doc: dict[str, Any], previous_refresh: str | None = None) -> Tokens:
    access = doc.get("access_token")
    if not isinstance(access, str) or not access:
        raise LoginFailed("the provider's answer holds no access token")
    id_token = doc.get("id_token") if isinstance(doc.get("id_token"), str) else None
    refresh_token = doc.get("refresh_token") if isinstance(doc.get("refresh_token"), str) else previous_refresh
    expires_in = doc.get("expires_in")
    fallback = time.time() + (float(expires_in) if isinstance(expires_in, int | float) else 300.0)
    expires_at = unverified_expiry(id_token or access) or fallback
    return Tokens(id_token=id_token, access_token=access, refresh_token=refresh_token, expires_at=expires_at)


def _token_error(doc: dict[str, Any]) -> str:
    error = str(doc.get("error", "error"))[:100]
    description = doc.get("error_description")
    return f"{error}: {str(description)[:200]}" if description else error


def device_login(provider: dict[str, Any], client_id: str, scopes: tuple[str, ...], show: Callable[[str], None],
                 *, sleep: Callable[[float], None] = time.sleep) -> Tokens:
    """The device authorization grant: show the URL and code, poll until approved, denied or expired."""
    if not isinstance(provider.get("device_authorization_endpoint"), str):
        raise DeviceFlowUnavailable("the provider offers no device authorization endpoint")
    status, start = _call("POST", provider["device_authorization_endpoint"],
                          {"client_id": client_id, "scope": " ".join(scopes)})
    if status != 200 or not isinstance(start.get("device_code"), str):
        raise DeviceFlowUnavailable(f"the provider refused a device code ({_token_error(start)})")
    complete = start.get("verification_uri_complete")
    show(f"To sign in, open {start.get('verification_uri')} and enter the code {start.get('user_code')}"
         + (f"\n(or open {complete})" if isinstance(complete, str) else ""))
    interval = float(start.get("interval") or 5)
    deadline = time.monotonic() + float(start.get("expires_in") or 600)
    while time.monotonic() < deadline:
        sleep(interval)
        status, answer = _call("POST", provider["token_endpoint"], {
            "grant_type": DEVICE_GRANT, "device_code": start["device_code"], "client_id": client_id})
        if status == 200:
            return _tokens(answer)
        error = answer.get("error")
        if error == "authorization_pending":
            continue
        if error == "slow_down":  # RFC 8628 section 3.5: five more seconds from now on
            interval += 5
            continue
        raise LoginFailed(f"the sign-in was not completed ({_token_error(answer)})")
    raise LoginFailed("the device code expired before the sign-in was approved")


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def _wait_for_redirect(listener: socket.socket, deadline: float) -> dict[str, str]:
    """The query of the first request to the callback path (answers every request with a short page)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LoginFailed("the browser did not come back from the identity provider in time")
        listener.settimeout(left)
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(10)
            try:
                line = conn.recv(8192).split(b"\r\n", 1)[0].decode("latin-1")
            except (TimeoutError, OSError):
                continue
            parts = line.split(" ")
            target = urlsplit(parts[1]) if len(parts) == 3 else None
            found = target is not None and target.path == "/callback"
            page = ("Signed in; you can close this tab and return to the terminal." if found else "Not found.")
            conn.sendall(f"HTTP/1.1 {'200 OK' if found else '404 Not Found'}\r\nContent-Type: text/plain\r\n"
                         f"Content-Length: {len(page)}\r\nConnection: close\r\n\r\n{page}".encode())
            if found and target is not None:
                return {k: v[0] for k, v in parse_qs(target.query).items()}


def browser_login(provider: dict[str, Any], client_id: str, scopes: tuple[str, ...], show: Callable[[str], None],
                  open_browser: Callable[[str], bool], *, timeout: float = BROWSER_TIMEOUT) -> Tokens:
    """The authorization code grant with PKCE and a loopback redirect on a free 127.0.0.1 port."""
    endpoint = provider.get("authorization_endpoint")
    if not isinstance(endpoint, str):
        raise LoginFailed("the provider names no authorization endpoint")
    verifier, challenge = _pkce()
    state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        redirect_uri = f"http://127.0.0.1:{listener.getsockname()[1]}/callback"
        url = endpoint + ("&" if "?" in endpoint else "?") + urlencode({
            "response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri, "scope": " ".join(scopes),
            "state": state, "nonce": nonce, "code_challenge": challenge, "code_challenge_method": "S256"})
        if not open_browser(url):
            show(f"Open this URL in a browser on this machine to sign in:\n{url}")
        query = _wait_for_redirect(listener, time.monotonic() + timeout)
    if query.get("state") != state:
        raise LoginFailed("the browser came back with a different state (a stale or forged redirect); try again")
    if "error" in query:
        raise LoginFailed(f"the provider refused the sign-in ({_token_error(query)})")
    code = query.get("code")
    if not code:
        raise LoginFailed("the browser came back without an authorization code")
    status, answer = _call("POST", provider["token_endpoint"], {
        "grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "client_id": client_id,
        "code_verifier": verifier})
    if status != 200:
        raise LoginFailed(f"the provider refused the authorization code ({_token_error(answer)})")
    return _tokens(answer)


def refresh(token_endpoint: str, client_id: str, refresh_token: str) -> Tokens:
    """New tokens for a refresh token (the provider may rotate the refresh token too)."""
    status, answer = _call("POST", token_endpoint, {"grant_type": "refresh_token", "refresh_token": refresh_token,
                                                    "client_id": client_id})
    if status != 200:
        raise LoginFailed(f"the provider refused the refresh token ({_token_error(answer)})")
    return _tokens(answer, previous_refresh=refresh_token)
