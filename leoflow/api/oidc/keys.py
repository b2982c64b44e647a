"""The provider's signing keys: its discovery document and JWKS, fetched rarely, kept while it is down.

Why a cache with two clocks: a token is checked on every request, and the provider must not be
asked for its keys each time (nor be able to take the API down with it). Keys are fetched on the
first token, again once they are older than ``keys_max_age`` (so a key the provider withdrew
stops verifying), and again when a token names a ``kid`` the cache does not hold (the provider
rotated). Every fetch, whatever triggered it, waits ``keys_min_interval`` after the last one: a
flood of tokens with made-up ``kid`` values costs the provider one request per interval, not
one per token (the complaint against caches that refetch per miss), and a cache that never
refreshes (the complaint against the rest: a rotated key refused until a restart) cannot happen.

Failure semantics: a failed fetch (provider down, timeout, a document over
:data:`MAX_DOCUMENT_BYTES`, not JSON, an ``issuer`` that is not the configured one) keeps the
keys already held — tokens signed by them go on verifying — and is logged once per attempt; a
key the provider publishes that cannot be used (an unknown ``kty``, an encryption key, a
symmetric ``oct`` key) is skipped, not fatal, so one odd entry never blocks the others. The fetch
runs on the caller's thread with a short timeout (:data:`FETCH_TIMEOUT`); the API never calls it
from the event loop: a request whose token may need a fetch (:meth:`ProviderKeys.fetch_due`) is
verified in a worker thread, so a provider that hangs delays only the requests that wait for its
keys, never ``/healthz`` or another caller on the same replica.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import httpx
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from leoflow.clock import Clock, SystemClock

log = logging.getLogger(__name__)

#: Seconds one fetch (discovery or JWKS) may take: short, since the event loop waits (see above).
FETCH_TIMEOUT = 3.0
#: A discovery document or JWKS larger than this is refused (real ones are a few KiB).
MAX_DOCUMENT_BYTES = 512 * 1024
#: Keys kept from one JWKS at most (providers publish 1-5: current, next, previous).
MAX_KEYS = 50
#: ``kty`` each signature algorithm needs: a key is never used with an algorithm of another family.
KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}


class SigningKey(NamedTuple):
    """One usable key of the JWKS: the key, its type and the one algorithm it declares (if any)."""

    jwk: PyJWK
    key_type: str
    #: The JWK's ``alg`` member: when present, the only algorithm this key may verify.
    algorithm: str | None


class KeyFetchFailed(Exception):
    """The provider's discovery document or JWKS could not be fetched or read."""


def key_type_for(algorithm: str) -> str | None:
    return KEY_TYPES.get(algorithm[:2])


def _get_json(http: httpx.Client, url: str) -> Mapping[str, Any]:
    try:
        with http.stream("GET", url, headers={"Accept": "application/json"}) as answer:
            if answer.status_code != 200:
                raise KeyFetchFailed(f"{url} answered {answer.status_code}")
            body = bytearray()
            for chunk in answer.iter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise KeyFetchFailed(f"{url} sent more than {MAX_DOCUMENT_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise KeyFetchFailed(f"{url}: {type(exc).__name__}: {exc}") from None
    try:
        doc = json.loads(body)
    except ValueError:
        raise KeyFetchFailed(f"{url} did not send JSON") from None
    if not isinstance(doc, dict):
        raise KeyFetchFailed(f"{url} did not send a JSON object")
    return doc


def parse_jwks(doc: Mapping[str, Any]) -> dict[str, SigningKey]:
    """The usable signing keys of a JWKS, by ``kid`` (a key without one is kept under ``""``)."""
    keys = doc.get("keys")
    if not isinstance(keys, list):
        raise KeyFetchFailed("the JWKS has no keys list")
    found: dict[str, SigningKey] = {}
    for entry in keys[:MAX_KEYS]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue  # an encryption key
        if entry.get("kty") not in KEY_TYPES.values():
            continue  # a symmetric ("oct") or unknown key type: never a provider's signing key
        kid = entry.get("kid", "")
        try:
            alg = entry.get("alg")
            found[kid if isinstance(kid, str) else ""] = SigningKey(
                PyJWK(entry), entry["kty"], alg if isinstance(alg, str) else None)
        except (PyJWKError, ValueError, TypeError) as exc:
            # Skipped, not fatal: a provider may publish a key of an algorithm we do not run.
            log.warning("skipping a key of the provider's JWKS", extra={"kid": str(kid)[:100], "error": str(exc)[:200]})
    return found


class ProviderKeys:
    """The signing keys of one issuer, as last fetched; thread-safe, one fetch at a time."""

    def __init__(self, issuer: str, *, max_age: float, min_interval: float, clock: Clock | None = None,
                 transport: httpx.BaseTransport | None = None,
                 on_fetch: Callable[[bool], None] | None = None) -> None:
        self.issuer = issuer
        self.max_age = max_age
        self.min_interval = min_interval
        self._clock = clock or SystemClock()
        self._http = httpx.Client(timeout=FETCH_TIMEOUT, transport=transport, follow_redirects=False)
        self._lock = threading.Lock()
        self._keys: dict[str, SigningKey] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._jwks_uri: str | None = None
        #: Called after each fetch with whether it worked (metrics, tests).
        self._on_fetch = on_fetch
        #: Grows whenever a fetch changes the set of key ids: what was verified before may no longer be.
        self.generation = 0

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"

    def close(self) -> None:
        self._http.close()

    def find(self, kid: str) -> SigningKey | None:
        """The key ``kid``, fetching the keys first when they are old or do not hold it (rate-limited)."""
        now = self._clock.monotonic()
        stale = self._fetched_at is None or now - self._fetched_at >= self.max_age
        if stale or kid not in self._keys:
            self._refresh(now)
        return self._keys.get(kid)

    def fetch_due(self, kid: str) -> bool:
        """Whether :meth:`find` for ``kid`` would fetch now (keys old or ``kid`` unknown, and not rate-limited):
        a lock-free look, so the API can verify such a token off its event loop."""
        now = self._clock.monotonic()
        stale = self._fetched_at is None or now - self._fetched_at >= self.max_age
        if not stale and kid in self._keys:
            return False
        return self._attempted_at is None or now - self._attempted_at >= self.min_interval

    def refresh_if_old(self) -> None:
        """Fetch the keys if they are older than ``max_age`` (rate-limited, as :meth:`find`)."""
        now = self._clock.monotonic()
        if self._fetched_at is None or now - self._fetched_at >= self.max_age:
            self._refresh(now)

    def candidates(self, key_type: str) -> list[SigningKey]:
        """Every held key of ``key_type`` (for a token without a ``kid``, as go-oidc tries them all)."""
        self.find("")
        return [k for k in self._keys.values() if k.key_type == key_type]

    def _refresh(self, now: float) -> None:
        if self._attempted_at is not None and now - self._attempted_at < self.min_interval:
            return
        if not self._lock.acquire(blocking=False):
            return  # another thread is fetching; this token is checked against what is held
        try:
            self._attempted_at = now
            try:
                keys = self._fetch()
            except KeyFetchFailed as exc:
                self._jwks_uri = None  # discovered again next time: the provider may have moved it
                log.warning("could not fetch the OpenID Connect provider's keys; keeping the %d held",
                            len(self._keys), extra={"issuer": self.issuer, "error": str(exc)[:300]})
                if self._on_fetch:
                    self._on_fetch(False)
                return
            if keys.keys() != self._keys.keys():
                self.generation += 1
            self._keys = keys
            self._fetched_at = now
            log.info("fetched the OpenID Connect provider's keys",
                     extra={"issuer": self.issuer, "kids": sorted(keys)[:10]})
            if self._on_fetch:
                self._on_fetch(True)
        finally:
            self._lock.release()

    def _fetch(self) -> dict[str, SigningKey]:
        if self._jwks_uri is None:
            discovery = _get_json(self._http, self.discovery_url)
            # OpenID Connect Discovery 1.0 section 4.3: the document's issuer must be the one asked.
            if discovery.get("issuer") != self.issuer:
                raise KeyFetchFailed(f"the discovery document names issuer {str(discovery.get('issuer'))[:200]!r}, "
                                     f"not {self.issuer!r}")
            uri = discovery.get("jwks_uri")
            if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
                raise KeyFetchFailed("the discovery document has no http(s) jwks_uri")
            self._jwks_uri = uri
        return parse_jwks(_get_json(self._http, self._jwks_uri))
