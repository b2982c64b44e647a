"""``leoflow login`` against a real OpenID Connect provider process, then client verbs with the stored token.

The person's part (entering the device code, signing in on the provider's page) is done over
HTTP as a browser would post the provider's forms; everything else is the real CLI, in its own
process, against a real API.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.client import credentials, oidc
from tests.api.conftest import api_settings
from tests.api.live import serve
from tests.harness.oidc_provider import CLIENT_ID, PASSWORD, OidcProvider

USERS: dict[str, dict[str, Any]] = {
    "alice": {"email": "alice@example.com", "groups": ["platform-admins"]},
    "bob": {"email": "bob@example.com", "groups": ["data"]},
}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    with OidcProvider(tmp_path_factory.mktemp("idp"), USERS) as idp:
        yield idp


@pytest.fixture
def api_url(database_url: str, provider: OidcProvider) -> Iterator[str]:
    settings = api_settings(database_url, LEOFLOW_OIDC_ISSUER=provider.issuer, LEOFLOW_OIDC_CLIENT_ID=CLIENT_ID,
                            LEOFLOW_OIDC_ADMIN_GROUPS="platform-admins")
    with serve(create_app(settings)) as url:
        yield url


def cli_env(tmp_path: Path, api_url: str, provider: OidcProvider, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    return {**env, "XDG_CONFIG_HOME": str(tmp_path / "config"), "LEOFLOW_URL": api_url,
            "LEOFLOW_HOME": str(tmp_path / "home"), "LEOFLOW_OIDC_ISSUER": provider.issuer,
            "LEOFLOW_OIDC_CLIENT_ID": CLIENT_ID, **extra}


def leoflow(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leoflow", *argv], env=env, capture_output=True, text=True,
                          timeout=60)


def device_login_as(env: dict[str, str], provider: OidcProvider, user: str) -> subprocess.CompletedProcess[str]:
    """``leoflow login``, with ``user`` entering the printed code on the provider's page."""
    process = subprocess.Popen([sys.executable, "-m", "leoflow", "login"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    first = process.stdout.readline()
    assert "enter the code" in first, first
    url, code = first.split("open ")[1].split(" and enter the code ")
    approve = httpx.post(url.strip(), data={"user_code": code.strip(), "username": user, "password": PASSWORD})
    assert approve.status_code == 200, approve.text
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, first + out, err)


def test_device_login_stores_a_0600_token_the_client_verbs_send(tmp_path: Path, api_url: str,
                                                                provider: OidcProvider) -> None:
    env = cli_env(tmp_path, api_url, provider)
    refused = leoflow(env, "dags", "list")
    assert refused.returncode != 0 and "unauthorized" in refused.stderr

    done = device_login_as(env, provider, "alice")
    assert done.returncode == 0, done.stderr
    assert "Signed in to" in done.stdout
    path = tmp_path / "config" / "leoflow" / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    stored = json.loads(path.read_text())["servers"][api_url]
    assert stored["bearer"] not in done.stdout + done.stderr  # the token is never printed

    listed = leoflow(env, "dags", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    dag = tmp_path / "dag.yaml"
    dag.write_text("dag_id: by-alice\nschedule: null\ntasks:\n  - {id: a, image: busybox, command: [\"true\"]}\n")
    assert leoflow(env, "dags", "apply", str(dag)).returncode == 0  # alice is in the admin group

    out = leoflow(env, "login", "--logout")
    assert out.returncode == 0 and "Signed out" in out.stdout
    assert "unauthorized" in leoflow(env, "dags", "list").stderr


def test_login_needs_only_the_server_url(tmp_path: Path, api_url: str, provider: OidcProvider) -> None:
    env = {k: v for k, v in cli_env(tmp_path, api_url, provider).items() if not k.startswith("LEOFLOW_OIDC_")}
    published = httpx.get(f"{api_url}/auth/oidc").json()
    assert published["issuer"] == provider.issuer and published["client_id"] == CLIENT_ID
    done = device_login_as(env, provider, "alice")
    assert done.returncode == 0, done.stderr
    assert leoflow(env, "dags", "list").returncode == 0


def test_a_reader_signed_in_is_refused_writes(tmp_path: Path, api_url: str, provider: OidcProvider) -> None:
    env = cli_env(tmp_path, api_url, provider)
    assert device_login_as(env, provider, "bob").returncode == 0
    assert leoflow(env, "dags", "list").returncode == 0
    dag = tmp_path / "dag.yaml"
    dag.write_text("dag_id: by-bob\nschedule: null\ntasks:\n  - {id: a, image: busybox, command: [\"true\"]}\n")
    refused = leoflow(env, "dags", "apply", str(dag))
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr


BROWSER_SCRIPT = """
import os, subprocess, sys
if os.environ.get("FAKE_BROWSER_CHILD") != "1":
    # webbrowser waits for the browser command: hand the page to a child and return at once.
    subprocess.Popen([sys.executable, __file__, sys.argv[1]], env={**os.environ, "FAKE_BROWSER_CHILD": "1"},
                     start_new_session=True)
    sys.exit(0)
import httpx
from urllib.parse import urlsplit, parse_qsl
url = sys.argv[1]
page = httpx.get(url)
assert page.status_code == 200, page.text
form = dict(parse_qsl(urlsplit(url).query))
form.update(username=os.environ["FAKE_BROWSER_USER"], password=os.environ["FAKE_BROWSER_PASSWORD"])
parts = urlsplit(url)
answer = httpx.post(f"{parts.scheme}://{parts.netloc}{parts.path}", data=form, follow_redirects=True)
open(os.environ["FAKE_BROWSER_DONE"], "w").write(str(answer.status_code))
"""


def test_browser_login_with_pkce_on_a_loopback_port(tmp_path: Path, api_url: str, provider: OidcProvider) -> None:
    script = tmp_path / "browser.py"
    script.write_text(BROWSER_SCRIPT)
    done = tmp_path / "browser-done"
    env = cli_env(tmp_path, api_url, provider, BROWSER=f"{sys.executable} {script} %s", FAKE_BROWSER_USER="alice",
                  FAKE_BROWSER_PASSWORD=PASSWORD, FAKE_BROWSER_DONE=str(done))
    out = leoflow(env, "login", "--browser")
    assert out.returncode == 0, out.stderr + out.stdout
    assert done.read_text() == "200"  # the loopback page the browser landed on
    assert leoflow(env, "dags", "list").returncode == 0


def test_a_redirect_with_another_state_is_refused(provider: OidcProvider) -> None:
    doc = oidc.discover(provider.issuer)

    def forged_redirect(url: str) -> bool:
        redirect = dict(httpx.QueryParams(url.split("?", 1)[1]))["redirect_uri"]
        threading.Thread(target=lambda: httpx.get(f"{redirect}?code=stolen&state=not-the-one"), daemon=True).start()
        return True

    with pytest.raises(oidc.LoginFailed, match="different state"):
        oidc.browser_login(doc, CLIENT_ID, ("openid",), print, forged_redirect, timeout=20)


def test_an_expiring_stored_token_is_refreshed_before_use(tmp_path: Path, provider: OidcProvider) -> None:
    tokens = provider.device_login("alice")
    path = str(tmp_path / "credentials.json")
    doc = oidc.discover(provider.issuer)
    credentials.save("http://leoflow.example", {
        "issuer": provider.issuer, "client_id": CLIENT_ID, "token_endpoint": doc["token_endpoint"],
        "bearer": tokens["id_token"], "refresh_token": tokens["refresh_token"], "expires_at": time.time() + 10}, path)
    assert credentials.stored_bearer("http://leoflow.other", path=path) is None  # never sent to another server
    fresh = credentials.stored_bearer("http://leoflow.example/", path=path)
    assert fresh and fresh != tokens["id_token"]
    entry = credentials.load_all(path)["http://leoflow.example"]
    assert entry["bearer"] == fresh and entry["expires_at"] > time.time() + 60
    assert entry["refresh_token"] != tokens["refresh_token"]  # the provider rotated it
    assert credentials.stored_bearer("http://leoflow.example", path=path) == fresh  # not refreshed again


def test_login_without_a_provider_says_what_to_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path)
    env["LEOFLOW_URL"] = "http://127.0.0.1:9"  # nothing listens: no server to ask either
    out = leoflow(env, "login")
    assert out.returncode == 2 and "LEOFLOW_OIDC_ISSUER" in out.stderr and "publishes no single sign-on" in out.stderr
    out = leoflow({**env, "LEOFLOW_OIDC_ISSUER": "http://127.0.0.1:9"}, "login", "--client-id", "x")
    assert out.returncode == 1 and "cannot reach the identity provider" in out.stderr
    assert "Traceback" not in out.stderr
