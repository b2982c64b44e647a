"""Who is calling: bearer credentials of three kinds, turned into one :class:`Principal`.

- **Static tokens** from ``LEOFLOW_API_TOKENS`` / ``LEOFLOW_API_TOKENS_FILE`` (parsed by
  :mod:`leoflow.settings` into :class:`~leoflow.settings.ApiToken`), scope ``read`` or ``admin``
  (``admin`` implies ``read``): the bootstrap admin. A presented token is compared with *every*
  configured token using :func:`hmac.compare_digest` (no early exit), so response timing reveals
  neither which token matched nor how much of a guess was right.
- **Runtime tokens** (``lft_…``, ``/api/v2/tokens``): looked up by the SHA-256 of the secret in
  this replica's :class:`~leoflow.api.token_cache.TokenCache`, which :meth:`Authenticator.authenticate`
  brings within a quarter of a second of the database first.
- **OpenID Connect bearer JWTs**: a value shaped like a JWT goes to ``jwt_verifier`` when one is
  configured (:mod:`leoflow.api.oidc`). One that may need the provider's keys fetched first
  (the verifier's ``may_fetch``: keys old, or an unknown ``kid``) is verified in a worker thread
  (:meth:`Authenticator.identify_async`): a slow or hanging provider must not stall the event
  loop, and with it ``/healthz`` and every other request of the replica.

Secrets are never logged: only the principal's name, kind and subject reach logs and audit.

Failure semantics: no/garbled/unknown/revoked/expired credential → 401 with
``WWW-Authenticate: Bearer``; a valid read credential on a write route → 403. With
``LEOFLOW_AUTH=disabled`` every request is treated as an anonymous admin.
:func:`ensure_auth_configured` makes a server refuse to start with auth enabled and no way in,
instead of starting a server nobody can use (or everybody can).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from leoflow.api.errors import ApiError
from leoflow.api.token_cache import CachedToken, TokenCache
from leoflow.errors import SettingsError
from leoflow.model.access.roles import Role
from leoflow.model.access.tokens import is_runtime_secret
from leoflow.settings import ApiSettings, Settings

Scope = Literal["read", "admin", "open"]
#: How a caller proved who it is: a ``LEOFLOW_API_TOKENS`` token, a runtime API token, an
#: OpenID Connect bearer JWT, or nobody (auth disabled, open routes).
PrincipalKind = Literal["static", "token", "oidc", "anonymous"]


@dataclass(frozen=True)
class Principal:
    """Who made a request, for authorization, logs and audit (never the secret it presented).

    Every field past ``scope`` has a default, so ``Principal(name, scope)`` keeps meaning a
    static token.
    """

    #: Shown in logs and audit: a token's name, a person's e-mail (or ``sub`` when none).
    name: str
    scope: Literal["read", "admin"]
    kind: PrincipalKind = "static"
    #: A stable id for audit: a runtime token's id, an OIDC ``sub``, a static token's name.
    subject: str = ""
    #: The identity provider's groups, which the teams file's rules map to team roles.
    groups: tuple[str, ...] = ()
    #: A runtime token's role and team (None for other kinds: their role follows from ``scope``
    #: and, with teams configured, from ``groups``).
    role: Role | None = None
    team: str | None = None


ANONYMOUS_ADMIN = Principal(name="anonymous", scope="admin", kind="anonymous", subject="anonymous")

#: Verifies a bearer JWT (OpenID Connect): the principal, or None when it does not verify.
JwtVerifier = Callable[[str], Principal | None]


def looks_like_jwt(token: str) -> bool:
    """Whether a bearer value has a JWT's shape (three dot-separated parts); API tokens never do."""
    return token.count(".") == 2


def ensure_auth_configured(settings: Settings) -> None:
    """Refuse to serve with auth enabled but no tokens configured."""
    if settings.api.auth_enabled and not settings.api.tokens and not settings.oidc.enabled:
        raise SettingsError("LEOFLOW_API_TOKENS", "no API tokens configured; set LEOFLOW_API_TOKENS or "
                            "LEOFLOW_API_TOKENS_FILE (name:scope:token), or LEOFLOW_AUTH=disabled to "
                            "serve without authentication")


def token_principal(token: CachedToken) -> Principal:
    """The principal a runtime token stands for (its id is the audit's stable subject)."""
    return Principal(name=token.name, scope="admin" if token.role == "admin" else "read", kind="token",
                     subject=token.id, role=token.role, team=token.team)


class Authenticator:
    """Checks ``Authorization: Bearer <token>`` headers against the configured tokens."""

    def __init__(self, api: ApiSettings, *, jwt_verifier: JwtVerifier | None = None) -> None:
        self.enabled = api.auth_enabled
        self._tokens = [(t.token.encode("utf-8"), Principal(t.name, t.scope, kind="static", subject=t.name))
                        for t in api.tokens]
        #: The OpenID Connect hook: a bearer value shaped like a JWT goes here (when set).
        self.jwt_verifier = jwt_verifier
        #: Runtime tokens (``/api/v2/tokens``); the app attaches its database at start.
        self.tokens = TokenCache()

    def identify(self, authorization: str | None) -> Principal | None:
        """The principal for a header value, or None when it names no configured token."""
        if not authorization:
            return None
        kind, _, presented = authorization.partition(" ")
        if kind.lower() != "bearer" or not presented.strip():
            return None
        presented = presented.strip()
        if self.jwt_verifier is not None and looks_like_jwt(presented):
            return self.jwt_verifier(presented)
        if is_runtime_secret(presented):
            token = self.tokens.lookup(presented)
            if token is not None:
                return token_principal(token)
        candidate = presented.encode("utf-8", "surrogateescape")
        found: Principal | None = None
        for secret, principal in self._tokens:
            # Compare against every token (no break) so timing does not depend on the match.
            if hmac.compare_digest(candidate, secret) and found is None:
                found = principal
        return found

    async def identify_async(self, authorization: str | None) -> Principal | None:
        """:meth:`identify`, with the runtime tokens brought up to date when one is presented, and in a
        worker thread when a JWT's keys may have to be fetched first."""
        if not authorization:
            return None
        presented = authorization.partition(" ")[2].strip()
        if self.tokens.attached and is_runtime_secret(presented):
            await self.tokens.refresh_if_stale()
        may_fetch = getattr(self.jwt_verifier, "may_fetch", None)
        if may_fetch is not None and looks_like_jwt(presented) and may_fetch(presented):
            return await asyncio.to_thread(self.identify, authorization)
        return self.identify(authorization)

    async def authenticate(self, authorization: str | None, needed: Scope) -> Principal:
        """:meth:`require`, after bringing the runtime tokens up to date when one is presented, and
        with a JWT whose keys may need fetching verified off the event loop."""
        if needed == "open" or not self.enabled:
            return ANONYMOUS_ADMIN
        return self._allowed(await self.identify_async(authorization), authorization, needed)

    def require(self, authorization: str | None, needed: Scope) -> Principal:
        """The caller's principal if allowed ``needed``; raises 401/403 otherwise."""
        if needed == "open" or not self.enabled:
            return ANONYMOUS_ADMIN
        return self._allowed(self.identify(authorization), authorization, needed)

    @staticmethod
    def _allowed(principal: Principal | None, authorization: str | None, needed: Scope) -> Principal:
        if principal is None:
            message = "missing bearer token" if not authorization else "invalid bearer token"
            raise ApiError(401, message, headers={"WWW-Authenticate": 'Bearer realm="leoflow"'})
        if needed == "admin" and principal.scope != "admin":
            raise ApiError(403, f"token {principal.name!r} has scope read; this request needs admin")
        return principal
