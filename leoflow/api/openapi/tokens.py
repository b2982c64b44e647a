"""The OpenAPI schemas of the runtime API tokens (operations: :mod:`leoflow.api.routes.tokens`)."""

from __future__ import annotations

from typing import Any

from leoflow.api.openapi.components import STAMP, STR, TIME, name, nullable, number_range, obj, param, ref
from leoflow.model import limits
from leoflow.model.access.roles import ROLES

_ROLE = {"type": "string", "enum": list(ROLES), "description": "viewer, operator, editor (of the token's team) or "
         "admin (cluster-wide)"}
_TOKEN = {
    "id": {"type": "string", "description": "The token's public id (in URLs and the audit log)"},
    "name": STR, "team": nullable("string"), "role": _ROLE,
    "prefix": {"type": "string", "description": "The secret's first 12 characters, to tell tokens apart"},
    "expires_at": STAMP, "created_by": STR, "created_at": STAMP,
    "last_used_at": {**TIME, "description": "Recorded at most once a minute per replica"},
    "revoked_at": TIME,
}

SCHEMAS: dict[str, Any] = {
    "Token": obj(_TOKEN),
    "TokenList": obj({"items": {"type": "array", "items": ref("Token")}}),
    "TokenCreated": obj({**_TOKEN, "secret": {
        "type": "string", "description": "The bearer secret, shown this once: only its SHA-256 is stored"}}),
    "TokenCreate": obj({
        "name": name(limits.TOKEN_NAME), "role": _ROLE, "team": {**nullable("string"), "maxLength": 50},
        "expires_in_days": {**number_range(limits.TOKEN_EXPIRY),
                            "description": "Days until the token expires; at most LEOFLOW_API_TOKEN_MAX_DAYS"},
    }, required=["name", "role", "expires_in_days"]),
}

TOKEN_ID = {**param("token_id", "path", {"type": "string"}, "Token id"), "example": "3f9c2a71b0d4e815"}
