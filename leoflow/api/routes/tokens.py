"""Runtime API token routes: create (the secret shown once), list (never a secret), revoke.

Admins manage every token; a team's editors manage their team's tokens (of roles up to editor:
:func:`leoflow.api.access.token_teams`), and another team's token is not found to them.

``POST /api/v2/tokens`` makes a token with a name, a role, an optional team and an expiry in
days (required, capped by ``LEOFLOW_API_TOKEN_MAX_DAYS``); the answer carries the secret, which
is never shown again — the database keeps its SHA-256 (:mod:`leoflow.model.access.tokens`).
``GET`` lists usable tokens with their last use; ``DELETE /api/v2/tokens/{token_id}`` revokes
one, and every replica refuses it within a second (:mod:`leoflow.api.token_cache`). Every
change is audited with the token's id, never its secret.
"""

from __future__ import annotations

import re
from datetime import timedelta

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.access import token_teams
from leoflow.api.audit import audited_transaction
from leoflow.api.endpoint import api_state, read_document, require_object
from leoflow.api.errors import ApiError, bad_field
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import tokens as token_schemas
from leoflow.api.operations import Operations
from leoflow.clock import SystemClock
from leoflow.db.stores import api_tokens as token_store
from leoflow.model.access.tokens import SHOWN_PREFIX, new_secret, new_token_id, parse_token_request, secret_hash

_TOKEN_ID = re.compile(r"^[0-9a-f]{16}$")

OPERATIONS = Operations()

TOKENS = "/api/v2/tokens"


def path_token_id(request: Request) -> str:
    """The ``{token_id}`` path parameter; ids that cannot exist are simply not found."""
    token_id: str = request.path_params["token_id"]
    if not _TOKEN_ID.fullmatch(token_id):
        raise ApiError(404, f"token {token_id[:60]!r} not found")
    return token_id


@OPERATIONS("GET", TOKENS, "List API tokens", oas.json_answer("200", "TokenList"), auth="admin")
async def list_tokens(request: Request) -> Response:
    async with api_state(request).db.connect() as conn:
        return JsonResponse({"items": await token_store.list_tokens(conn, teams=token_teams(request))})


@OPERATIONS("POST", TOKENS, "Create API token", oas.json_answer("201", "TokenCreated", "Created"),
            body="TokenCreate", auth="admin", errors="409")
async def create_token(request: Request) -> Response:
    state = api_state(request)
    wanted = parse_token_request(require_object(await read_document(request)),
                                 max_days=state.settings.api.token_max_days)
    teams = state.access.teams() if state.access is not None else None
    if wanted.team is not None and teams is not None and wanted.team not in teams.names:
        known = ", ".join(sorted(teams.names)[:20]) or "none: set LEOFLOW_TEAMS_FILE"
        raise bad_field("team", f"no team {wanted.team!r} is configured (teams: {known})", status=422)
    managed = token_teams(request)
    if managed is not None and (wanted.team is None or wanted.team not in managed):
        raise ApiError(403, "a team editor creates tokens for a team it edits (set team); tokens without a team "
                       "are the admins'", details={"field": "team"})
    secret = new_secret()
    token = token_store.NewToken(
        id=new_token_id(), name=wanted.name, team=wanted.team, role=wanted.role, secret_hash=secret_hash(secret),
        prefix=secret[:SHOWN_PREFIX], expires_at=SystemClock().now() + timedelta(days=wanted.expires_in_days),
        created_by=request.state.principal.name)
    async with audited_transaction(request, status=201) as write:
        write.details.update(token_id=token.id, name=token.name, role=token.role, team=token.team)
        document = await token_store.create_token(write.conn, token)
    state.auth.tokens.invalidate()  # usable on this replica at once, on the others within a second
    return JsonResponse({**document, "secret": secret}, status_code=201, headers={"Cache-Control": "no-store"})


@OPERATIONS("DELETE", TOKENS + "/{token_id}", "Revoke API token", {"204": {"description": "Revoked"}},
            auth="admin", errors="404", params=[token_schemas.TOKEN_ID])
async def revoke_token(request: Request) -> Response:
    token_id = path_token_id(request)
    managed = token_teams(request)
    async with audited_transaction(request, status=204) as write:
        write.details["token_id"] = token_id
        found = await token_store.get_token(write.conn, token_id) if managed is not None else None
        if managed is not None and (found is None or found["team"] not in managed):
            raise ApiError(404, f"token {token_id!r} not found")  # another team's token: not confirmed
        if not await token_store.revoke_token(write.conn, token_id, SystemClock().now()):
            raise ApiError(404, f"token {token_id!r} not found")
    api_state(request).auth.tokens.invalidate()  # this replica refuses it at once; the others within a second
    return Response(status_code=204)
