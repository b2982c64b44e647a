"""OpenID Connect bearer JWTs against a real provider process (tests/harness/oidc_provider.py).

Tokens come from the provider's standard endpoints (the device grant here; the authorization
code grant with PKCE in tests/cli/test_login.py); the hostile ones are made the way an attacker
would, some signed with the provider's own key (read from the key file the test gave it) so that
the claim checks, not the signature, are what refuses them. Each must be a 401 with nothing
written and no token in the logs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from jwt.algorithms import RSAAlgorithm

from leoflow.api.app import create_app
from tests.api.conftest import ADMIN, api_settings, spec
from tests.api.live import client_for
from tests.harness.oidc_provider import API_AUDIENCE, CLIENT_ID, OidcProvider, new_key

USERS: dict[str, dict[str, Any]] = {
    "alice": {"email": "alice@example.com", "groups": ["platform-admins", "data"]},
    "bob": {"email": "bob@example.com", "groups": ["data"]},
    "nogroups": {"email": "n@example.com"},
    "stringgroups": {"email": "s@example.com", "groups": "platform-admins"},
    "numbergroups": {"email": "k@example.com", "groups": [1, 2]},
    "manygroups": {"email": "m@example.com", "groups": [f"g{i}" for i in range(1001)]},
}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    with OidcProvider(tmp_path_factory.mktemp("idp"), USERS) as idp:
        yield idp


def oidc_env(provider: OidcProvider, **extra: str) -> dict[str, str]:
    return {"LEOFLOW_OIDC_ISSUER": provider.issuer, "LEOFLOW_OIDC_AUDIENCE": f"{CLIENT_ID},{API_AUDIENCE}",
            "LEOFLOW_OIDC_ADMIN_GROUPS": "platform-admins", "LEOFLOW_OIDC_KEYS_MIN_INTERVAL": "0.5", **extra}


@pytest.fixture
def api(database_url: str, provider: OidcProvider) -> Iterator[httpx.Client]:
    with client_for(create_app(api_settings(database_url, **oidc_env(provider)))) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(provider: OidcProvider, **claims: Any) -> str:
    """A token signed with the provider's current key, with these claims over valid ones."""
    now = int(time.time())
    body = {"iss": provider.issuer, "aud": CLIENT_ID, "sub": "mallory", "iat": now, "exp": now + 300, **claims}
    body = {k: v for k, v in body.items() if v is not None}
    key = RSAAlgorithm.from_jwk(json.dumps(provider.signing_key))
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": provider.signing_key["kid"]})  # type: ignore[arg-type]


def dag_ids(api: httpx.Client) -> list[str]:
    return [d["dag_id"] for d in api.get("/api/v2/dags", headers=ADMIN).json()["items"]]


def test_provider_tokens_read_and_admin_by_group(api: httpx.Client, provider: OidcProvider) -> None:
    alice, bob = provider.device_login("alice"), provider.device_login("bob")
    for token in (alice["id_token"], alice["access_token"], bob["id_token"], bob["access_token"]):
        assert api.get("/api/v2/dags", headers=bearer(token)).status_code == 200
    refused = api.post("/api/v2/dags", json=spec("by-bob"), headers=bearer(bob["id_token"]))
    assert refused.status_code == 403
    assert api.post("/api/v2/dags", json=spec("by-alice"), headers=bearer(alice["id_token"])).status_code == 201
    assert dag_ids(api) == ["by-alice"]
    # The audit log names the person (the e-mail claim), not a token.
    events = api.get("/api/v2/audit", headers=ADMIN).json()["items"]
    assert any(e["actor"] == "alice@example.com" and e["status"] == 201 for e in events), events
    # A person without a groups claim is a reader.
    nobody = provider.device_login("nogroups")["id_token"]
    assert api.get("/api/v2/dags", headers=bearer(nobody)).status_code == 200


def test_static_tokens_keep_working_beside_oidc(api: httpx.Client) -> None:
    assert api.get("/api/v2/dags", headers=ADMIN).status_code == 200
    assert api.get("/api/v2/dags", headers=bearer("a.b.c")).status_code == 401


def test_key_rotation_mid_session(api: httpx.Client, provider: OidcProvider) -> None:
    before = provider.device_login("alice")["id_token"]
    assert api.get("/api/v2/dags", headers=bearer(before)).status_code == 200
    provider.rotate(keep_old=True)
    after = provider.device_login("alice")["id_token"]
    assert jwt.get_unverified_header(after)["kid"] != jwt.get_unverified_header(before)["kid"]
    time.sleep(0.6)  # past LEOFLOW_OIDC_KEYS_MIN_INTERVAL: the unknown kid fetches the keys again
    assert api.get("/api/v2/dags", headers=bearer(after)).status_code == 200
    assert api.get("/api/v2/dags", headers=bearer(before)).status_code == 200  # the old key is still published


def test_a_withdrawn_key_stops_verifying_once_the_keys_are_old(database_url: str, provider: OidcProvider) -> None:
    env = oidc_env(provider, LEOFLOW_OIDC_KEYS_MAX_AGE="1")
    with client_for(create_app(api_settings(database_url, **env))) as api:
        old = provider.device_login("alice")["id_token"]
        assert api.get("/api/v2/dags", headers=bearer(old)).status_code == 200
        provider.rotate(keep_old=False)
        time.sleep(1.1)
        assert api.get("/api/v2/dags", headers=bearer(old)).status_code == 401
        assert api.get("/api/v2/dags", headers=bearer(provider.device_login("alice")["id_token"])).status_code == 200


def test_provider_down_cached_keys_keep_verifying(database_url: str, tmp_path: Path) -> None:
    idp = OidcProvider(tmp_path, USERS)
    idp.start()
    try:
        with client_for(create_app(api_settings(database_url, **oidc_env(idp, LEOFLOW_OIDC_KEYS_MAX_AGE="1")))) as api:
            token = idp.device_login("alice")["id_token"]
            assert api.get("/api/v2/dags", headers=bearer(token)).status_code == 200
            stranger = signed(idp)  # same key: verifies from the cache too
            idp.stop()
            time.sleep(1.1)  # the keys are now old: the next token tries to fetch them, and fails
            assert api.get("/api/v2/dags", headers=bearer(token)).status_code == 200
            assert api.get("/api/v2/dags", headers=bearer(stranger)).status_code == 200
            unknown = jwt.encode({"sub": "x"}, RSAAlgorithm.from_jwk(json.dumps(new_key())),  # type: ignore[arg-type]
                                 algorithm="RS256", headers={"kid": "never-published"})
            assert api.get("/api/v2/dags", headers=bearer(unknown)).status_code == 401
            assert api.post("/api/v2/dags", json=spec("while-down"), headers=bearer(token)).status_code == 201
    finally:
        idp.stop()


def _hostile_tokens(provider: OidcProvider) -> dict[str, str]:
    now = int(time.time())
    claims = {"iss": provider.issuer, "aud": CLIENT_ID, "sub": "mallory", "iat": now, "exp": now + 300,
              "groups": ["platform-admins"]}
    payload = _b64(json.dumps(claims).encode())
    public_pem = RSAAlgorithm.from_jwk(json.dumps(provider.signing_key)).public_key().public_bytes(  # type: ignore[union-attr]
        encoding=__import__("cryptography.hazmat.primitives.serialization", fromlist=["Encoding"]).Encoding.PEM,
        format=__import__("cryptography.hazmat.primitives.serialization",
                          fromlist=["PublicFormat"]).PublicFormat.SubjectPublicKeyInfo)
    hs_header = _b64(json.dumps({"alg": "HS256", "kid": provider.signing_key["kid"]}).encode())
    hs_sig = _b64(hmac.new(public_pem, f"{hs_header}.{payload}".encode(), hashlib.sha256).digest())
    es_header = _b64(json.dumps({"alg": "ES256", "kid": provider.signing_key["kid"]}).encode())
    none_header = _b64(json.dumps({"alg": "none", "kid": provider.signing_key["kid"]}).encode())
    forged_key = RSAAlgorithm.from_jwk(json.dumps(new_key()))
    return {
        "alg none": f"{none_header}.{payload}.",
        "HS256 with the public key": f"{hs_header}.{payload}.{hs_sig}",
        "wrong iss": signed(provider, iss="https://evil.example.com", groups=["platform-admins"]),
        "wrong aud": signed(provider, aud="another-app", groups=["platform-admins"]),
        "no aud": signed(provider, aud=None, groups=["platform-admins"]),
        "expired": signed(provider, iat=now - 7200, exp=now - 3600, groups=["platform-admins"]),
        "no exp": signed(provider, exp=None, groups=["platform-admins"]),
        "not yet valid": signed(provider, nbf=now + 3600, groups=["platform-admins"]),
        "issued in the future": signed(provider, iat=now + 3600, groups=["platform-admins"]),
        "exp not a number": signed(provider, exp="tomorrow", groups=["platform-admins"]),
        "sub not a string": signed(provider, sub=42, groups=["platform-admins"]),
        "groups a string": provider.device_login("stringgroups")["id_token"],
        "groups of numbers": provider.device_login("numbergroups")["id_token"],
        "groups too many": provider.device_login("manygroups")["id_token"],
        "groups an object": signed(provider, groups={"platform-admins": True}),
        "signed by another key, the provider's kid": jwt.encode(
            claims, forged_key, algorithm="RS256", headers={"kid": provider.signing_key["kid"]}),  # type: ignore[arg-type]
        "tampered payload": ".".join((lambda p: [p[0], _b64(json.dumps({**claims, "sub": "root"}).encode()), p[2]])(
            signed(provider, groups=["platform-admins"]).split("."))),
        "header not json": f"{_b64(b'not json')}.{payload}.sig",
        "kid not a string": f"{_b64(json.dumps({'alg': 'RS256', 'kid': 7}).encode())}.{payload}.{hs_sig}",
        "ES256 header on an RSA key": f"{es_header}.{payload}.{hs_sig}",
        "100 KB": signed(provider, padding="x" * 100_000),
    }


def test_hostile_tokens_are_401_and_write_nothing(api: httpx.Client, provider: OidcProvider,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    hostile = _hostile_tokens(provider)
    for name, token in hostile.items():
        answer = api.post("/api/v2/dags", json=spec("hostile"), headers=bearer(token))
        # A 100 KB header may be refused by the HTTP server itself (431) before the API sees it.
        expected = (401, 431) if name == "100 KB" else (401,)
        assert answer.status_code in expected, (name, answer.status_code, answer.text)
        if answer.status_code == 401:
            assert answer.headers["WWW-Authenticate"].startswith("Bearer"), name
            assert answer.json()["error"]["code"] == "unauthorized", name
        read = api.get("/api/v2/dags", headers=bearer(token))
        assert read.status_code in (401, 431), (name, read.status_code)
    assert dag_ids(api) == []
    for token in hostile.values():
        assert token[-40:] not in caplog.text  # a refused token's signature is never logged


def test_the_verifier_refuses_a_large_token_before_decoding_it(provider: OidcProvider) -> None:
    from leoflow.api.oidc.verifier import TokenRefused, oidc_verifier
    from leoflow.settings import load_settings

    verifier = oidc_verifier(load_settings(oidc_env(provider)).oidc)
    assert verifier is not None
    try:
        hits = provider.jwks_hits()
        with pytest.raises(TokenRefused, match="longer than 16384 bytes"):
            verifier.verify("x" * 100_000 + ".a.b")
        assert provider.jwks_hits() == hits  # refused without asking the provider anything
        principal = verifier.verify(provider.device_login("alice")["access_token"])
        assert (principal.kind, principal.subject, principal.scope) == ("oidc", "alice", "admin")
        assert principal.groups == ("platform-admins", "data")
    finally:
        verifier.keys.close()


def test_unknown_kid_flood_fetches_the_keys_at_most_once_an_interval(api: httpx.Client, provider: OidcProvider) -> None:
    warm = provider.device_login("bob")["id_token"]
    assert api.get("/api/v2/dags", headers=bearer(warm)).status_code == 200
    forged = RSAAlgorithm.from_jwk(json.dumps(new_key()))
    before, started = provider.jwks_hits(), time.monotonic()
    for i in range(300):
        token = jwt.encode({"iss": provider.issuer, "aud": CLIENT_ID, "sub": "x", "exp": int(time.time()) + 60},
                           forged, algorithm="RS256", headers={"kid": f"made-up-{i}"})  # type: ignore[arg-type]
        assert api.get("/api/v2/dags", headers=bearer(token)).status_code == 401
    elapsed = time.monotonic() - started
    fetched = provider.jwks_hits() - before
    # LEOFLOW_OIDC_KEYS_MIN_INTERVAL is 0.5 s here: at most one fetch per half second, plus the first.
    assert fetched <= elapsed / 0.5 + 1, (fetched, elapsed)
    assert fetched < 300 / 10
    assert api.get("/api/v2/dags", headers=bearer(warm)).status_code == 200


def test_oidc_settings_are_refused_clearly() -> None:
    from leoflow.errors import SettingsError
    from leoflow.settings import load_settings

    with pytest.raises(SettingsError, match="LEOFLOW_OIDC_AUDIENCE: must be set"):
        load_settings({"LEOFLOW_OIDC_ISSUER": "https://idp.example.com"})
    for bad in ("HS256", "none", "RS256,HS512", ""):
        if bad:
            with pytest.raises(SettingsError, match="LEOFLOW_OIDC_ALGORITHMS"):
                load_settings({"LEOFLOW_OIDC_ALGORITHMS": bad})
    with pytest.raises(SettingsError, match="LEOFLOW_OIDC_ISSUER: must be an http"):
        load_settings({"LEOFLOW_OIDC_ISSUER": "idp.example.com", "LEOFLOW_OIDC_CLIENT_ID": "x"})
    with pytest.raises(SettingsError, match="LEOFLOW_OIDC_SCOPES: must include openid"):
        load_settings({"LEOFLOW_OIDC_SCOPES": "email"})
    with pytest.raises(SettingsError, match="LEOFLOW_OIDC_GROUPS_CLAIM"):
        load_settings({"LEOFLOW_OIDC_GROUPS_CLAIM": "realm_access..roles"})
    assert load_settings({}).oidc.enabled is False


def test_a_server_with_single_sign_on_needs_no_static_token(database_url: str, provider: OidcProvider) -> None:
    from leoflow.settings import load_settings

    settings = load_settings({"LEOFLOW_DATABASE_URL": database_url, "LEOFLOW_LOG_FORMAT": "text",
                              "LEOFLOW_DB_POOL_SIZE": "4", **oidc_env(provider)})
    assert settings.api.tokens == ()
    with client_for(create_app(settings)) as api:
        alice = provider.device_login("alice")["id_token"]
        assert api.post("/api/v2/dags", json=spec("sso-only"), headers=bearer(alice)).status_code == 201
        assert api.get("/api/v2/dags", headers=ADMIN).status_code == 401


def test_a_verified_token_is_remembered_until_it_expires_or_the_keys_change(
        provider: OidcProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    from leoflow.api.oidc import verifier as module
    from leoflow.settings import load_settings

    now = [time.time()]
    settings = load_settings(oidc_env(provider, LEOFLOW_OIDC_KEYS_MIN_INTERVAL="0")).oidc
    checks: list[str] = []
    real_decode = module.jwt.decode

    def counting_decode(token: str, *args: Any, **kwargs: Any) -> Any:
        checks.append(token)
        return real_decode(token, *args, **kwargs)

    monkeypatch.setattr(module.jwt, "decode", counting_decode)
    keys = module.ProviderKeys(settings.issuer or "", max_age=3600, min_interval=0)
    verifier = module.OidcVerifier(settings, keys, wall=lambda: now[0])
    try:
        token = provider.device_login("alice")["id_token"]
        for _ in range(5):
            assert verifier.verify(token).subject == "alice"
        assert len(checks) == 1  # one signature check, then the remembered principal
        now[0] += module.CACHE_SECONDS + 1
        verifier.verify(token)
        assert len(checks) == 2  # remembered for CACHE_SECONDS at most
        provider.rotate(keep_old=True)
        verifier.verify(provider.device_login("alice")["id_token"])  # a new kid: the keys are fetched again
        verifier.verify(token)
        assert len(checks) == 4  # the key set changed: the old token is checked again
        with pytest.raises(module.TokenRefused):
            verifier.verify(signed(provider, aud="another-app"))
        with pytest.raises(module.TokenRefused):
            verifier.verify(signed(provider, aud="another-app"))  # refusals are never remembered
    finally:
        keys.close()
