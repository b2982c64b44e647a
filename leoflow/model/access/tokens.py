"""Runtime API tokens: how a secret looks, how it is stored, what a create request may say.

A secret is ``lft_`` followed by 43 characters of URL-safe base64: 32 bytes (256 bits) from
:func:`secrets.token_bytes`. The database keeps only its SHA-256 and its first
:data:`SHOWN_PREFIX` characters (``lft_`` and 8 more, for people to tell tokens apart in a list).

Why a fast hash and not bcrypt/scrypt/argon2: slow, salted hashes exist to protect *low-entropy*
secrets (passwords) from an attacker holding the hashes, who can guess a person's password in
2^30 tries. Nobody guesses a 2^256 space, at any speed, so SHA-256 loses nothing here — and
it keeps verification to a dictionary lookup of a microsecond-hash (a slow hash would cost
50-100 ms of CPU per request and invite a denial of service), which is also why no per-token
salt is needed: the hash itself is the lookup key. GitHub, GitLab and PyPI tokens are stored
the same way.

The ``lft_`` prefix lets secret scanners recognise a leaked Leoflow token, and lets the API
tell a runtime token from a static one or a JWT (which has dots; a runtime token never does).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.access.roles import Role, role_field
from leoflow.model.bounds import check_name, within
from leoflow.model.fields import no_unknown, required

TOKEN_PREFIX = "lft_"
#: Characters of a secret kept in clear, ``lft_`` included: enough to tell 10,000 tokens apart
#: by eye (48 bits), far too few to help guess the other 211 bits.
SHOWN_PREFIX = len(TOKEN_PREFIX) + 8
#: A secret's length: the prefix and 32 bytes in unpadded URL-safe base64.
SECRET_LENGTH = len(TOKEN_PREFIX) + 43


def new_secret() -> str:
    """A fresh secret (see the module docstring)."""
    return TOKEN_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")


def new_token_id() -> str:
    """A token's public id (in URLs, lists and audit): 16 hex characters, not part of the secret."""
    return secrets.token_hex(8)


def secret_hash(secret: str) -> str:
    """The stored form of a secret: its SHA-256, hex (see the module docstring for why SHA-256)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def is_runtime_secret(presented: str) -> bool:
    """Whether a bearer value has a runtime token's shape (checked before hashing it)."""
    return len(presented) == SECRET_LENGTH and presented.startswith(TOKEN_PREFIX)


def check_token_capacity(usable: int) -> None:
    """Whether one more token may be created while ``usable`` exist (:data:`~leoflow.model.limits.TOKENS`)."""
    if usable >= limits.TOKENS.maximum:
        raise ValidationFailed("tokens", f"{usable:,} usable API tokens exist; at most "
                               f"{limits.TOKENS.maximum:,} may (revoke unused ones)")


@dataclass(frozen=True)
class TokenRequest:
    """A validated ``POST /api/v2/tokens`` body."""

    name: str
    role: Role
    team: str | None
    expires_in_days: int


_FIELDS = {"name", "role", "team", "expires_in_days"}


def parse_token_request(body: Mapping[str, Any], *, max_days: int) -> TokenRequest:
    """Validate ``{name, role, team?, expires_in_days}``; ``max_days`` is the cluster's cap
    (``LEOFLOW_API_TOKEN_MAX_DAYS``), itself within :data:`leoflow.model.limits.TOKEN_EXPIRY`."""
    no_unknown(body, _FIELDS, "")
    name = check_name(required(body, "name", ""), "name", limits.TOKEN_NAME)
    role = role_field(required(body, "role", ""), "role")
    team = None if body.get("team") is None else check_name(body["team"], "team", limits.TEAM_NAME)
    days = int(within(required(body, "expires_in_days", ""), "expires_in_days", limits.TOKEN_EXPIRY))
    if days > max_days:
        raise ValidationFailed("expires_in_days", f"must be at most {max_days} (this cluster's "
                               f"LEOFLOW_API_TOKEN_MAX_DAYS), got {days}")
    if role == "admin" and team is not None:
        raise ValidationFailed("team", "must be empty for role admin (admin is cluster-wide)")
    return TokenRequest(name=name, role=role, team=team, expires_in_days=days)
