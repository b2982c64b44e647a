"""The admin API token standalone mode generates when ``LEOFLOW_API_TOKENS`` is not set, and the
secret files it is kept in (the embedded PostgreSQL's password uses the same: :func:`ensure_secret`).

Generated once (256 random bits, URL-safe) into ``LEOFLOW_HOME/admin-token``, created with mode
``0600`` atomically (``O_EXCL``: two processes can never both write it), and reused on every later
start so scripts and the CLI keep working across restarts. A token file that has become readable
by others is tightened back to ``0600``; one that is empty or too short is an error naming the
file (delete it to get a new token) rather than silently replaced.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from leoflow.errors import LeoflowError

if TYPE_CHECKING:
    from leoflow.settings import ApiToken

# The CLI's client verbs read the token (read_admin_token) before their request: this module
# imports logging, secrets and the settings groups only where a token is generated or checked.

TOKEN_NAME = "admin"
_MIN_LENGTH = 8


class TokenFileError(LeoflowError):
    """The stored admin token cannot be used."""


def read_admin_token(token_file: Path) -> str | None:
    """The stored token, or None when there is none (used by the CLI to find a local server)."""
    try:
        token = token_file.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TokenFileError(f"{token_file}: cannot be read ({exc.strerror})") from None
    if len(token) < _MIN_LENGTH:
        raise TokenFileError(f"{token_file}: holds no valid token; delete it to generate a new one")
    return token


def ensure_secret(path: Path, what: str) -> tuple[str, bool]:
    """The secret stored in ``path``, generated (mode 0600, URL-safe) on first use; (secret, generated)."""
    import logging
    import secrets

    logger = logging.getLogger(__name__)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            logger.warning("tightening a secret file to mode 0600", extra={"path": str(path), "secret": what})
            path.chmod(0o600)
        secret = read_admin_token(path)
        assert secret is not None
        return secret, False
    secret = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    logger.info("generated a secret", extra={"path": str(path), "secret": what})
    return secret, True


def ensure_admin_token(token_file: Path) -> ApiToken:
    """Load the stored admin token, generating it (mode 0600) on first use."""
    from leoflow.settings import ApiToken

    token, _ = ensure_secret(token_file, "admin API token")
    return ApiToken(name=TOKEN_NAME, scope="admin", token=token)
