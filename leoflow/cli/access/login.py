"""``leoflow login``: sign a person in through the cluster's OpenID Connect provider, from a terminal.

The device authorization grant first (a URL and a code to enter on any device: works over SSH),
falling back to the browser on this machine (authorization code + PKCE, redirected to a
``127.0.0.1`` port) when the provider offers no device flow or ``--browser`` asks for it. The
tokens are stored for ``LEOFLOW_URL`` (:mod:`leoflow.client.credentials`, mode 0600) and sent by every client
verb from then on, refreshed when they are about to expire. ``--logout`` forgets them.

The provider and client id come from ``--issuer``/``--client-id``, else ``LEOFLOW_OIDC_ISSUER`` /
``LEOFLOW_OIDC_CLIENT_ID``, else the server itself (``GET /auth/oidc``): usually ``LEOFLOW_URL`` is
all a person sets.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from leoflow.errors import SettingsError

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings


def register(sub: Any) -> None:
    text = "sign in through the cluster's OpenID Connect provider and keep the token for LEOFLOW_URL"
    parser = sub.add_parser("login", help=text, description=text)
    # A client verb (no server settings, no logging set-up) that calls no API operation.
    parser.set_defaults(handler=login, client=True, configure_logging=False, stored_login=False)
    parser.add_argument("--issuer", help="the provider's issuer URL (default: LEOFLOW_OIDC_ISSUER)")
    parser.add_argument("--client-id", help="Leoflow's client id at the provider (default: LEOFLOW_OIDC_CLIENT_ID)")
    parser.add_argument("--browser", action="store_true",
                        help="use this machine's browser (authorization code + PKCE) instead of a device code")
    parser.add_argument("--no-open", action="store_true", help="print the browser URL instead of opening it")
    parser.add_argument("--logout", action="store_true", help="forget the stored sign-in for LEOFLOW_URL")


def _configured(args: argparse.Namespace, server_url: str) -> tuple[str, str, tuple[str, ...]]:
    """The provider, client id and scopes: flags, else the environment, else what the server publishes."""
    from leoflow.client.oidc import server_config
    from leoflow.settings import declared as v
    from leoflow.settings.environment import EnvironmentReader

    reader = EnvironmentReader(os.environ)
    issuer = args.issuer or reader.get(v.OIDC_ISSUER)
    client_id = args.client_id or reader.get(v.OIDC_CLIENT_ID)
    scopes = reader.get(v.OIDC_SCOPES)
    if not (issuer and client_id):
        published = server_config(server_url)
        if published is not None:
            issuer, client_id = issuer or published["issuer"], client_id or published["client_id"]
            if reader.raw(v.OIDC_SCOPES) is None and isinstance(published.get("scopes"), list):  # type: ignore[arg-type]
                scopes = tuple(str(s) for s in published["scopes"])
    if not issuer:
        raise SettingsError(v.OIDC_ISSUER.name, f"is not set and {server_url} publishes no single sign-on; pass "
                            "--issuer or set it to the provider's issuer URL")
    if not client_id:
        raise SettingsError(v.OIDC_CLIENT_ID.name, "is not set; pass --client-id or set it to Leoflow's client id")
    return issuer, client_id, scopes


def _open_browser(no_open: bool) -> Any:
    def open_browser(url: str) -> bool:
        if no_open:
            return False
        import webbrowser

        try:
            return webbrowser.open(url)
        except webbrowser.Error:
            return False
    return open_browser


def login(args: argparse.Namespace, client: ClientSettings) -> int:
    from leoflow.client import credentials, oidc

    if args.logout:
        forgotten = credentials.forget(client.url)
        print(f"Signed out of {client.url}." if forgotten else f"No stored sign-in for {client.url}.")
        return 0
    issuer, client_id, scopes = _configured(args, client.url)
    provider = oidc.discover(issuer)

    def show(text: str) -> None:
        print(text, flush=True)

    tokens = None
    if not args.browser:
        try:
            tokens = oidc.device_login(provider, client_id, scopes, show)
        except oidc.DeviceFlowUnavailable as exc:
            print(f"No device sign-in ({exc}); using the browser on this machine.", file=sys.stderr)
    if tokens is None:
        tokens = oidc.browser_login(provider, client_id, scopes, show, _open_browser(args.no_open))
    path = credentials.save(client.url, {
        "issuer": issuer, "client_id": client_id, "token_endpoint": provider["token_endpoint"],
        **credentials.token_fields(tokens)})
    minutes = max(0, round((tokens.expires_at - time.time()) / 60))
    renew = "renewed automatically" if tokens.refresh_token else "run `leoflow login` again then"
    print(f"Signed in to {client.url}; the token expires in {minutes} min ({renew}). Stored in {path}.")
    return 0
