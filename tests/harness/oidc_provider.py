"""A real OpenID Connect provider for the tests, run as its own process: Authlib's grants behind Flask.

Not a stub of Leoflow's verification: the grants, PKCE, the device flow, token signing and the
JWT access-token profile are Authlib's (``authlib.oauth2`` / ``authlib.oidc.core``, RFC 6749,
7636, 8628, 9068; keys and signatures by joserfc). This module only supplies what a provider
product supplies: users, one public client, in-memory storage, a login page and the standard
endpoints (discovery, JWKS, authorize, token, device authorization, userinfo).

Test controls, apart from the standard endpoints (what an operator does to a real provider):

- the signing keys are read from a JSON file (a JWKS with private keys; the first signs) that
  the test writes, so it can also sign hostile tokens with the provider's own key;
  ``POST /_test/reload`` reads the file again: key rotation without a restart;
- ``GET /_test/stats`` counts the JWKS fetches (the rate-limit tests read it).

Run: ``python -m tests.harness.oidc_provider --port P --keys FILE --users FILE``; it prints
``ready`` once listening. :class:`OidcProvider` starts and stops it for a test.
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

CLIENT_ID = "leoflow-cli"
#: The audience of the provider's JWT access tokens (the API, as a resource server).
API_AUDIENCE = "leoflow-api"
PASSWORD = "correct horse"
TOKEN_LIFETIME = 300


def _serve(port: int, keys_file: Path, users_file: Path,  # pragma: no cover - runs in the subprocess
           id_token_lifetime: int) -> None:
    import flask
    from authlib.integrations.flask_oauth2 import AuthorizationServer
    from authlib.oauth2.rfc6749 import grants
    from authlib.oauth2.rfc7636 import CodeChallenge
    from authlib.oauth2.rfc8628 import DeviceAuthorizationEndpoint, DeviceCodeGrant, DeviceCredentialDict
    from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
    from authlib.oidc.core import UserInfo
    from authlib.oidc.core.grants import OpenIDCode, OpenIDToken
    from joserfc.jwk import KeySet
    from markupsafe import escape

    issuer = f"http://127.0.0.1:{port}"
    app = flask.Flask(__name__)
    state: dict[str, Any] = {"jwks_hits": 0}
    codes: dict[str, dict[str, Any]] = {}
    devices: dict[str, DeviceCredentialDict] = {}
    user_grants: dict[str, tuple[User, bool]] = {}
    refresh_tokens: dict[str, dict[str, Any]] = {}

    def load_keys() -> None:
        state["keyset"] = KeySet.import_key_set(json.loads(keys_file.read_text()))
        state["signing"] = KeySet([state["keyset"].keys[0]])

    load_keys()
    users_doc: dict[str, dict[str, Any]] = json.loads(users_file.read_text())

    class User:
        def __init__(self, name: str) -> None:
            self.name = name
            self.claims = users_doc[name]

        def get_user_id(self) -> str:
            return str(self.claims.get("sub", self.name))

    class Client:
        def get_client_id(self) -> str:
            return CLIENT_ID

        def get_default_redirect_uri(self) -> str:
            return "http://127.0.0.1/callback"

        def get_allowed_scope(self, scope: str) -> str:
            allowed = {"openid", "email", "profile", "groups", "offline_access"}
            return " ".join(s for s in (scope or "").split() if s in allowed)

        def check_redirect_uri(self, redirect_uri: str) -> bool:
            # RFC 8252 section 7.3: a native app's loopback redirect, any port.
            return redirect_uri.startswith(("http://127.0.0.1:", "http://localhost:"))

        def check_client_secret(self, client_secret: str) -> bool:
            return False

        def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
            return method == "none"

        def check_response_type(self, response_type: str) -> bool:
            return response_type == "code"

        def check_grant_type(self, grant_type: str) -> bool:
            return grant_type in ("authorization_code", "refresh_token", DeviceCodeGrant.GRANT_TYPE)

    client = Client()

    class Code(dict[str, Any]):
        def get_redirect_uri(self) -> str:
            return str(self["redirect_uri"])

        def get_scope(self) -> str:
            return str(self["scope"])

        def get_nonce(self) -> str | None:
            return self.get("nonce")

        def get_auth_time(self) -> int:
            return int(self["auth_time"])

        def get_acr(self) -> None:
            return None

        def get_amr(self) -> None:
            return None

        @property
        def code_challenge(self) -> str | None:
            return self.get("code_challenge")

        @property
        def code_challenge_method(self) -> str | None:
            return self.get("code_challenge_method")

    def user_info(user: User, scope: str) -> UserInfo:
        info = UserInfo(sub=user.get_user_id())
        for claim, value in user.claims.items():
            if claim != "sub":
                info[claim] = value
        return info

    class IdToken(OpenIDToken):
        def resolve_client_private_key(self, client: Client) -> Any:
            return state["signing"]

        def get_client_claims(self, client: Client) -> dict[str, Any]:
            return {"iss": issuer, "aud": [CLIENT_ID], "exp": int(time.time()) + id_token_lifetime}

        def get_encode_header(self, client: Client) -> dict[str, Any]:
            return {"alg": "RS256", "kid": state["signing"].keys[0].kid}

        def generate_user_info(self, user: User, scope: str) -> UserInfo:
            return user_info(user, scope)

    class IdTokenForCode(IdToken, OpenIDCode):
        def exists_nonce(self, nonce: str, request: Any) -> bool:
            return any(c.get("nonce") == nonce for c in codes.values())

    class AuthorizationCode(grants.AuthorizationCodeGrant):
        TOKEN_ENDPOINT_AUTH_METHODS = ["none"]

        def save_authorization_code(self, code: str, request: Any) -> None:
            codes[code] = Code(redirect_uri=request.payload.redirect_uri, scope=request.payload.scope,
                               user=request.user, nonce=request.payload.data.get("nonce"), auth_time=time.time(),
                               code_challenge=request.payload.data.get("code_challenge"),
                               code_challenge_method=request.payload.data.get("code_challenge_method"))

        def query_authorization_code(self, code: str, client: Client) -> Code | None:
            return codes.get(code)

        def delete_authorization_code(self, authorization_code: Code) -> None:
            for key, value in list(codes.items()):
                if value is authorization_code:
                    del codes[key]

        def authenticate_user(self, authorization_code: Code) -> User:
            return authorization_code["user"]  # type: ignore[no-any-return]

    class DeviceCode(DeviceCodeGrant):
        TOKEN_ENDPOINT_AUTH_METHODS = ["none"]

        def query_device_credential(self, device_code: str) -> DeviceCredentialDict | None:
            return devices.get(device_code)

        def query_user_grant(self, user_code: str) -> tuple[User, bool] | None:
            return user_grants.get(user_code)

        def should_slow_down(self, credential: Any) -> bool:
            return False

    class Refresh(grants.RefreshTokenGrant):
        TOKEN_ENDPOINT_AUTH_METHODS = ["none"]
        INCLUDE_NEW_REFRESH_TOKEN = True

        def authenticate_refresh_token(self, refresh_token: str) -> Any:
            found = refresh_tokens.get(refresh_token)
            return _Token(found) if found else None

        def authenticate_user(self, refresh_token: Any) -> User:
            return refresh_token["user"]  # type: ignore[no-any-return]

        def revoke_old_credential(self, refresh_token: Any) -> None:
            refresh_tokens.pop(refresh_token["refresh_token"], None)

    class _Token(dict[str, Any]):
        def check_client(self, client: Client) -> bool:
            return True

        def get_scope(self) -> str:
            return str(self["scope"])

        def get_expires_in(self) -> int:
            return TOKEN_LIFETIME

        def is_expired(self) -> bool:
            return False

        def is_revoked(self) -> bool:
            return False

    class AccessTokens(JWTBearerTokenGenerator):
        def get_jwks(self) -> Any:
            return state["signing"]

        def get_audiences(self, client: Client, user: Any, scope: str) -> str:
            return API_AUDIENCE

        def get_extra_claims(self, client: Client, grant_type: str, user: Any, scope: str) -> dict[str, Any]:
            return {k: v for k, v in (user.claims.items() if user else ()) if k != "sub"}

    def save_token(token: dict[str, Any], request: Any) -> None:
        if token.get("refresh_token"):
            refresh_tokens[token["refresh_token"]] = {**token, "user": request.user}

    server = AuthorizationServer(app, query_client=lambda cid: client if cid == CLIENT_ID else None,
                                 save_token=save_token)
    server.register_token_generator("default", AccessTokens(
        issuer=issuer, refresh_token_generator=lambda **_: secrets.token_urlsafe(32)))
    server.register_grant(AuthorizationCode, [CodeChallenge(required=True), IdTokenForCode(require_nonce=False)])
    server.register_grant(DeviceCode, [IdToken()])
    server.register_grant(Refresh, [IdToken()])

    class DeviceEndpoint(DeviceAuthorizationEndpoint):
        INTERVAL = 1  # seconds between the CLI's polls (5 by default): the tests wait less

        def get_verification_uri(self) -> str:
            return f"{issuer}/device"

        def save_device_credential(self, client_id: str, scope: str, data: dict[str, Any]) -> None:
            devices[data["device_code"]] = DeviceCredentialDict(
                client_id=client_id, scope=scope, expires_at=time.time() + data["expires_in"], **data)

    server.register_endpoint(DeviceEndpoint)

    def authenticated() -> User | None:
        name = flask.request.form.get("username", "")
        if name in users_doc and flask.request.form.get("password") == PASSWORD:
            return User(name)
        return None

    login_form = """<!doctype html><title>Sign in</title><h1>Sign in to the test provider</h1>
<form method="post" action="{action}">{hidden}<label>User <input name="username" id="username"></label>
<label>Password <input name="password" id="password" type="password"></label>
<button type="submit" id="sign-in">Sign in</button></form><p>{error}</p>"""

    @app.get("/.well-known/openid-configuration")
    def discovery() -> Any:
        return {"issuer": issuer, "authorization_endpoint": f"{issuer}/authorize",
                "token_endpoint": f"{issuer}/token", "jwks_uri": f"{issuer}/jwks",
                "userinfo_endpoint": f"{issuer}/userinfo",
                "device_authorization_endpoint": f"{issuer}/device/code",
                "response_types_supported": ["code"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"], "code_challenge_methods_supported": ["S256"],
                "grant_types_supported": ["authorization_code", "refresh_token", DeviceCodeGrant.GRANT_TYPE],
                "token_endpoint_auth_methods_supported": ["none"]}

    @app.get("/jwks")
    def jwks() -> Any:
        state["jwks_hits"] += 1
        return {"keys": [k.as_dict(private=False) for k in state["keyset"].keys]}

    @app.route("/authorize", methods=["GET", "POST"])
    def authorize() -> Any:
        if flask.request.method == "GET":
            try:
                server.get_consent_grant(end_user=None)
            except Exception as exc:  # the provider's own error page, as a real one shows
                return f"invalid request: {exc}", 400
            hidden = "".join(f'<input type="hidden" name="{k}" value="{escape(v)}">'
                             for k, v in flask.request.args.items())
            return login_form.format(action="/authorize", hidden=hidden, error="")
        user = authenticated()
        if user is None:
            return login_form.format(action="/authorize", hidden="", error="wrong user or password"), 401
        return server.create_authorization_response(grant_user=user)

    @app.post("/token")
    def token() -> Any:
        return server.create_token_response()

    @app.post("/device/code")
    def device_code() -> Any:
        return server.create_endpoint_response(DeviceEndpoint.ENDPOINT_NAME)

    @app.route("/device", methods=["GET", "POST"])
    def device() -> Any:
        if flask.request.method == "GET":
            code = escape(flask.request.args.get("user_code", ""))
            return login_form.format(action="/device", error="",
                                     hidden=f'<input name="user_code" id="user_code" value="{code}">')
        user = authenticated()
        code = flask.request.form.get("user_code", "")
        if user is None or not any(d["user_code"] == code for d in devices.values()):
            return login_form.format(action="/device", hidden="", error="wrong user, password or code"), 401
        user_grants[code] = (user, True)
        return "device approved; return to your terminal"

    @app.get("/favicon.ico")
    def favicon() -> Any:
        return "", 204  # a browser asks for it on the sign-in page; a 404 would be a console error

    @app.post("/_test/reload")
    def reload() -> Any:
        load_keys()
        return {"kids": [k.kid for k in state["keyset"].keys]}

    @app.get("/_test/stats")
    def stats() -> Any:
        return {"jwks_hits": state["jwks_hits"]}

    from werkzeug.serving import make_server

    http = make_server("127.0.0.1", port, app, threaded=True)
    print("ready", flush=True)
    http.serve_forever()


# --------------------------------------------------------------------------- the test side

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def new_key(kid: str | None = None, kty: str = "RSA") -> dict[str, Any]:
    """A private JWK (RSA 2048 or EC P-256) for the provider's key file."""
    from joserfc.jwk import ECKey, RSAKey

    key = RSAKey.generate_key(2048, private=True) if kty == "RSA" else ECKey.generate_key("P-256", private=True)
    data: dict[str, Any] = dict(key.as_dict(private=True))
    data["kid"] = kid or secrets.token_hex(8)
    data["use"] = "sig"
    return data


class OidcProvider:
    """The provider process for one test: its URL, its key file, and the controls above."""

    def __init__(self, directory: Path, users: dict[str, dict[str, Any]], port: int | None = None, *,
                 id_token_lifetime: int = TOKEN_LIFETIME) -> None:
        self.id_token_lifetime = id_token_lifetime
        self.directory = directory
        self.port = port or free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.keys_file = directory / "provider-keys.json"
        self.users_file = directory / "provider-users.json"
        self.users_file.write_text(json.dumps(users))
        self.keys: list[dict[str, Any]] = [new_key()]
        self._write_keys()
        self.process: subprocess.Popen[str] | None = None

    def _write_keys(self) -> None:
        self.keys_file.write_text(json.dumps({"keys": self.keys}))

    @property
    def signing_key(self) -> dict[str, Any]:
        return self.keys[0]

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.oidc_provider", "--port", str(self.port), "--keys",
             str(self.keys_file), "--users", str(self.users_file), "--id-token-lifetime",
             str(self.id_token_lifetime)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=Path(__file__).parents[2])
        assert self.process.stdout is not None
        ready = threading.Event()

        def wait_ready() -> None:
            assert self.process is not None and self.process.stdout is not None
            if self.process.stdout.readline().strip() == "ready":
                ready.set()

        threading.Thread(target=wait_ready, daemon=True).start()
        if not ready.wait(30):
            self.stop()
            raise RuntimeError("the OpenID Connect provider did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            if self.process.stdout:
                self.process.stdout.close()
            self.process = None

    def __enter__(self) -> OidcProvider:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def rotate(self, *, keep_old: bool = True) -> dict[str, Any]:
        """A new signing key, published at once (the old one kept in the JWKS, or withdrawn)."""
        key = new_key()
        self.keys = [key, *(self.keys if keep_old else [])]
        self._write_keys()
        httpx.post(f"{self.issuer}/_test/reload").raise_for_status()
        return key

    def jwks_hits(self) -> int:
        return int(httpx.get(f"{self.issuer}/_test/stats").json()["jwks_hits"])

    def device_login(self, user: str, scope: str = "openid email profile offline_access") -> dict[str, Any]:
        """Tokens through the device grant, the person's part done as a browser would post it."""
        with httpx.Client(base_url=self.issuer) as http:
            start = http.post("/device/code", data={"client_id": CLIENT_ID, "scope": scope}).json()
            approve = http.post("/device", data={"user_code": start["user_code"], "username": user,
                                                 "password": PASSWORD})
            assert approve.status_code == 200, approve.text
            answer = http.post("/token", data={"grant_type": DEVICE_GRANT, "device_code": start["device_code"],
                                               "client_id": CLIENT_ID})
            assert answer.status_code == 200, answer.text
            return dict(answer.json())


DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@contextmanager
def running_provider(directory: Path, users: dict[str, dict[str, Any]]) -> Iterator[OidcProvider]:
    provider = OidcProvider(directory, users)
    provider.start()
    try:
        yield provider
    finally:
        provider.stop()


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--keys", type=Path, required=True)
    parser.add_argument("--users", type=Path, required=True)
    parser.add_argument("--id-token-lifetime", type=int, default=TOKEN_LIFETIME)
    args = parser.parse_args()
    _serve(args.port, args.keys, args.users, args.id_token_lifetime)
