"""Where ``leoflow login`` keeps a person's tokens, and how a client verb finds them again.

Part of the client (it imports nothing of the server, only :mod:`.oidc` to refresh).

One file, ``$XDG_CONFIG_HOME/leoflow/credentials.json`` (``~/.config/leoflow/...``), mode 0600 in a
0700 directory, holding one entry per server URL (``LEOFLOW_URL``): the tokens, and the issuer,
client id and token endpoint needed to refresh them. Keyed by server, as the standalone's token
is: a token obtained for one Leoflow is never sent to another.

A client verb without ``LEOFLOW_TOKEN`` (and without a local standalone's token) sends the stored
bearer for its URL; when it expires within :data:`REFRESH_AHEAD` seconds and a refresh token is
stored, it is refreshed first (the provider is asked only then, so an ordinary verb reads one
small file and imports nothing more).

Failure semantics: a missing, unreadable or malformed file is "no stored login" (the API then
answers 401 and the message says to run ``leoflow login``); a failed refresh sends the old token
anyway and says so on stderr, since the server has the last word. The file is replaced
atomically (written beside, then renamed), never left half-written, and created 0600 from the
start (never world-readable for a moment).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

#: Seconds before expiry at which a stored token is refreshed before use.
REFRESH_AHEAD = 30.0


def credentials_path() -> str:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "leoflow", "credentials.json")


def _server_key(url: str) -> str:
    return url.rstrip("/")


def load_all(path: str | None = None) -> dict[str, Any]:
    try:
        with open(path or credentials_path(), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    servers = doc.get("servers") if isinstance(doc, dict) else None
    return servers if isinstance(servers, dict) else {}


def _write_all(servers: dict[str, Any], path: str) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"servers": servers}, f, indent=1)
        os.chmod(temporary, 0o600)  # whatever the umask did
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def save(url: str, entry: dict[str, Any], path: str | None = None) -> str:
    """Store ``entry`` (tokens + how to refresh them) for server ``url``; returns the file's path."""
    path = path or credentials_path()
    servers = load_all(path)
    servers[_server_key(url)] = entry
    _write_all(servers, path)
    return path


def forget(url: str, path: str | None = None) -> bool:
    path = path or credentials_path()
    servers = load_all(path)
    if servers.pop(_server_key(url), None) is None:
        return False
    _write_all(servers, path)
    return True


def stored_bearer(url: str, *, now: float | None = None, path: str | None = None) -> str | None:
    """The bearer to send to ``url``: the stored one, refreshed first when about to expire."""
    path = path or credentials_path()
    entry = load_all(path).get(_server_key(url))
    if not isinstance(entry, dict) or not isinstance(entry.get("bearer"), str):
        return None
    now = time.time() if now is None else now
    expires_at = entry.get("expires_at")
    if isinstance(expires_at, int | float) and expires_at - REFRESH_AHEAD > now:
        return str(entry["bearer"])
    refresh_token, endpoint, client_id = entry.get("refresh_token"), entry.get("token_endpoint"), entry.get("client_id")
    if not (isinstance(refresh_token, str) and isinstance(endpoint, str) and isinstance(client_id, str)):
        return str(entry["bearer"])
    from leoflow.client.oidc import LoginFailed, refresh  # only now: the provider is asked rarely

    try:
        tokens = refresh(endpoint, client_id, refresh_token)
    except LoginFailed as exc:
        print(f"leoflow: could not refresh the stored sign-in ({exc}); run `leoflow login`", file=sys.stderr)
        return str(entry["bearer"])
    save(url, {**entry, **token_fields(tokens)}, path)
    return tokens.bearer


def token_fields(tokens: Any) -> dict[str, Any]:
    """The stored form of a :class:`leoflow.client.oidc.Tokens`."""
    return {"bearer": tokens.bearer, "refresh_token": tokens.refresh_token, "expires_at": tokens.expires_at}
