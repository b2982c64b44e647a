"""Runtime API tokens: create, list, revoke, and what every replica's token cache loads.

Every creation and revocation raises ``api_token_generation.generation`` in its own transaction
(:func:`_bump`); a replica's cache (:mod:`leoflow.api.token_cache`) reads that one row a few times
a second (:func:`generation`, an index-less single-row read) and reloads the usable tokens
(:func:`usable_tokens`) only when it moved. Creation takes the generation row's lock first, so
the count against :data:`leoflow.model.limits.TOKENS` holds under concurrent creations.

The secret never reaches this module: only its SHA-256 and its shown prefix do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from leoflow.errors import Conflict, ValidationFailed
from leoflow.model.access.tokens import check_token_capacity


@dataclass(frozen=True)
class NewToken:
    """What :func:`create_token` stores (the caller made the id, the hash and the prefix)."""

    id: str
    name: str
    team: str | None
    role: str
    secret_hash: str
    prefix: str
    expires_at: datetime
    created_by: str


_COLUMNS = "id, name, team, role, prefix, expires_at, created_by, created_at, last_used_at, revoked_at"


def token_document(row: Any) -> dict[str, Any]:
    """A token as the API shows it: never the secret or its hash."""
    return {"id": row.id, "name": row.name, "team": row.team, "role": row.role, "prefix": row.prefix,
            "expires_at": row.expires_at.isoformat(), "created_by": row.created_by,
            "created_at": row.created_at.isoformat(),
            "last_used_at": row.last_used_at.isoformat() if row.last_used_at else None,
            "revoked_at": row.revoked_at.isoformat() if row.revoked_at else None}


async def _bump(conn: AsyncConnection) -> int:
    return int((await conn.execute(text(
        "UPDATE api_token_generation SET generation = generation + 1 RETURNING generation"))).scalar_one())


async def generation(conn: AsyncConnection) -> int:
    """The counter every change raises (see the module docstring)."""
    return int((await conn.execute(text("SELECT generation FROM api_token_generation"))).scalar_one())


async def usable_tokens(conn: AsyncConnection) -> tuple[int, list[Any]]:
    """The generation and every token neither revoked nor expired, read in one snapshot.

    Both in one statement, so the tokens are exactly those of the generation returned: a reload
    never pairs an old list with a new generation (and then misses the next change).
    """
    rows = list(await conn.execute(text("""
        SELECT g.generation, t.id, t.name, t.team, t.role, t.secret_hash, t.expires_at
        FROM api_token_generation g
        LEFT JOIN api_tokens t ON t.revoked_at IS NULL AND t.expires_at > now()
    """)))
    return int(rows[0].generation), [r for r in rows if r.id is not None]


async def create_token(conn: AsyncConnection, token: NewToken) -> dict[str, Any]:
    """Store ``token``; Conflict when :data:`~leoflow.model.limits.TOKENS` usable tokens exist."""
    await _bump(conn)  # first: its row lock serialises creators, so the count below holds
    count = int((await conn.execute(text(
        "SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL AND expires_at > now()"))).scalar_one())
    try:
        check_token_capacity(count)
    except ValidationFailed as exc:
        raise Conflict(exc.problem) from None
    row = (await conn.execute(text(f"""
        INSERT INTO api_tokens (id, name, team, role, secret_hash, prefix, expires_at, created_by)
        VALUES (:id, :name, :team, :role, :secret_hash, :prefix, :expires_at, :created_by)
        RETURNING {_COLUMNS}
    """), {"id": token.id, "name": token.name, "team": token.team, "role": token.role,
           "secret_hash": token.secret_hash, "prefix": token.prefix, "expires_at": token.expires_at,
           "created_by": token.created_by[:100]})).one()
    return token_document(row)


async def list_tokens(conn: AsyncConnection, *, teams: frozenset[str] | None = None) -> list[dict[str, Any]]:
    """Usable tokens (neither revoked nor expired), newest first; only those of ``teams`` when given."""
    rows = await conn.execute(text(f"""
        SELECT {_COLUMNS} FROM api_tokens
        WHERE revoked_at IS NULL AND expires_at > now()
          AND (CAST(:every AS boolean) OR team = ANY(CAST(:teams AS text[])))
        ORDER BY created_at DESC, id
    """), {"every": teams is None, "teams": sorted(teams or ())})
    return [token_document(r) for r in rows]


async def get_token(conn: AsyncConnection, token_id: str) -> dict[str, Any] | None:
    row = (await conn.execute(text(f"SELECT {_COLUMNS} FROM api_tokens WHERE id = :id"), {"id": token_id})).first()
    return None if row is None else token_document(row)


async def revoke_token(conn: AsyncConnection, token_id: str, now: datetime) -> bool:
    """Revoke a token (again is a no-op); False when no token has this id."""
    row = (await conn.execute(text("""
        UPDATE api_tokens SET revoked_at = coalesce(revoked_at, :now) WHERE id = :id RETURNING id
    """), {"id": token_id, "now": now})).first()
    if row is None:
        return False
    await _bump(conn)
    return True


async def record_use(conn: AsyncConnection, used: dict[str, datetime]) -> None:
    """Set ``last_used_at`` of each token id to its moment (never backwards); the caller batches."""
    if not used:
        return
    ids, moments = list(used), list(used.values())
    await conn.execute(text("""
        UPDATE api_tokens t SET last_used_at = u.moment
        FROM unnest(CAST(:ids AS text[]), CAST(:moments AS timestamptz[])) AS u(id, moment)
        WHERE t.id = u.id AND (t.last_used_at IS NULL OR t.last_used_at < u.moment)
    """), {"ids": ids, "moments": moments})


async def purge_spent_tokens(conn: AsyncConnection, cutoff: datetime, *, limit: int) -> int:
    """Delete up to ``limit`` tokens revoked or expired before ``cutoff``; returns how many.

    They are no longer usable (no replica's cache holds them), so the generation does not move.
    The audit log keeps each event's actor by name, so it stays readable without these rows.
    """
    rows = await conn.execute(text("""
        DELETE FROM api_tokens WHERE id IN (
            SELECT id FROM api_tokens WHERE revoked_at < :cutoff OR expires_at < :cutoff ORDER BY id LIMIT :limit)
        RETURNING id
    """), {"cutoff": cutoff, "limit": limit})
    return len(rows.all())
