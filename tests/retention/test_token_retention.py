"""Retention deletes runtime API tokens revoked or expired more than TOKEN_GRACE_DAYS ago, on the
database's clock, in fenced batches; usable tokens and recently spent ones stay listed."""

from __future__ import annotations

import psycopg
import pytest

from leoflow.errors import FencedOut
from leoflow.housekeeping.retention import TOKEN_GRACE_DAYS, RetentionService, purge_spent_tokens
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.retention.test_retention import as_leader, purged
from tests.scheduler.harness import set_term

#: name -> (expires in, revoked ago): relative to the database's now, in days (None: not revoked).
TOKENS: dict[str, tuple[float, float | None]] = {
    "usable": (10, None),
    "revoked-long-ago": (10, TOKEN_GRACE_DAYS + 1),
    "revoked-lately": (10, TOKEN_GRACE_DAYS - 1),
    "expired-long-ago": (-(TOKEN_GRACE_DAYS + 1), None),
    "expired-lately": (-1, None),
    "expired-and-revoked-long-ago": (-(TOKEN_GRACE_DAYS + 5), TOKEN_GRACE_DAYS + 6),
}
GONE = {"revoked-long-ago", "expired-long-ago", "expired-and-revoked-long-ago"}


def _seed(database_url: str, tokens: dict[str, tuple[float, float | None]]) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        for number, (name, (expires, revoked)) in enumerate(tokens.items()):
            conn.execute(
                "INSERT INTO api_tokens (id, name, role, secret_hash, prefix, expires_at, created_by, revoked_at) "
                "VALUES (%s, %s, 'viewer', %s, 'lft_x', now() + make_interval(days => %s), 'test', "
                "CASE WHEN %s::float8 IS NULL THEN NULL ELSE now() - make_interval(days => %s) END)",
                (f"t{number:04d}", name[:50], f"{number:064x}", expires, revoked, revoked))


def _names(database_url: str) -> set[str]:
    with psycopg.connect(database_url) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM api_tokens")}


def test_spent_tokens_go_after_the_grace_and_usable_ones_stay(database_url: str, settings: Settings) -> None:
    _seed(database_url, TOKENS)
    before = purged("api_tokens")

    async def body(ctx: LeaderContext) -> None:
        await RetentionService(30, audit_days=0, pause=0).purge_once(ctx)  # runs only: tokens still go

    as_leader(settings, body)
    assert _names(database_url) == set(TOKENS) - GONE
    assert purged("api_tokens") - before == len(GONE)


def test_token_purge_runs_in_fenced_batches(database_url: str, settings: Settings) -> None:
    many = {f"spent-{n}": (-(TOKEN_GRACE_DAYS + 2), None) for n in range(7)}
    _seed(database_url, {**many, "usable": (10, None)})

    async def body(ctx: LeaderContext) -> None:
        assert await purge_spent_tokens(ctx.db, fence=(ctx.cluster, ctx.term), batch=3) == 7
        _seed(database_url, {"spent-again": (-(TOKEN_GRACE_DAYS + 2), None)})
        await set_term(ctx.db.engine, ctx.cluster, 2)
        with pytest.raises(FencedOut):  # a replica that lost its term deletes nothing
            await purge_spent_tokens(ctx.db, fence=(ctx.cluster, ctx.term))

    as_leader(settings, body)
    assert _names(database_url) == {"usable", "spent-again"}
