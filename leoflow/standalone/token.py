"""The admin API token standalone mode generates when ``LEOFLOW_API_TOKENS`` is not set.

Generated once (256 random bits, URL-safe) into ``LEOFLOW_HOME/admin-token``, created with mode
``0600`` atomically (``O_EXCL``: two processes can never both write it), and reused on every later
start so scripts and the CLI keep working across restarts. A token file that has become readable
by others is tightened back to ``0600``; one that is empty or too short is an error naming the
file (delete it to get a new token) rather than silently replaced.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

from leoflow.errors import LeoflowError
from leoflow.settings import ApiToken

logger = logging.getLogger(__name__)

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


def ensure_admin_token(token_file: Path) -> ApiToken:
    """Load the stored admin token, generating it (mode 0600) on first use."""
    try:
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = stat.S_IMODE(token_file.stat().st_mode)
        if mode & 0o077:
            logger.warning("tightening the admin token file to mode 0600", extra={"path": str(token_file)})
            token_file.chmod(0o600)
        token = read_admin_token(token_file)
        assert token is not None
        return ApiToken(name=TOKEN_NAME, scope="admin", token=token)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    logger.info("generated an admin API token", extra={"path": str(token_file)})
    return ApiToken(name=TOKEN_NAME, scope="admin", token=token)
