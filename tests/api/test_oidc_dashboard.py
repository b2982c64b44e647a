"""Dashboard sign-in through the real provider process: the redirects, the cookies, CSRF, ``next``, provider down.

Driven over HTTP as a browser would (the cookies carried by hand: ``Secure`` cookies over the
test's plain-HTTP loopback are what a browser keeps for ``localhost`` too); the browser itself
signs in in tests/dashboard/test_sso_browser.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.api.oidc.web_login import safe_next
from tests.api.conftest import ADMIN, api_settings, spec
from tests.api.live import client_for
from tests.harness.oidc_provider import CLIENT_ID, PASSWORD, OidcProvider

USERS: dict[str, dict[str, Any]] = {
    "alice": {"email": "alice@example.com", "groups": ["platform-admins"]},
    "bob": {"email": "bob@example.com", "groups": ["data"]},
}
SECRET = "s" * 40


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    with OidcProvider(tmp_path_factory.mktemp("idp"), USERS) as idp:
        yield idp


def sso_env(provider: OidcProvider) -> dict[str, str]:
    return {"LEOFLOW_OIDC_ISSUER": provider.issuer, "LEOFLOW_OIDC_CLIENT_ID": CLIENT_ID,
            "LEOFLOW_OIDC_ADMIN_GROUPS": "platform-admins", "LEOFLOW_OIDC_SESSION_SECRET": SECRET}


@pytest.fixture
def site(database_url: str, provider: OidcProvider) -> Iterator[httpx.Client]:
    with client_for(create_app(api_settings(database_url, **sso_env(provider)))) as client:
        yield client


def cookies_of(answer: httpx.Response) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for header in answer.headers.get_list("set-cookie"):
        jar.load(header)
    return {name: morsel.value for name, morsel in jar.items()}


def with_cookies(cookies: dict[str, str], **headers: str) -> dict[str, str]:
    """Request headers carrying ``cookies`` (what the browser sends back)."""
    return {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()), **headers}


def sign_in(site: httpx.Client, user: str, next_: str = "/#/dags") -> tuple[httpx.Response, dict[str, str]]:
    """The whole browser round trip; returns the callback's answer and the cookies it set."""
    start = site.get("/auth/login", params={"next": next_})
    assert start.status_code == 302, start.text
    login_cookie = cookies_of(start)
    assert "leoflow_login" in login_cookie
    assert "httponly" in start.headers["set-cookie"].lower() and "secure" in start.headers["set-cookie"].lower()
    authorize = start.headers["location"]
    query = {k: v[0] for k, v in parse_qs(urlsplit(authorize).query).items()}
    assert query["code_challenge_method"] == "S256" and query["code_challenge"] and query["nonce"]
    with httpx.Client() as browser:
        assert browser.get(authorize).status_code == 200  # the provider's sign-in page
        back = browser.post(authorize.split("?")[0], data={**query, "username": user, "password": PASSWORD})
    assert back.status_code == 302, back.text
    callback = urlsplit(back.headers["location"])
    answer = site.get(f"{callback.path}?{callback.query}", headers=with_cookies(login_cookie))
    return answer, cookies_of(answer)


def test_sign_in_sets_a_session_the_api_accepts_with_csrf_on_writes(site: httpx.Client) -> None:
    answer, cookies = sign_in(site, "alice")
    assert answer.status_code == 303 and answer.headers["location"] == "/#/dags"
    session_header = next(h for h in answer.headers.get_list("set-cookie") if h.startswith("leoflow_session="))
    assert all(flag in session_header.lower() for flag in ("httponly", "secure", "samesite=lax", "max-age="))
    jar = {"leoflow_session": cookies["leoflow_session"]}
    csrf = cookies["leoflow_csrf"]
    assert site.get("/dashboard/session", headers=with_cookies(jar)).json() == {
        "authenticated": True, "auth": "enabled", "scope": "admin", "name": "alice@example.com", "sso": True,
        "role": "admin", "admin": True}
    assert site.get("/api/v2/dags", headers=with_cookies(jar)).status_code == 200
    # A write without the CSRF header (what a cross-site form would send) is refused, and writes nothing.
    forged = site.post("/api/v2/dags", json=spec("csrf"), headers=with_cookies(jar))
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "csrf"
    wrong = site.post("/api/v2/dags", json=spec("csrf"), headers=with_cookies(jar, **{"X-CSRF-Token": "guess"}))
    assert wrong.status_code == 403
    assert site.get("/api/v2/dags", headers=ADMIN).json()["items"] == []
    made = site.post("/api/v2/dags", json=spec("by-alice"), headers=with_cookies(jar, **{"X-CSRF-Token": csrf}))
    assert made.status_code == 201
    # A tampered session cookie is no session at all.
    tampered = {"leoflow_session": jar["leoflow_session"][:-3] + "AAA"}
    assert site.get("/api/v2/dags", headers=with_cookies(tampered)).status_code == 401
    out = site.post("/auth/logout", headers=with_cookies(jar, **{"X-CSRF-Token": csrf}))
    assert out.status_code == 303 and 'leoflow_session=""' in out.headers["set-cookie"]


def test_a_reader_signed_in_cannot_write(site: httpx.Client) -> None:
    _, cookies = sign_in(site, "bob")
    answer = site.post("/api/v2/dags", json=spec("by-bob"), headers=with_cookies(
        {"leoflow_session": cookies["leoflow_session"]}, **{"X-CSRF-Token": cookies["leoflow_csrf"]}))
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize("target", ["https://evil.example.com/", "//evil.example.com/x", "/\\evil.example.com",
                                    "/\t/evil.example.com", "javascript:alert(1)", "evil.example.com", "", "/" * 3000])
def test_next_never_leaves_the_site(site: httpx.Client, target: str) -> None:
    assert safe_next(target) == "/"
    answer, _ = sign_in(site, "alice", next_=target)
    assert answer.status_code == 303 and answer.headers["location"] == "/"


def test_safe_next_keeps_paths_on_the_site() -> None:
    assert safe_next("/#/dags/etl") == "/#/dags/etl"
    assert safe_next("/runs?x=1") == "/runs?x=1"


def test_a_callback_that_did_not_start_here_is_refused(site: httpx.Client) -> None:
    assert site.get("/auth/callback", params={"code": "x", "state": "y"}).status_code == 400
    start = site.get("/auth/login")
    answer = site.get("/auth/callback", params={"code": "x", "state": "not-the-state"},
                     headers=with_cookies(cookies_of(start)))
    assert answer.status_code == 400 and "did not start here" in answer.text
    state = parse_qs(urlsplit(start.headers["location"]).query)["state"][0]
    answer = site.get("/auth/callback", params={"code": "stolen", "state": state},
                     headers=with_cookies(cookies_of(start)))
    assert answer.status_code == 400 and "<" not in re.sub(r"<[^>]+>", "", answer.text)


def test_provider_down_is_a_clear_page_not_a_500(database_url: str, tmp_path: Path) -> None:
    idp = OidcProvider(tmp_path, USERS)  # never started: nothing listens on its port
    with client_for(create_app(api_settings(database_url, **sso_env(idp)))) as site:
        answer = site.get("/auth/login")
        assert answer.status_code == 503 and "cannot be reached" in answer.text
        assert answer.headers["content-type"].startswith("text/html")
        assert site.get("/dashboard/session").json()["sso"] is True


def test_without_a_session_secret_there_is_no_dashboard_sign_in(database_url: str, provider: OidcProvider) -> None:
    env = {k: v for k, v in sso_env(provider).items() if k != "LEOFLOW_OIDC_SESSION_SECRET"}
    with client_for(create_app(api_settings(database_url, **env))) as site:
        assert site.get("/auth/login").status_code == 404
        assert site.get("/dashboard/session").json()["sso"] is False


def test_a_session_near_its_id_tokens_expiry_is_renewed_with_the_refresh_token(database_url: str,
                                                                             tmp_path: Path) -> None:
    idp = OidcProvider(tmp_path, USERS, id_token_lifetime=45)  # within a minute of expiry from the start
    idp.start()
    try:
        with client_for(create_app(api_settings(database_url, **sso_env(idp)))) as site:
            answer, cookies = sign_in(site, "alice")
            session_header = next(h for h in answer.headers.get_list("set-cookie") if h.startswith("leoflow_session="))
            max_age = int(re.search(r"max-age=(\d+)", session_header.lower()).group(1))  # type: ignore[union-attr]
            assert max_age > 43_000  # refreshable: a working day, not the ID token's minute
            old = {"leoflow_session": cookies["leoflow_session"]}
            first = site.get("/api/v2/dags", headers=with_cookies(old))
            assert first.status_code == 200
            renewed = cookies_of(first).get("leoflow_session")
            assert renewed and renewed != old["leoflow_session"]
            assert site.get("/dashboard/session", headers=with_cookies({"leoflow_session": renewed})).json()[
                "name"] == "alice@example.com"
            # The provider rotated the refresh token: the old cookie cannot renew again, but its ID token
            # still verifies until it expires (no renewal, no error).
            again = site.get("/api/v2/dags", headers=with_cookies(old))
            assert again.status_code == 200 and "leoflow_session" not in cookies_of(again)
            # A write through a renewing request keeps needing the CSRF header.
            assert site.post("/api/v2/dags", json=spec("x"), headers=with_cookies(
                {"leoflow_session": renewed})).status_code == 403
    finally:
        idp.stop()
