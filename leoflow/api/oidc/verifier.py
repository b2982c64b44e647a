"""A bearer JWT of the configured OpenID Connect provider, checked and turned into a :class:`Principal`.

What is checked, in this order, each a refusal with a reason (logged; the caller answers 401
with ``WWW-Authenticate: Bearer`` and no detail, so nothing about keys or claims leaks):

1. the size, before anything is decoded (:data:`~leoflow.model.limits.BEARER_JWT`);
2. the header's ``alg`` against ``LEOFLOW_OIDC_ALGORITHMS``, asymmetric only — ``none`` and
   every ``HS*`` are refused before a key is looked at, so a token "signed" with the provider's
   *public* key as an HMAC secret (the RS/HS confusion attack) never reaches a verifier;
3. the key: the header's ``kid`` in the provider's JWKS (:class:`~.keys.ProviderKeys` fetches it
   when unknown, rate-limited), of the algorithm's key type and, when the JWK declares an
   ``alg``, that one;
4. the signature and the registered claims, by PyJWT: ``iss`` equal to the issuer, one ``aud``
   of ``LEOFLOW_OIDC_AUDIENCE``, ``exp`` required and in the future, ``nbf`` and ``iat`` not in
   the future (each with ``LEOFLOW_OIDC_LEEWAY`` of skew);
5. the person: ``sub`` a non-empty string; the groups claim absent or a list of at most
   :data:`~leoflow.model.limits.OIDC_GROUPS` strings (anything else refuses the token — a
   mistyped claim must not silently grant or drop access).

A verified token is remembered (by its SHA-256) until it expires, at most :data:`CACHE_SECONDS`,
and only while the provider's key set is the one that verified it: a signature check costs about
0.15 ms of CPU, a repeated bearer (every request of a CLI or a dashboard) then costs a hash and a
lookup. Refusals are never remembered. At most :data:`CACHE_SIZE` tokens are kept (the oldest go
first), so a flood of valid tokens cannot grow the replica's memory.

Scope, until teams and roles map groups: ``admin`` for a member of ``LEOFLOW_OIDC_ADMIN_GROUPS``,
``read`` for every other verified person.

Failure semantics: every refusal is ``None`` (never an exception, never a 500), whatever the
token holds; the provider being down only matters for keys not yet held.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import jwt

from leoflow.api.auth import Principal
from leoflow.api.oidc.keys import ProviderKeys, SigningKey, key_type_for
from leoflow.model.limits import BEARER_JWT, OIDC_GROUPS
from leoflow.settings.oidc import OidcSettings

log = logging.getLogger(__name__)

#: Longest group name kept (a longer one refuses the token, as a mistyped claim does).
MAX_GROUP_LENGTH = 256
#: Seconds a verified token is remembered at most (it is also forgotten when it expires, and when
#: the provider's key set changes): bounds how long a withdrawn key's tokens outlive it.
CACHE_SECONDS = 60.0
#: Verified tokens remembered at most (about 200 bytes each).
CACHE_SIZE = 4096


class TokenRefused(Exception):
    """Why a bearer JWT is not accepted (logged; never sent to the caller)."""


def _header(token: str) -> Mapping[str, Any]:
    """The JOSE header, decoded by hand: PyJWT's would accept what we refuse below anyway."""
    encoded = token.partition(".")[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (ValueError, TypeError):
        raise TokenRefused("the header is not base64url JSON") from None
    if not isinstance(header, dict):
        raise TokenRefused("the header is not a JSON object")
    return header


def _claim(claims: Mapping[str, Any], path: str) -> Any:
    """A claim by name or dotted path (``realm_access.roles``); None when absent."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return claims.get(path)  # a claim whose name holds a dot (Auth0's namespaced claims)
        value = value[part]
    return value


def groups_of(claims: Mapping[str, Any], path: str) -> tuple[str, ...]:
    value = _claim(claims, path)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise TokenRefused(f"the {path!r} claim is not a list of strings (got {type(value).__name__})")
    if len(value) > OIDC_GROUPS.maximum:
        raise TokenRefused(f"the {path!r} claim names {len(value)} groups, more than {OIDC_GROUPS.maximum}")
    if any(len(g) > MAX_GROUP_LENGTH for g in value):
        raise TokenRefused(f"a group of the {path!r} claim is longer than {MAX_GROUP_LENGTH} characters")
    return tuple(value)


def check_bearer_size(token: str) -> None:
    """Refuse a token over :data:`~leoflow.model.limits.BEARER_JWT` before anything reads it."""
    # Characters: a str longer than the limit is at least as many bytes.
    if len(token) > BEARER_JWT.maximum:
        raise TokenRefused(f"longer than {BEARER_JWT.maximum} bytes")


class OidcVerifier:
    """Callable as the Authenticator's ``jwt_verifier``: a token in, a principal or None out."""

    def __init__(self, settings: OidcSettings, keys: ProviderKeys, *, wall: Callable[[], float] = time.time) -> None:
        if settings.issuer is None:
            raise ValueError("OpenID Connect is not configured")
        self.settings = settings
        self.keys = keys
        self._admin_groups = frozenset(settings.admin_groups)
        self._wall = wall
        #: SHA-256 of a verified token → (principal, forget at, key generation).
        self._verified: dict[bytes, tuple[Principal, float, int]] = {}

    def __call__(self, token: str) -> Principal | None:
        try:
            return self.verify(token)
        except TokenRefused as exc:
            log.info("bearer JWT refused: %s", exc, extra={"issuer": self.settings.issuer})
            return None

    def may_fetch(self, token: str) -> bool:
        """Whether verifying ``token`` now may fetch the provider's keys (seconds, if it is slow): the
        API then verifies it in a worker thread instead of on its event loop (cheap: a header parse)."""
        if len(token) > BEARER_JWT.maximum:
            return False  # refused before any key is looked at
        try:
            kid = _header(token).get("kid")
        except TokenRefused:
            kid = ""
        return self.keys.fetch_due(kid if isinstance(kid, str) else "")

    def verify(self, token: str) -> Principal:
        """The principal of a valid token; raises :class:`TokenRefused` saying why not."""
        check_bearer_size(token)
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        now = self._wall()
        self.keys.refresh_if_old()  # a withdrawn key must also end what it verified
        known = self._verified.get(digest)
        if known is not None and known[1] > now and known[2] == self.keys.generation:
            return known[0]
        header = _header(token)
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.settings.algorithms:
            raise TokenRefused(f"algorithm {str(alg)[:20]!r} is not one of {', '.join(self.settings.algorithms)}")
        claims = self._verified_claims(token, alg, header.get("kid"))
        principal = self._principal(claims)
        self._remember(digest, principal, min(float(claims["exp"]), now + CACHE_SECONDS))
        return principal

    def _remember(self, digest: bytes, principal: Principal, until: float) -> None:
        if len(self._verified) >= CACHE_SIZE:
            for old in list(self._verified)[: CACHE_SIZE // 4]:  # the oldest quarter, in insertion order
                del self._verified[old]
        self._verified[digest] = (principal, until, self.keys.generation)

    def _keys_for(self, alg: str, kid: object) -> list[SigningKey]:
        key_type = key_type_for(alg)
        if key_type is None:  # unreachable: the settings only allow asymmetric algorithms
            raise TokenRefused(f"algorithm {alg!r} has no key type")
        if kid is None:
            keys = self.keys.candidates(key_type)
        elif not isinstance(kid, str) or len(kid) > 256:
            raise TokenRefused("the header's kid is not a short string")
        else:
            found = self.keys.find(kid)
            if found is None:
                raise TokenRefused(f"no key {kid[:64]!r} at the provider (after fetching its keys, rate-limited)")
            keys = [found]
        usable = [k for k in keys if k.key_type == key_type and k.algorithm in (None, alg)]
        if not usable:
            raise TokenRefused(f"no key of the provider may verify {alg}")
        return usable

    def _verified_claims(self, token: str, alg: str, kid: object) -> dict[str, Any]:
        s = self.settings
        problem = "no key"
        for key in self._keys_for(alg, kid):
            try:
                claims: dict[str, Any] = jwt.decode(
                    token, key.jwk.key, algorithms=[alg], audience=list(s.audiences), issuer=s.issuer,
                    leeway=s.leeway, options={"require": ["exp", "iss", "aud", "sub"], "verify_signature": True})
                return claims
            except jwt.InvalidSignatureError:
                problem = "the signature does not verify"
            except jwt.PyJWTError as exc:
                raise TokenRefused(f"{type(exc).__name__}: {str(exc)[:200]}") from None
            except (ValueError, TypeError, OverflowError) as exc:  # odd claim values PyJWT does not wrap
                raise TokenRefused(f"malformed claims ({type(exc).__name__})") from None
        raise TokenRefused(problem)

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub or len(sub) > 255:
            raise TokenRefused("sub is not a non-empty string of at most 255 characters")
        groups = groups_of(claims, self.settings.groups_claim)
        name = _claim(claims, self.settings.name_claim)
        if not isinstance(name, str) or not name or len(name) > 255:
            name = sub
        if self._admin_groups.intersection(groups):
            return Principal(name=name, scope="admin", kind="oidc", subject=sub, groups=groups)
        return Principal(name=name, scope="read", kind="oidc", subject=sub, groups=groups)


def oidc_verifier(settings: OidcSettings) -> OidcVerifier | None:
    """The verifier for ``settings`` (None when no issuer is configured)."""
    if settings.issuer is None:
        return None
    keys = ProviderKeys(settings.issuer, max_age=settings.keys_max_age, min_interval=settings.keys_min_interval)
    return OidcVerifier(settings, keys)
